"""Agent tools and hops: ``tool_timeouts`` and ``retry_amplification`` (attempts per request,
counted where they arrive)."""

from __future__ import annotations

from drills.checks import observed
from drills.checks.base import (
    Evaluation,
    counter_increase,
    counter_span,
    expected_text,
    result,
)
from drills.model.expect import Check
from drills.model.journal import CheckResult

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


def _gateway_attempts(ev: Evaluation, hop: str | None, start: float, end: float) -> float | None:
    """The embedded gateway's own count of its attempts (its claim), ``None`` if it has none."""
    return counter_increase(
        ev,
        "gateway",
        "drills_gateway_hop_attempts_total",
        lambda labels: (
            (hop is None or labels.get("hop") == hop) and labels.get("outcome") != "breaker_open"
        ),
        start,
        end,
    )


def _gateway_model_attempts(
    ev: Evaluation, hop: str | None, start: float, end: float
) -> tuple[float, float, float] | None:
    """The embedded gateway's own count of its model calls (its claim: the attempts it
    finished at ``hop``, or at every model upstream) with the span its scrapes cover, ``None``
    if it keeps none. Its breaker probes (``probe_ok``/``probe_failed``: a ``GET /health``, not
    a model call) are left out, as the hop's count of model calls leaves them out."""
    return counter_span(
        ev,
        "gateway",
        "drills_gateway_upstream_attempts_total",
        lambda labels: (
            (hop is None or labels.get("upstream") == hop)
            and not labels.get("outcome", "").startswith("probe_")
        ),
        start,
        end,
    )


def _observed_amplification(
    check: Check, ev: Evaluation, target: str, start: float, end: float, requests: int
) -> CheckResult:
    """Model calls that reached the L7 hop per client request (``models``: at every model hop),
    with the gateway's own attempt count beside it when it keeps one."""
    hop = None if target == "models" else target
    seen = observed.attempts(ev, hop, start, end)
    ratio = seen / requests
    outcome = result(check, "retry_amplification", ratio, requests)
    where = "every model hop" if hop is None else target
    outcome.reason = (
        f"{seen} attempts reached {where} (seen at the L7 hop) for {requests} client requests: "
        f"{ratio:.2f} per request"
        + ("" if outcome.passed else f", expected {expected_text(check, '')}")
    )
    counted = _gateway_model_attempts(ev, hop, start, end)
    if counted is not None:
        claimed, since, until = counted
        outcome.claim = (
            f"the gateway counted {claimed:g} attempts ({claimed / requests:.2f} per request)"
        )
        # The gateway counts an attempt when it ends (by outcome), between two scrapes that
        # need not fall on the window's edges: it is held to the attempts the hop saw end
        # between the same two scrapes. Times read on two clocks differ by a few; more is a lie.
        same_span = observed.ended(ev, hop, since, until)
        outcome.disagrees = abs(claimed - same_span) > max(2.0, 0.1 * same_span)
        if outcome.disagrees:
            outcome.reason += f"; the gateway's claim disagrees: {outcome.claim}"
    return outcome


def check_retry_amplification(check: Check, ev: Evaluation) -> CheckResult:
    """Upstream attempts per user request in the window, counted where they arrive.

    Tool hops (``tools`` or ``tools:<tool>``) are counted by the tool server's interception
    layer as they arrive (every call the gateway's agent made, retries and calls it gave up on
    included, whatever the gateway says).
    Model hops behind the harness's L7 hop (a hop's name, or ``models`` for all of them) are
    counted by the hop as they arrive, with the gateway's own count beside it.
    Other hops (Toxiproxy 2.12 counts bytes, not requests) use the gateway's attempt counter."""
    start, end = ev.window(check.during)
    target = check.target or ""
    requests = ev.requests_in(start, end)
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
    elif ev.hop_records is not None and (
        target == "models"
        or target in {r.hop for r in observed.model_calls(ev)}
        # a hop the L7 hop fronts that no call reached, while calls reached the others:
        # the hop's count is 0, not a question for the gateway
        or (target in (ev.l7_hops or ()) and bool(observed.model_calls(ev)))
    ):
        return _observed_amplification(check, ev, target, start, end, len(requests))
    else:
        where = "the gateway"
        attempts = _gateway_attempts(ev, target, start, end)
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
