"""Agent tools and hops: ``tool_timeouts`` and ``retry_amplification`` (attempts per request,
counted where they arrive)."""

from __future__ import annotations

from drills.checks.base import (
    Evaluation,
    counter_increase,
    expected_text,
    result,
)
from drills.model.journal import CheckResult
from drills.model.scenario import Check

__all__ = ["check_retry_amplification", "check_tool_timeouts"]


def check_tool_timeouts(check: Check, ev: Evaluation) -> CheckResult:
    """Agent tool-call attempts that timed out, at the gateway, in the window."""
    start, end = ev.window(check.during)
    prefix = f"{ev.tools_hop}:"
    hop = check.target

    def match(labels: dict[str, str]) -> bool:
        name = labels.get("hop", "")
        return labels.get("outcome") == "timeout" and (
            name == hop if hop else name.startswith(prefix)
        )

    value = counter_increase(ev, "gateway", "drills_gateway_hop_attempts_total", match, start, end)
    if value is None:
        return result(check, "tool_timeouts", None, 0, "no scrape of the gateway in the window")
    return result(check, "tool_timeouts", value, 1)


def check_retry_amplification(check: Check, ev: Evaluation) -> CheckResult:
    """Upstream attempts per user request in the window, counted where they arrive.

    Tool hops (``tools`` or ``tools:<tool>``) are counted by the tool server's interception
    layer as they arrive (every call the gateway's agent made, retries and calls it gave up on
    included, whatever the gateway says).
    Other hops (Toxiproxy 2.12 counts bytes, not requests) use the gateway's attempt counter."""
    start, end = ev.window(check.during)
    target = check.target or ""
    requests = [r for r in ev.records if start <= r.start < end]
    if not requests:
        return result(check, "retry_amplification", None, 0, "no user request in the window")
    if target == ev.tools_hop or target.startswith(f"{ev.tools_hop}:"):
        tool = target.split(":", 1)[1] if ":" in target else None
        where = "the tool server"
        attempts = counter_increase(
            ev,
            ev.tools_hop,
            "drills_tools_received_total",
            lambda labels: (
                labels.get("agent") == ev.agent_id and (tool is None or labels.get("tool") == tool)
            ),
            start,
            end,
        )
    else:
        where = "the gateway"
        attempts = counter_increase(
            ev,
            "gateway",
            "drills_gateway_hop_attempts_total",
            lambda labels: labels.get("hop") == target and labels.get("outcome") != "breaker_open",
            start,
            end,
        )
    if attempts is None:
        return result(
            check,
            "retry_amplification",
            None,
            0,
            f"no scrape of {where} in the window to count attempts at {target}",
        )
    ratio = attempts / len(requests)
    outcome = result(check, "retry_amplification", ratio, len(requests))
    outcome.reason = (
        f"{attempts:g} attempts at {target} (counted by {where}) for {len(requests)} user "
        f"requests: {ratio:.2f} per request"
        + ("" if outcome.passed else f", expected {expected_text(check, '')}")
    )
    return outcome
