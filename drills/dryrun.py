"""Dry run: what a drill or a game-day plan would do, touching nothing.

No stack is brought up, no API is called, no ledger is read or written: the plan is computed
from the scenario, the stack profile (or the attach endpoints as given) and the safety policy.
"""

from __future__ import annotations

from typing import Any

from drills.common.errors import InputError, SafetyViolation
from drills.common.units import format_duration
from drills.common.yamlsrc import YamlDocument
from drills.engine.monitoring import needs_monitoring
from drills.engine.options import RunOptions, attach_of, attach_urls
from drills.engine.parts import needed_parts
from drills.engine.safety import (
    SafetyPolicy,
    check_scenario,
    fault_windows,
    kubernetes_scope,
)
from drills.model.scenario import Scenario
from injectors.base import InjectionContext, build
from stack.config import load_stack_config, parts_of

__all__ = ["describe", "dry_run"]


def dry_run(
    scenario: Scenario, doc: YamlDocument | None, options: RunOptions, policy: SafetyPolicy
) -> dict[str, Any]:
    """The resolved plan of one drill: stack, targets, faults on the timeline, checks, and the
    safety verdict (``refused`` lists what the policy would refuse)."""
    attach = attach_of(scenario, options)
    stack, hops = _stack_plan(scenario, options, attach)
    faults = _fault_plans(scenario, doc, policy, hops)
    refused: list[str] = []
    try:
        check_scenario(scenario, doc, policy, attach_urls(attach))
    except SafetyViolation as exc:
        refused = exc.problems
    cannot_run: list[str] = []
    for fault in faults:
        hit = fault["would_hit"]
        if isinstance(hit, dict) and "refused" in hit:
            refused.append(f"{fault['kind']} on {fault['target']}: {hit['refused']}")
        if isinstance(hit, dict) and "cannot_run" in hit:
            cannot_run.append(hit["cannot_run"])
    offset, phases = 0.0, []
    for phase in scenario.phases:
        window = {"name": phase.name, "from": offset, "to": offset + phase.duration}
        phases.append({**window, "until": phase.until})
        offset += phase.duration
    return {
        "drill": scenario.drill,
        "title": scenario.title,
        "file": str(doc.path) if doc else None,
        "stack": stack,
        "load": {
            "users": scenario.load.users,
            "rate": scenario.load.rate,
            "arrival": scenario.load.arrival,
            "shape": scenario.load.shape.kind,
            "warmup": scenario.load.warmup,
            "max_tokens": scenario.load.max_tokens,
        },
        "phases": phases,
        "faults": faults,
        "checks": [c.label for c in scenario.expect],
        "cannot_run_here": cannot_run,
        "safety": {"policy": policy.source, "refused": refused},
    }


def _stack_plan(
    scenario: Scenario, options: RunOptions, attach: Any
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The stack the drill would run on (attached, or the profile and the parts it would
    start), and the profile's hops by name (none when attached: resolved at run time)."""
    hops: dict[str, dict[str, Any]] = {}
    if attach is not None:
        stack: dict[str, Any] = {"attach": attach_urls(attach)}
    else:
        profile = options.profile or (
            scenario.stack if isinstance(scenario.stack, str) else "sound"
        )

        config = load_stack_config(profile)
        needed = needed_parts([scenario], config)
        started = parts_of(config) if options.keep_stack else set(needed) | options.with_parts
        stack = {
            "profile": profile,
            "gateway": f"http://{config.host}:{config.gateway.port}",
            "toxiproxy": f"http://{config.host}:{config.toxiproxy.api_port}",
            "parts": {p: needed.get(p, "asked for") for p in sorted(parts_of(config) & started)},
            "left_out": sorted(parts_of(config) - started),
            "monitoring": needs_monitoring(scenario),
        }
        for hop in config.upstreams:
            hops[hop.name] = {
                "role": hop.role,
                "served_name": hop.served_name,
                "proxy": f"{config.host}:{hop.listen_port}",
                "upstream": f"{config.host}:{hop.upstream_port}",
                "l7_hop": None if hop.hop_port is None else f"{config.host}:{hop.hop_port}",
            }
    return stack, hops


def _fault_plans(
    scenario: Scenario,
    doc: YamlDocument | None,
    policy: SafetyPolicy,
    hops: dict[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """Each fault on the timeline: its window, what its target resolves to, and what it would
    hit (read from the cluster, the daemon or the hardware; nothing is changed)."""
    faults = []
    for w in fault_windows(scenario):
        spec = scenario.phases[w.phase].inject[w.index]
        would_hit: Any = None
        if spec.orchestrator is not None:
            would_hit = _preflight_hits(scenario, doc, policy, spec)
        elif spec.hardware is not None:
            would_hit = _hardware_hits(spec)
        faults.append(
            {
                "phase": scenario.phases[w.phase].name,
                "kind": w.kind,
                "target": w.target,
                "hop": hops.get(w.target, {"resolved": "at run time, on the attached Toxiproxy"})
                if spec.on_toxiproxy
                else {"resolved": spec.resolves},
                "from": w.start,
                "to": w.end,
                "spec": spec.model_dump(mode="json", by_alias=True, exclude={"kind", "target"}),
                "would_hit": would_hit,
            }
        )
    return faults


def _preflight_hits(
    scenario: Scenario, doc: YamlDocument | None, policy: SafetyPolicy, spec: Any
) -> Any:
    """What a Kubernetes or Docker fault would hit, read from the cluster or the daemon (reads
    only; nothing is changed), or why it would be refused."""

    context = InjectionContext(
        "dry-run",
        "",
        None,
        None,
        kubernetes_scope(scenario, doc, policy),
        policy.max_pods,
        policy.max_containers,
    )
    try:
        return build(spec, context, 0).preflight()  # type: ignore[attr-defined]
    except Exception as exc:
        return {"refused": str(exc)}


def _hardware_hits(spec: Any) -> dict[str, Any]:
    """The device a GPU fault would squeeze, read through NVML (nothing held), or why it
    cannot run on this host (a run is then refused before anything starts)."""

    try:
        found: dict[str, Any] = build(spec, InjectionContext("dry-run", ""), 0).preflight()  # type: ignore[attr-defined]
    except InputError as exc:
        return {"cannot_run": str(exc)}
    return found


def _stack_lines(stack: dict[str, Any]) -> list[str]:
    """The plan's stack: what is attached, or the profile and which of its parts start."""
    if "attach" in stack:
        return ["  stack: attach " + ", ".join(f"{k}={v}" for k, v in stack["attach"].items())]
    lines = [
        f"  stack: profile {stack['profile']} (gateway {stack['gateway']}, "
        f"toxiproxy {stack['toxiproxy']})"
    ]
    lines += [f"    with {part}: {why}" for part, why in stack["parts"].items()]
    lines += [
        f"    without {part} (not needed; a stack already up with it is used as it is)"
        for part in stack["left_out"]
    ]
    if stack.get("monitoring"):
        lines.append(
            "    with its monitoring for this run: Prometheus (stack/monitoring/rules.yml), "
            "Alertmanager, the pager and the exporter (a check asks them)"
        )
    return lines


def _load_line(load: dict[str, Any]) -> str:
    sent = (
        f"{load['users']} user(s), {load['shape']}"
        if load["users"] is not None
        else f"{load['rate']:g} requests/s ({load['arrival']} arrivals, open loop)"
    )
    return f"  load: {sent}, warm-up {format_duration(load['warmup'])} (counts in no window)"


def _offset(seconds: float) -> str:
    """An offset on the timeline, in seconds from its start, every one in the same unit ("2m"
    beside "140s" read as two clocks)."""
    return f"{seconds:g}s"


def describe(plan: dict[str, Any]) -> list[str]:
    """The plan as lines for a terminal."""

    d = _offset
    lines = [f"drill {plan['drill']}: {plan['title']}  ({plan['file']})"]
    lines += _stack_lines(plan["stack"])
    lines.append(_load_line(plan["load"]))
    lines.append("  timeline:")
    for phase in plan["phases"]:
        until = " (or once every killed target is replaced)" if phase.get("until") else ""
        lines.append(
            f"    {d(phase['from']):>6} - {d(phase['to']):<6} phase {phase['name']}{until}"
        )
        for fault in plan["faults"]:
            if fault["phase"] != phase["name"]:
                continue
            hop = fault["hop"]
            where = (
                f"proxy {hop['proxy']} -> {hop['upstream']} ({hop['role']})"
                if "proxy" in hop
                else hop["resolved"]
            )
            spec = ", ".join(f"{k}={v}" for k, v in fault["spec"].items() if v is not None)
            lines.append(
                f"    {d(fault['from']):>6} - {d(fault['to']):<6}   {fault['kind']} on "
                f"{fault['target']} [{where}] {spec}"
            )
            hit = fault.get("would_hit")
            if isinstance(hit, dict) and "refused" in hit:
                lines.append(f"             REFUSED: {hit['refused']}")
            elif isinstance(hit, dict) and hit.get("pods") is not None:
                for pod in hit["pods"]:
                    lines.append(
                        f"             would hit pod {pod['name']} (uid {pod['uid']}, "
                        f"node {pod['node']})"
                    )
            elif isinstance(hit, dict) and "cannot_run" in hit:
                lines.append(f"             CANNOT RUN HERE: {hit['cannot_run']}")
            elif isinstance(hit, dict) and "would_hold_bytes" in hit:
                lines.append(
                    f"             would hold {hit['would_hold_bytes'] / 2**30:.1f} GiB of GPU "
                    f"{hit['device']} ({hit['name']}: {hit['memory_used'] / 2**30:.1f} of "
                    f"{hit['memory_total'] / 2**30:.1f} GiB in use now)"
                )
            elif isinstance(hit, dict) and hit.get("containers") is not None:
                for box in hit["containers"]:
                    lines.append(
                        f"             would hit container {box['name']} ({box['id']}, "
                        f"{box['status']}) on {hit['host']} (API {hit['api_version']})"
                    )
    lines.append("  checks: " + "; ".join(plan["checks"]))
    for reason in plan.get("cannot_run_here", []):
        lines.append(f"  this host: CANNOT RUN HERE (a run is refused, exit 2): {reason}")
    refused = plan["safety"]["refused"]
    lines.append(
        f"  safety ({plan['safety']['policy']}): "
        + ("allowed" if not refused else "REFUSED:\n    " + "\n    ".join(refused))
    )
    return lines
