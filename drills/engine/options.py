"""What a run is asked to do and on which stack: ``RunOptions``, and the stack's resolution
(the attach section with the command line's flags over it, or a profile brought up) into the
``StackEndpoints`` a run drills, checked healthy, with the optional parts its drills need.

Kept out of the runner so that what reads options and endpoints (a drill run beside a
running stack, a twin's stack, the gate, the game day, the dry run) needs no runner.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from drills.common.errors import (
    ConfigError,
    InputError,
    StackError,
)
from drills.common.hop import HopClient
from drills.common.redact import redact_url
from drills.common.stats import CONFIDENCE
from drills.common.toxiproxy import ToxiproxyClient
from drills.common.yamlsrc import YamlDocument
from drills.engine.events import EventHandler
from drills.engine.parts import needed_parts
from drills.engine.safety import (
    SafetyPolicy,
    active_runs,
)
from drills.engine.tracing import OtlpTarget
from drills.engine.twin_plan import TwinPlan
from drills.model.check_families import reads
from drills.model.gateways import BUILTIN as BUILTIN_ADAPTERS
from drills.model.gateways import GatewayAdapter
from drills.model.journal import (
    StackInfo,
)
from drills.model.load import SpikeShape
from drills.model.scenario import Attach, PrometheusEndpoint, Scenario, expand_env, toxiproxy_faults
from stack import control
from stack.config import load_stack_config

__all__ = [
    "RunOptions",
    "StackEndpoints",
    "attach_of",
    "attach_urls",
    "base_profile",
    "check_health",
    "l7_hop_names",
    "needs_monitoring",
    "no_other_run",
    "parts_for_all",
    "proxy_names",
    "resolve_stack",
    "scenario_sends_at_once",
    "stack_parts",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StackEndpoints:
    gateway: str
    toxiproxy: str | None
    """Toxiproxy's API; ``None``: an attached stack that names none (its drills have no
    Toxiproxy fault)."""
    metrics: dict[str, str]
    profile: str | None = None
    components: list[dict[str, Any]] = field(default_factory=list)
    adapter: GatewayAdapter = field(default_factory=lambda: BUILTIN_ADAPTERS["drills"])
    """How to read the gateway (``drills.model.gateways``)."""
    hop: str | None = None
    """The control API of the harness's L7 hop (``drills.hop``), when the stack runs one."""
    left_out: list[str] = field(default_factory=list)
    """Optional parts of the profile the embedded stack runs without."""
    prometheus: PrometheusEndpoint | None = None
    """The team's Prometheus (``stack.attach.prometheus``), which ``promql`` checks query."""
    alertmanager: PrometheusEndpoint | None = None
    """The team's Alertmanager (``stack.attach.alertmanager``), read-only."""
    pager: str | None = None
    """Where the harness's pager listens during the drill (``stack.attach.pager``)."""
    exporter: str | None = None
    """Where the harness serves the drill's metrics (``stack.attach.exporter``)."""

    def info(self) -> StackInfo:
        """What the journal keeps of the stack."""
        return StackInfo(
            gateway=self.gateway,
            toxiproxy=self.toxiproxy,
            metrics=self.metrics,
            profile=self.profile,
            components=self.components,
            adapter=self.adapter.name,
            hop=self.hop,
            left_out=self.left_out,
        )


@dataclass
class RunOptions:
    out_dir: Path = Path("runs")
    profile: str | None = None
    attach: Attach | None = None
    state_dir: Path | None = None
    ledger: Path | None = None
    on_event: EventHandler | None = None
    """Told of each thing the run does, as it happens (``drills.engine.events``)."""
    safety: SafetyPolicy | None = None
    """The safety policy; ``None`` loads it from its usual places (see ``drills.engine.safety``)."""
    stack_config: str | None = None
    """The attached stack's config file, for ``stack_lint`` (a profile's is known already)."""
    keep_stack: bool = False
    """The profile's stack, if this run brings it up, is the user's: no later run replaces it
    for another profile (``--keep-stack``). Such a stack is started whole."""
    with_parts: frozenset[str] = frozenset()
    """Optional parts of the profile to start even if the drill does not need them
    (``--with``; a game day or gate: what its other drills need). ``drills.engine.parts``."""
    twin: TwinPlan | None = None
    """Set when this run is on one of the drill's twins (``drills.engine.twin_plan``)."""
    confidence: float = CONFIDENCE
    """The confidence of the checks' intervals (``--confidence``; ``drills.common.stats``)."""
    component_states: dict[str, Path] = field(default_factory=dict)
    """Components of the stack that another supervisor runs, by name: its state directory
    (the gateway of a profile run beside a running stack, ``drills.engine.sharing``)."""
    label: str | None = None
    """What the run is of, as the team names it (``--label``: a release, a git sha); kept in
    the journal and the run history."""
    otlp: OtlpTarget | None = None
    """Where the run is sent as an OpenTelemetry trace (``--otlp``, or the OpenTelemetry
    environment variables; ``drills.engine.tracing``); ``None``: nowhere."""
    history: str | None = None
    """Where the run history is kept (``--history``: a path, ``sqlite:///PATH`` or ``none``;
    ``None``: ``$DRILLS_HISTORY`` or the default file, ``drills.engine.history``)."""


def attach_of(scenario: Scenario, options: RunOptions) -> Attach | None:
    """The stack to attach to: the scenario's attach section, with what the command line gave
    in its place (``--gateway``, ``--adapter``, ...); ``None`` for a stack profile."""
    own = scenario.stack if isinstance(scenario.stack, Attach) else None
    given = options.attach
    if given is None:
        return own if own is None else _with_toxiproxy_if_needed(scenario, own)
    if own is None:
        if "gateway" not in given.model_fields_set:
            raise InputError(
                f"--prometheus, --alertmanager, --pager or --exporter without --gateway: drill "
                f"{scenario.drill} has no attach section that names its gateway; give "
                "--gateway URL"
            )
        attach = Attach.model_validate(given.model_dump(include=given.model_fields_set))
    else:
        attach = own.model_copy(update={f: getattr(given, f) for f in given.model_fields_set})
    return _with_toxiproxy_if_needed(scenario, attach)


def _with_toxiproxy_if_needed(scenario: Scenario, attach: Attach) -> Attach:
    """``attach``, refused (bad input, nothing applied) if the drill injects through a
    Toxiproxy it does not name: a drill without Toxiproxy faults needs none."""
    uses = toxiproxy_faults(scenario)
    if attach.toxiproxy is None and uses:
        raise InputError(
            f"drill {scenario.drill} injects through Toxiproxy ({', '.join(uses)}), and the "
            "stack it attaches to names none: give --toxiproxy URL or stack.attach.toxiproxy"
        )
    return attach


def scenario_sends_at_once(scenario: Scenario) -> bool:
    """Whether the load sends from its start: not a spike shape from zero users, which sends
    nothing until its ``at`` (counted from the drill's start)."""
    shape = scenario.load.shape
    return not (isinstance(shape, SpikeShape) and shape.base == 0)


def base_profile(scenario: Scenario, options: RunOptions) -> str:
    """The profile the drill runs on: ``--profile``, else its ``stack:``, else ``sound``."""
    return options.profile or (scenario.stack if isinstance(scenario.stack, str) else "sound")


def attach_urls(attach: Attach | None) -> dict[str, str]:
    """What an attached drill would contact, by name (for the safety policy)."""
    if attach is None:
        return {}
    hop = {"hop": attach.hop} if attach.hop else {}
    toxiproxy = {"toxiproxy": attach.toxiproxy} if attach.toxiproxy else {}
    prometheus = {"prometheus": attach.prometheus.url} if attach.prometheus else {}
    if attach.alertmanager:
        prometheus["alertmanager"] = attach.alertmanager.url
    return {"gateway": attach.gateway, **toxiproxy, **hop, **prometheus, **attach.metrics}


def needs_monitoring(scenario: Scenario) -> bool:
    """Whether a check of ``scenario`` asks a Prometheus or the pager."""
    return any(c.query is not None or reads(c.check, "monitoring") for c in scenario.expect)


def resolve_stack(scenario: Scenario, options: RunOptions) -> StackEndpoints:
    attach = attach_of(scenario, options)
    if attach is not None:
        adapter = attach.gateway_adapter()
        gateway = attach.gateway.rstrip("/")
        toxiproxy = attach.toxiproxy.rstrip("/") if attach.toxiproxy else None
        metrics = {
            # an adapter whose gateway publishes no metrics (metrics_path: none): no scrape
            **({"gateway": f"{gateway}{adapter.metrics_path}"} if adapter.metrics_path else {}),
            **({"toxiproxy": f"{toxiproxy}/metrics"} if toxiproxy else {}),
            **attach.metrics,
        }
        hop = attach.hop.rstrip("/") if attach.hop else None
        return StackEndpoints(
            gateway,
            toxiproxy,
            metrics,
            adapter=adapter,
            hop=hop,
            prometheus=attach.prometheus,
            alertmanager=attach.alertmanager,
            pager=attach.pager,
            exporter=attach.exporter,
        )

    profile = base_profile(scenario, options)
    status = control.up(
        profile,
        options.state_dir,
        by="user" if options.keep_stack else "run",
        idle=no_other_run,
        parts=None if options.keep_stack else stack_parts([scenario], profile, options),
        # The monitoring the run starts for a drill that asks it: built with the stack's own
        # installs on a first run, beside the engine's, not after the stack is up.
        also=("monitoring",) if needs_monitoring(scenario) else (),
    )
    comps = {c.name: c for c in status.components}
    metrics = {
        "gateway": f"{comps['gateway'].endpoint}/metrics",
        "toxiproxy": f"{comps['toxiproxy'].endpoint}/metrics",
    }
    for c in status.components:
        if c.kind in ("engine", "tools"):
            metrics[c.name] = f"{c.endpoint}/metrics"
        elif c.metrics_url:
            metrics[c.name] = c.metrics_url
    return StackEndpoints(
        comps["gateway"].endpoint,
        comps["toxiproxy"].endpoint,
        metrics,
        profile,
        [c.as_json() for c in status.components],
        hop=comps["hop"].endpoint if "hop" in comps else None,
        left_out=status.left_out,
    )


def stack_parts(scenarios: list[Scenario], profile: str, options: RunOptions) -> frozenset[str]:
    """The optional parts of ``profile`` to start for ``scenarios``: what they need, and what
    ``options.with_parts`` asks for."""

    needed = needed_parts(scenarios, load_stack_config(profile))
    for part, why in needed.items():
        logger.info("the stack's %s part is needed: %s", part, why)
    return frozenset(needed) | options.with_parts


def parts_for_all(scenarios: list[Scenario], options: RunOptions) -> frozenset[str]:
    """The optional parts any of ``scenarios`` (a game day's, a gate's) needs of its profile:
    started with the first drill, so that no later drill restarts the stack for them."""

    parts: set[str] = set(options.with_parts)
    for scenario in scenarios:
        if attach_of(scenario, options) is None:
            profile = base_profile(scenario, options)
            parts |= set(needed_parts([scenario], load_stack_config(profile)))
    return frozenset(parts)


def no_other_run() -> bool:
    """No drill or game day of another process is running on this machine."""
    return all(int(r["pid"]) == os.getpid() for r in active_runs())


def proxy_names(endpoints: StackEndpoints) -> list[str]:
    """The names of the stack's Toxiproxy proxies (``[]``: it names no Toxiproxy)."""
    if endpoints.toxiproxy is None:
        return []
    with ToxiproxyClient(endpoints.toxiproxy) as client:
        return sorted(client.proxies())


def l7_hop_names(endpoints: StackEndpoints) -> list[str]:
    """The hops of the stack's L7 hop (``[]``: it runs none)."""
    if endpoints.hop is None:
        return []
    with HopClient(endpoints.hop) as client:
        return sorted(client.hops())


def check_health(endpoints: StackEndpoints, doc: YamlDocument | None = None) -> None:
    """The gateway's liveness probe as its adapter describes it, and Toxiproxy's API.

    A gateway that answers its probe path with 404 or 405 has no such path: the adapter is
    wrong for it, which is bad input (``ConfigError``, located at the attach section of ``doc``
    when there is one), not a sick stack."""
    health = endpoints.adapter.health
    headers = {k: expand_env(v) for k, v in health.headers.items()}
    probes = [
        ("gateway", f"{endpoints.gateway}{health.path}", health.expect_status, health.timeout)
    ]
    if endpoints.toxiproxy is not None:
        probes.append(("toxiproxy", f"{endpoints.toxiproxy}/version", [200], 5.0))
    for what, url, ok, timeout in probes:
        try:
            response = httpx.get(url, timeout=timeout, headers=headers if what == "gateway" else {})
        except httpx.HTTPError as exc:
            raise StackError(
                f"the stack's {what} at {redact_url(url)} is not reachable: {exc}"
            ) from None
        if what == "gateway" and response.status_code in (404, 405) and 404 not in ok:
            where = f"{doc.path}:{doc.line_of(('stack', 'attach', 'adapter'))} " if doc else ""
            raise ConfigError(
                [
                    f"{where}stack.attach.adapter.health.path: the gateway at "
                    f"{redact_url(endpoints.gateway)} has no {health.path!r} (HTTP "
                    f"{response.status_code}; adapter {endpoints.adapter.name!r}); give its "
                    "liveness path: adapter: {use: NAME, health: {path: /...}}"
                ]
            )
        if response.status_code not in ok:
            hint = (
                f" (adapter {endpoints.adapter.name!r}: its health path, headers and "
                "timeout can be overridden in the attach section's 'adapter')"
                if what == "gateway"
                else ""
            )
            raise StackError(
                f"the stack's {what} at {redact_url(url)} is not healthy: HTTP "
                f"{response.status_code}; expected {', '.join(map(str, ok))}{hint}"
            )
