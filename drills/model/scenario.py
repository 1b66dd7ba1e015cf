"""Typed drill scenarios (``scenarios/*.yaml``).

A scenario names a stack, a load, a timeline of phases with faults at offsets inside them, how a
fallback answer is recognised, the checks that decide the verdict and the conditions that abort
the drill early. ``load_scenario`` returns a validated ``Scenario`` or raises ``ConfigError``
naming file, line, field path, the value and what is allowed; ``check_targets`` does the same for
fault targets the stack does not have.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from drills.common.errors import ConfigError
from drills.common.units import Duration
from drills.common.yamlsrc import YamlDocument, format_path, load_yaml, parse_model
from drills.model.check_families import family_of, reads
from drills.model.expect import AbortCondition, Check, bound_value
from drills.model.faults import (
    BUILTIN_FAULTS,
    HOP_FAULTS,
    Fault,
    FaultSpec,
    KubernetesFault,
    KubernetesScope,
    fault_models,
    replaced_kinds,
    waits_for_replacement,
)
from drills.model.gateways import GatewayAdapter, merged
from drills.model.load import FallbackRule, LoadConfig, ResumePolicy, SpikeShape
from drills.model.records import Record
from drills.model.references import scenario_references
from drills.model.spec import SpecModel as _Model
from drills.model.twins import (
    Twin,
    TwinKubernetes,
    TwinMonitoring,
    twin_file_problems,
    twin_label_problems,
    twin_litellm,
    twin_profile,
    twin_rules,
)
from stack.config import load_stack_config

__all__ = [
    "BUILTIN_FAULTS",
    "HOP_FAULTS",
    "AbortCondition",
    "Attach",
    "Check",
    "FallbackRule",
    "Fault",
    "FaultSpec",
    "LoadConfig",
    "Phase",
    "PrometheusEndpoint",
    "ResumePolicy",
    "Scenario",
    "Twin",
    "TwinKubernetes",
    "TwinMonitoring",
    "bound_value",
    "check_adapter_hops",
    "check_profile",
    "check_targets",
    "expand_env",
    "fault_models",
    "load_scenario",
    "twin_litellm",
    "twin_profile",
    "twin_rules",
    "waits_for_replacement",
]

Loc = tuple[str | int, ...]
ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(value: str) -> str:
    """``${NAME}`` replaced by the environment's value (checked to exist at validation)."""
    return ENV_REF.sub(lambda m: os.environ.get(m.group(1), ""), value)


# -- phases -----------------------------------------------------------------


class Phase(_Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,40}$")
    duration: Duration
    """How long the phase lasts; with ``until``, the most it lasts."""
    inject: list[Fault] = Field(default_factory=list)
    note: str = ""
    until: Literal["replaced"] | None = None
    """``replaced``: the phase ends once every target its kill faults hit has a replacement
    ready (read live, about once a second: the supervisor's events, Docker's health events, the
    pods' watch), at most ``duration`` after it began; the phases after it move up. A game
    day does not sit out the rest of a window sized for the slowest restart."""


class PrometheusEndpoint(_Model):
    """The team's Prometheus or Alertmanager (its HTTP API), read-only: the ``promql`` and
    ``alert_*`` checks query it; nothing is ever written there."""

    url: str = Field(pattern=r"^https?://")
    """The base URL, as its own UI has it (``http://prometheus:9090``)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Sent with every query (``Authorization: Bearer ${PROM_TOKEN}``; ``${NAME}`` read from
    the environment)."""
    timeout: Duration = 10.0

    @model_validator(mode="before")
    @classmethod
    def _url_alone(cls, value: Any) -> Any:
        return {"url": value} if isinstance(value, str) else value


class Attach(_Model):
    """A stack the user runs: its gateway, its Toxiproxy, and how to read the gateway."""

    gateway: str
    toxiproxy: str | None = None
    """Toxiproxy's API, in front of the stack's upstreams: needed only by a drill with
    ``toxiproxy.*`` faults (``toxiproxy_faults``)."""
    hop: str | None = None
    """The control API of the harness's L7 hop (``python -m drills.hop``) in front of the
    stack's model upstreams: its records are the harness's own view of every attempt the
    gateway makes, and ``hop.*`` faults go through it."""
    adapter: str | dict[str, Any] = "drills"
    """The gateway adapter (``drills``, ``litellm``, ``envoy`` or a plugin's), or
    ``{use: NAME, FIELD: value, ...}`` to override fields of one (``drills.model.gateways``)."""
    config: str | None = None
    """The stack's config file (for ``stack_lint``), when the attached stack has one."""
    metrics: dict[str, str] = Field(default_factory=dict)
    """Extra Prometheus endpoints by source name (e.g. ``vllm-0: http://host:8000/metrics``)."""
    prometheus: PrometheusEndpoint | None = None
    """The team's Prometheus, which ``promql`` and ``alert_*`` checks query (a URL, or
    ``{url, headers, timeout}``); read-only."""
    alertmanager: PrometheusEndpoint | None = None
    """The team's Alertmanager (a URL, or ``{url, headers, timeout}``), read-only: what it
    holds at the run's end goes into the journal beside the pages."""
    pager: str | None = None
    """Where the harness's pager listens during the drill (``HOST:PORT``): a webhook receiver
    that the team's Alertmanager routes the drill's alerts to; ``alert_paged`` judges what
    arrived there."""

    exporter: str | None = None
    """Where the harness serves the drill's own metrics during the drill (``HOST:PORT``), for
    the team's Prometheus to scrape: ``drills_fault_active``, ``drills_phase`` and
    ``drills_run_active`` (``drills.engine.exporter``), what a Grafana annotation reads."""

    @field_validator("pager", "exporter")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is not None:
            _host, _, port = value.rpartition(":")
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:9099)")
        return value

    @field_validator("adapter")
    @classmethod
    def _known_adapter(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        merged(value)  # an unknown name or a bad override is refused here, where it is written
        return value

    def gateway_adapter(self) -> GatewayAdapter:
        return merged(self.adapter)


def toxiproxy_faults(scenario: Scenario) -> list[str]:
    """Where ``scenario`` injects through Toxiproxy: ``phases[P].inject[I] (KIND)``, in order."""
    return [
        f"phases[{p}].inject[{i}] ({fault.kind})"
        for p, phase in enumerate(scenario.phases)
        for i, fault in enumerate(phase.inject)
        if fault.on_toxiproxy
    ]


class SLO(_Model):
    """What "recovered" means: every window of ``window`` meets these."""

    error_rate: float = Field(default=0.05, ge=0, le=1)
    """Errors and fallbacks together, as a share of requests."""
    e2e_p90: Duration | None = None
    """By default twice the baseline phase's p90 end-to-end time."""
    window: Duration = 5.0


class Group(_Model):
    """Which requests belong to a group (``Scenario.groups``: stable and canary, one tenant and
    another), from what the harness saw. Every field given must match; a request is in the
    first group it matches, in the order the groups are written."""

    first_call: list[str] = Field(default_factory=list)
    """Hops the request's first model call reached, seen at the harness's L7 hop by trace id
    (failed requests too): the route the gateway chose for it."""
    served_by: list[str] = Field(default_factory=list)
    """Hops whose answer the client got, seen at the L7 hop."""
    upstream: list[str] = Field(default_factory=list)
    """What the gateway says served it (its upstream header: a claim, not an observation)."""
    route: list[str] = Field(default_factory=list)
    """The gateway's route header (``primary``, ``canary``, ``backup``, ``fallback``)."""

    @model_validator(mode="after")
    def _selects(self) -> Group:
        if not (self.first_call or self.served_by or self.upstream or self.route):
            raise ValueError(
                "a group needs at least one of: first_call, served_by, upstream, route "
                "(each a list of names)"
            )
        return self

    def matches(self, record: Record) -> bool:
        for values, seen in (
            (self.first_call, record.first_call),
            (self.served_by, record.served_by),
            (self.upstream, record.upstream),
            (self.route, record.route),
        ):
            if values and seen not in values:
                return False
        return True


def _unwrap_attach(value: Any) -> Any:
    """``{attach: {...}}`` and ``{...}`` mean the same attached stack."""
    if isinstance(value, dict) and set(value) == {"attach"}:
        return value["attach"]
    return value


class Scenario(_Model):
    drill: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,60}$")
    title: str
    description: str = ""
    runbook: str | None = None
    tags: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,40}$")]] = Field(
        default_factory=list
    )
    """Labels to select drills by (``pytest -m TAG``, game-day plans)."""
    stack: Annotated[
        Annotated[str, Tag("profile")] | Annotated[Attach, Tag("attach")],
        Discriminator(lambda v: "profile" if isinstance(v, str) else "attach"),
        BeforeValidator(_unwrap_attach),
    ] = "sound"
    """A stack profile (``sound``, ``unsound``, ...), or ``{attach: {gateway: URL, toxiproxy:
    URL, adapter: NAME}}`` for a stack the user runs (``attach:`` may be left out)."""
    load: LoadConfig
    fallback: FallbackRule = Field(default_factory=FallbackRule)
    phases: list[Phase] = Field(min_length=1)
    expect: list[Check] = Field(min_length=1)
    abort_when: list[AbortCondition] = Field(default_factory=list)
    slo: SLO = Field(default_factory=SLO)
    probe_interval: Duration = 1.0
    retrieval_probe: bool = False
    """Run the retrieval recall probe (source ``retrieval``); on by itself when a
    ``retrieval_recall`` check is expected."""
    retrieval_queries: str | None = None
    """The probe's standard queries (YAML, relative to the scenario); default: the shipped
    ``scenarios/retrieval/standard-queries.yaml``."""
    retrieval_interval: Duration = 5.0
    gpu_telemetry: bool = False
    """Sample every GPU through NVML (source ``gpu`` for ``prometheus`` checks:
    gpu_utilization_percent, gpu_memory_used_bytes, gpu_memory_total_bytes; label ``gpu``)."""
    kubernetes: KubernetesScope | None = None
    """Required by kubernetes faults: the kubeconfig, and the namespaces and contexts allowed."""
    twins: list[Twin] = Field(default_factory=list)
    """Broken stacks this drill must fail on, naming the checks that catch each
    (``drills run --twin``, ``drills gate --twins``)."""
    groups: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,40}$")], Group] = Field(
        default_factory=dict
    )
    """Named groups of requests that ``group_ratio`` and ``group_ks`` checks compare (stable
    and canary), matched in the order written."""

    def group_of(self, record: Record) -> str | None:
        """The first group ``record`` matches (``None``: none)."""
        return next((name for name, g in self.groups.items() if g.matches(record)), None)

    def twin(self, name: str) -> Twin:
        """The twin called ``name``; ``KeyError`` naming the twins there are."""
        for twin in self.twins:
            if twin.key == name:
                return twin
        known = ", ".join(t.key for t in self.twins) or "(none: the drill declares no twins)"
        raise KeyError(f"drill {self.drill!r} has no twin {name!r}; its twins: {known}")

    @property
    def duration(self) -> float:
        return sum(p.duration for p in self.phases)

    def problems(self) -> Iterator[tuple[Loc, str, Any]]:
        """The cross-field rules of a scenario, each problem with its own location: the
        phases and their faults, the phases the checks name, the environment the headers
        read, the Kubernetes scope, the checks' targets, the twins and the groups."""
        yield from self._phase_problems()
        yield from self._check_phase_problems()
        yield from self._header_problems()
        yield from self._kubernetes_problems()
        yield from self._target_problems()
        yield from self._twin_problems()
        yield from self._group_problems()

    def _phase_problems(self) -> Iterator[tuple[Loc, str, Any]]:
        """Phases named once, lasting, waiting only for what they kill; faults inside them."""
        names = [p.name for p in self.phases]
        for i, phase in enumerate(self.phases):
            if names.count(phase.name) > 1:
                yield ("phases", i, "name"), "phase names must be unique", phase.name
            if phase.duration <= 0:
                yield ("phases", i, "duration"), "a phase must last longer than 0s", phase.duration
            if phase.until == "replaced" and not any(
                waits_for_replacement(f.kind) for f in phase.inject
            ):
                yield (
                    ("phases", i, "until"),
                    "the phase injects no kill fault whose replacement it could wait for; "
                    f"'until: replaced' needs one of: {', '.join(replaced_kinds())}",
                    phase.until,
                )
            for j, fault in enumerate(phase.inject):
                if fault.at >= phase.duration:
                    yield (
                        ("phases", i, "inject", j, "at"),
                        f"starts after its phase ends (phase {phase.name!r} lasts "
                        f"{phase.duration:g}s)",
                        fault.at,
                    )
                elif fault.for_ is not None and fault.at + fault.for_ > phase.duration + 1e-9:
                    yield (
                        ("phases", i, "inject", j, "for"),
                        f"ends after its phase (at + for > {phase.duration:g}s); faults are "
                        "reverted when their phase ends",
                        fault.for_,
                    )

    def _check_phase_problems(self) -> Iterator[tuple[Loc, str, Any]]:
        """The phases checks name (``during``, ``baseline``) exist."""
        names = [p.name for p in self.phases]
        for i, check in enumerate(self.expect):
            for field in ("during", "baseline"):
                phase = getattr(check, field)
                if phase is not None and phase not in names:
                    yield (
                        ("expect", i, field),
                        f"no phase of that name; expected one of: {', '.join(names)}",
                        phase,
                    )

    def _header_problems(self) -> Iterator[tuple[Loc, str, Any]]:
        """Headers that read the environment (``${NAME}``) read what is set."""
        attach = self.stack if isinstance(self.stack, Attach) else None
        env_headers: list[tuple[tuple[str, ...], str]] = [
            (("load", "headers", k), v) for k, v in self.load.headers.items()
        ]
        if attach is not None and attach.prometheus is not None:
            env_headers += [
                (("stack", "attach", "prometheus", "headers", k), v)
                for k, v in attach.prometheus.headers.items()
            ]
        for where, value in env_headers:
            for name in ENV_REF.findall(value):
                if name not in os.environ:
                    yield (
                        where,
                        f"refers to ${{{name}}}, which is not set in the environment",
                        None,
                    )

    def _kubernetes_problems(self) -> Iterator[tuple[Loc, str, Any]]:
        """Kubernetes faults inside the drill's declared scope."""
        for i, phase in enumerate(self.phases):
            for j, fault in enumerate(phase.inject):
                if not isinstance(fault, KubernetesFault):
                    continue
                loc = ("phases", i, "inject", j)
                if self.kubernetes is None:
                    yield (
                        (*loc, "kind"),
                        "kubernetes faults need a 'kubernetes:' section with allowed_namespaces "
                        "and allowed_contexts",
                        fault.kind,
                    )
                elif fault.namespace not in self.kubernetes.allowed_namespaces:
                    yield (
                        (*loc, "namespace"),
                        "not an allowed namespace; kubernetes.allowed_namespaces: "
                        + ", ".join(self.kubernetes.allowed_namespaces),
                        fault.namespace,
                    )

    def _target_problems(self) -> Iterator[tuple[Loc, str, Any]]:
        """Checks about a fault's target name one the drill has."""
        targets = {f.target for p in self.phases for f in p.inject}
        only_hops = all(f.on_toxiproxy for p in self.phases for f in p.inject)
        for i, check in enumerate(self.expect):
            family = family_of(check.check)
            rule = family.target_rule if family is not None else None
            # With kill faults (a container, a pod) the breaker's upstream is named apart from
            # the fault's selector; the time counts from the first fault then.
            if rule == "faulted_hop" and only_hops and check.target not in targets:
                yield (
                    ("expect", i, "target"),
                    "no fault of the drill targets it; expected one of: "
                    + (", ".join(sorted(targets)) or "(no faults)"),
                    check.target,
                )
            if rule == "killed":
                kills = {f.target for p in self.phases for f in p.inject if f.kind in f.kills}
                if check.target not in kills:
                    yield (
                        ("expect", i, "target"),
                        "no kill fault of the drill targets it; expected one of: "
                        + (", ".join(sorted(kills)) or "(no kill faults)"),
                        check.target,
                    )
            if rule == "any_fault" and not targets:
                yield ("expect", i, "check"), "the drill injects no fault to recover from", None
            named = check.during is None or check.during in {p.name for p in self.phases}
            if rule == "onset" and named and not self._onset_in(check.during):
                where = f"in phase {check.during!r}" if check.during else "in the drill"
                yield (
                    ("expect", i, "during" if check.during else "check"),
                    f"nothing begins {where} to time it from: it needs a fault applied there "
                    "or a load spike (load.shape: spike) that begins there",
                    check.during,
                )

    def _onset_in(self, during: str | None) -> bool:
        """Whether a fault is applied, or the load spike begins, in phase ``during`` (in the
        drill, with ``None``)."""
        start = 0.0
        for phase in self.phases:
            end = start + phase.duration
            if during is None or phase.name == during:
                if phase.inject:
                    return True
                shape = self.load.shape
                if isinstance(shape, SpikeShape) and start <= shape.at < end:
                    return True
            start = end
        return False

    def _group_problems(self) -> Iterator[tuple[Loc, str, Any]]:
        """Group checks name two groups the drill declares, and two different ones."""
        names = list(self.groups)
        for i, check in enumerate(self.expect):
            for field in ("group", "against"):
                value = getattr(check, field)
                if value is not None and value not in names:
                    yield (
                        ("expect", i, field),
                        "no such group; expected one of the drill's groups: "
                        + (", ".join(names) or "(none: declare them under 'groups:')"),
                        value,
                    )
            if check.group is not None and check.group == check.against:
                yield ("expect", i, "against"), "a group compared with itself", check.against

    def _kubernetes_twin_problems(
        self, i: int, where: TwinKubernetes
    ) -> Iterator[tuple[Loc, str, Any]]:
        """A Kubernetes twin belongs to a drill with kubernetes faults, and its namespace and
        context are ones the drill allows."""
        loc: Loc = ("twins", i, "kubernetes")
        if not any(isinstance(f, KubernetesFault) for p in self.phases for f in p.inject):
            yield loc, "the drill has no kubernetes fault for the twin to move", None
            return
        scope = self.kubernetes
        if scope is None:  # reported on the faults themselves
            return
        for field, allowed in (
            ("namespace", scope.allowed_namespaces),
            ("context", scope.allowed_contexts),
        ):
            value = getattr(where, field)
            if value is not None and value not in allowed:
                yield (
                    (*loc, field),
                    f"not in the drill's kubernetes.allowed_{field}s ({', '.join(allowed)}): "
                    f"list the twin's {field} there too",
                    value,
                )

    def _monitoring_twin_problems(self, i: int) -> Iterator[tuple[Loc, str, Any]]:
        """A monitoring twin replaces the embedded stack's monitoring, which the drill asks."""
        if isinstance(self.stack, Attach):
            yield (
                ("twins", i, "monitoring"),
                "the drill attaches to a stack the user runs, whose monitoring is the "
                "team's: a twin of it is another Prometheus or pager ('attach: "
                "{prometheus: URL}'); a monitoring twin replaces the embedded stack's own",
                None,
            )
        elif not any(c.query is not None or reads(c.check, "monitoring") for c in self.expect):
            yield (
                ("twins", i, "monitoring"),
                "the drill asks its monitoring nothing (no promql or alert check): a "
                "monitoring twin has no check to fail",
                None,
            )

    def _twin_problems(self) -> Iterator[tuple[Loc, str, Any]]:
        """Twins name checks the drill has, once each, and hops its faults target."""
        labels = [c.label for c in self.expect]
        keys = [t.key for t in self.twins]
        for i, twin in enumerate(self.twins):
            if keys.count(twin.key) > 1:
                yield ("twins", i, "name"), "twin names must be unique", twin.key
            if twin.attach is not None and not isinstance(self.stack, Attach):
                yield (
                    ("twins", i, "attach"),
                    "the drill runs on a stack profile: its twin is another profile "
                    "('profile: NAME')",
                    None,
                )
            elif twin.attach is not None and isinstance(self.stack, Attach):
                merged_attach = {**self.stack.model_dump(exclude_unset=True), **twin.attach}
                try:
                    Attach.model_validate(merged_attach)
                except ValueError as exc:
                    first = str(exc).splitlines()
                    yield ("twins", i, "attach"), " ".join(first[1:3]).strip(), twin.attach
            if twin.litellm is not None and not isinstance(self.stack, Attach):
                yield (
                    ("twins", i, "litellm"),
                    "a LiteLLM twin stands in for the gateway of a drill that attaches to one; "
                    "this drill runs on a stack profile: its twin is another profile",
                    twin.litellm,
                )
            if twin.kubernetes is not None:
                yield from self._kubernetes_twin_problems(i, twin.kubernetes)
            if twin.monitoring is not None:
                yield from self._monitoring_twin_problems(i)
            if twin.profile is not None and isinstance(self.stack, Attach):
                yield (
                    ("twins", i, "profile"),
                    "the drill attaches to a stack the user runs: its twin is another such "
                    "stack ('attach: {gateway: URL}', over the drill's own attach fields)",
                    twin.profile,
                )
            conditions = [c.check for c in self.abort_when]
            if twin.aborts is not None and twin.aborts not in conditions:
                yield (
                    ("twins", i, "aborts"),
                    "the drill has no abort condition of that check; expected one of its "
                    "abort_when checks: " + (", ".join(conditions) or "(none: add abort_when)"),
                    twin.aborts,
                )
            yield from twin_label_problems(i, twin, labels)


def _fault_locs(scenario: Scenario, acts_on: str) -> Iterator[tuple[Loc, str]]:
    """Where the faults that act on ``acts_on`` (a trait of ``FaultSpec``: ``on_toxiproxy``,
    ``on_hop``, ``on_stack_process``) name their targets."""
    for i, phase in enumerate(scenario.phases):
        for j, fault in enumerate(phase.inject):
            if getattr(fault, acts_on):
                yield ("phases", i, "inject", j, "target"), fault.target


def check_targets(
    scenario: Scenario,
    doc: YamlDocument | None,
    targets: list[str],
    components: list[str] | None = None,
    l7_hops: list[str] | None = None,
    engines: list[str] | None = None,
) -> None:
    """Refuse faults on targets the stack does not have: ``targets`` are its Toxiproxy proxy
    names, ``components`` its processes, ``l7_hops`` the hops of its L7 hop (``None``: not
    known here, checked when applied; ``[]``: the stack has no L7 hop); and ``engine.*``
    checks of an engine it does not have (``engines``: their metrics sources)."""
    problems = []
    for i, check in enumerate(scenario.expect):
        if engines is None or not reads(check.check, "engine_metrics") or not check.source:
            continue
        if check.source not in engines:
            loc: Loc = ("expect", i, "source")
            problems.append(
                _not_in_stack(doc, loc, format_path(loc), "engine", check.source, engines)
            )
    for acts_on, names, what in (
        ("on_toxiproxy", targets, "hop"),
        ("on_stack_process", components, "component"),
        ("on_hop", l7_hops, "L7 hop"),
    ):
        if names is None:
            continue
        for loc, target in _fault_locs(scenario, acts_on):
            if target not in names:
                problems.append(_not_in_stack(doc, loc, format_path(loc), what, target, names))
    if problems:
        raise ConfigError(problems)


def _not_in_stack(
    doc: YamlDocument | None, loc: Loc, field: str, what: str, value: str, names: list[str]
) -> str:
    """``file:line field: the stack has no WHAT 'value'; expected one of: ...``."""
    where = f"{doc.path}:{doc.line_of(loc)} " if doc else ""
    known = ", ".join(names) or "(none: the stack runs no L7 hop)"
    return f"{where}{field}: the stack has no {what} {value!r}; expected one of: {known}"


def check_adapter_hops(adapter: GatewayAdapter, doc: YamlDocument | None, hops: list[str]) -> None:
    """Refuse an adapter whose maps send a gateway's value to a hop the stack does not have
    (``ConfigError`` located at the attach section's adapter)."""
    problems = []
    maps = {
        "upstream": adapter.upstream.map if adapter.upstream else {},
        "breaker_opened": adapter.breaker_opened.map if adapter.breaker_opened else {},
        "breaker_opens": adapter.breaker_opens.map if adapter.breaker_opens else {},
    }
    for field, mapping in maps.items():
        for key, hop in mapping.items():
            if hop in hops:
                continue
            loc: Loc = ("stack", "attach", "adapter", field, "map", key)
            path = f"stack.attach.adapter.{field}.map.{key}"
            problems.append(_not_in_stack(doc, loc, path, "hop", hop, hops))
    if problems:
        raise ConfigError(problems)


def load_scenario(path: Path | str) -> tuple[Scenario, YamlDocument]:
    """Load and validate a scenario file. When it names a stack profile, fault targets are
    checked against that profile's hops too (without touching anything)."""
    doc = load_yaml(path)
    scenario = parse_model(Scenario, doc)
    broken = [
        f"{doc.path}:{doc.line_of(loc)} {format_path(loc)}: {message}"
        for loc, message, _ in scenario_references(scenario, doc.path.parent)
    ]
    if broken:
        raise ConfigError(broken)
    if isinstance(scenario.stack, str):
        check_profile(scenario, doc, scenario.stack)
    check_twin_profiles(scenario, doc)
    return scenario, doc


def check_twin_profiles(scenario: Scenario, doc: YamlDocument | None) -> None:
    """Each profile twin exists, and has every hop and component the drill's faults target
    except those its ``absent`` lists (and none of those): ``ConfigError`` located at the
    twin, before any stack is started."""

    problems: list[str] = []
    targets = {f.target for p in scenario.phases for f in p.inject}
    for i, twin in enumerate(scenario.twins):
        for j, name in enumerate(twin.absent):
            if name not in targets:
                aloc: Loc = ("twins", i, "absent", j)
                at = f"{doc.path}:{doc.line_of(aloc)} " if doc else ""
                problems.append(
                    f"{at}{format_path(aloc)}: no fault of the drill targets it; expected one "
                    f"of: {', '.join(sorted(targets)) or '(no faults)'} (got {name!r})"
                )
        problems += twin_file_problems(i, twin, doc)
        profile = twin_profile(twin, doc)
        if profile is None:
            continue
        loc: Loc = ("twins", i, "profile")
        where = f"{doc.path}:{doc.line_of(loc)} " if doc else ""
        try:
            config = load_stack_config(profile)
        except ConfigError as exc:
            problems += [f"{where}{format_path(loc)}: {p}" for p in exc.problems]
            continue
        has = {
            "on_toxiproxy": {u.name for u in [*config.upstreams, *config.rag_hops]},
            "on_hop": {u.name for u in config.upstreams if u.hop_port is not None},
            "on_stack_process": set(config.component_names),
        }
        for acts_on, names in has.items():
            for floc, target in _fault_locs(scenario, acts_on):
                if target not in names and target not in twin.absent:
                    problems.append(
                        f"{where}{format_path(loc)}: profile {twin.profile!r} has no "
                        f"{target!r}, which {format_path(floc[:-1])} targets; list it in the "
                        "twin's 'absent' (its faults are then not applied on the twin)"
                    )
        everything = set().union(*has.values())
        for j, name in enumerate(twin.absent):
            aloc = ("twins", i, "absent", j)
            at = f"{doc.path}:{doc.line_of(aloc)} " if doc else ""
            if name in targets and name in everything:
                problems.append(
                    f"{at}{format_path(aloc)}: profile {twin.profile!r} has {name!r}: the "
                    f"drill's faults on it apply on the twin too (got {name!r})"
                )
    if problems:
        raise ConfigError(problems)


def check_profile(scenario: Scenario, doc: YamlDocument | None, profile: str) -> None:
    """Refuse faults on hops or components that the stack profile ``profile`` does not have,
    before any stack is started (``ConfigError`` located in the scenario file)."""

    try:
        config = load_stack_config(profile)
    except ConfigError as exc:
        where = f"{doc.path}:{doc.line_of(('stack',))} " if doc else ""
        raise ConfigError([f"{where}stack: {p}" for p in exc.problems]) from None
    hops = [u.name for u in [*config.upstreams, *config.rag_hops]]
    l7 = [u.name for u in config.upstreams if u.hop_port is not None]
    engines = [n for n in config.component_names if n in {u.name for u in config.upstreams}]
    check_targets(scenario, doc, hops, config.component_names, l7, engines)
