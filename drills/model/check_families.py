"""The one registry of checks: every check family, what it is called in a scenario, what its
bounds mean, and the function that evaluates it.

A scenario's ``expect[].check`` names a check; ``family_of`` finds its ``CheckFamily``. The
scenario model validates a check against its family (bound kind, target, ``only below``) and
refuses bounds that can never be met or never fail; ``drills.checks.evaluate`` calls the
family's evaluator. Third-party packages add families through the entry-point group
``drills.checks`` (each entry point loads a ``CheckFamily``); ``register`` adds one at run time.

An evaluator is ``evaluate(check, evaluation) -> CheckResult`` (``drills.checks``), given as
``module:attribute`` and imported on first use, so that the scenario model never imports the
evaluation code.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import EntryPoint
from typing import Any, Literal

from pydantic import BaseModel

from drills.common.plugins import Group, PluginError

__all__ = [
    "ALERT_FAMILIES",
    "ALERT_TIMED",
    "BUILTIN",
    "GATED",
    "CheckFamily",
    "accepting",
    "accepts",
    "families",
    "family_of",
    "known_checks",
    "parts_of",
    "plugin_problems",
    "reads",
    "register",
]

BoundKind = Literal["duration", "share", "count", "number", "findings"]
"""What a check's ``below``/``above`` compare with: a duration (written with a unit), a share
(0..1), a count (0 or more), any number, or the number of lint findings tolerated."""

_LIMITS: dict[str, tuple[float, float]] = {
    "duration": (0.0, math.inf),
    "share": (0.0, 1.0),
    "count": (0.0, math.inf),
    "number": (-math.inf, math.inf),
    "findings": (0.0, math.inf),
}


@dataclass(frozen=True)
class CheckFamily:
    """One family of checks (``latency``: ``ttft.p99``, ``e2e.p50``, ...)."""

    family: str
    evaluator: str | Callable[..., Any]
    """``module:attribute`` of ``evaluate(check, evaluation) -> CheckResult``, or the function."""
    bounds: BoundKind
    names: tuple[str, ...] = ()
    """The check names of this family; empty when ``pattern`` decides."""
    pattern: str | None = None
    """A regular expression the whole name must match (``ttft.p99``)."""
    shown_as: str | None = None
    """How the name is listed in an error (``ttft.pNN``)."""
    needs_target: bool = False
    only_below: bool = False
    takes_during: bool = True
    needs_bound: bool = True
    fields: tuple[str, ...] = ()
    """Fields this family requires besides a bound (``source``, ``metric``)."""
    reads: frozenset[str] = frozenset()
    """What the run must collect for this family, beyond the requests: ``monitoring`` (a
    Prometheus and the pager: the embedded stack's, or the team's), ``pager`` (what reached
    the harness's pager: an attached drill must name one), ``engine_metrics`` (an
    engine's own metrics, by ``source``), ``agent_tasks`` (the tool server's audit log),
    ``recall_probe`` (the retrieval recall probe)."""
    parts: frozenset[str] = frozenset()
    """Optional parts of the embedded stack a check of this family needs started (``rag``:
    the retrieval and agent path)."""
    target_rule: Literal["faulted_hop", "killed", "any_fault", "onset"] | None = None
    """What the drill must inject for a check of this family to have something to judge,
    refused at the check's line otherwise: ``faulted_hop``, a fault on its ``target`` when
    every fault is on a Toxiproxy hop (a kill names its container or pod apart from the
    breaker's upstream); ``killed``, a fault that takes its ``target`` away
    (``FaultSpec.kills``); ``any_fault``, a fault of any kind; ``onset``, a fault or a load
    spike that begins in the check's phase (in the run, without one: ``drills.checks.onset``)."""
    takes: tuple[str, ...] = ()
    """Fields this family accepts without requiring them, of those that only some families
    take (``GATED``): ``alert`` on ``alert_quiet`` (a pattern), ``within`` on
    ``workflows_served``."""
    within: str | None = None
    """Where the family requires ``within`` (list it in ``fields`` too): what it bounds, for
    the error when it is missing (``the fault's application``)."""
    no_bounds: str | None = None
    """Where the family takes no ``below``/``above``: what it is judged by instead, for the
    error when one is given (``its bound is 'within' (e.g. within: 30s)``)."""
    pools: bool = False
    """Its value is a statistic of the client's requests alone (a rate, a percentile, a
    spread), so the repetitions of a drill (``drills run --repeat``) pool their requests and
    judge it once, with a narrower interval; otherwise it is judged per repetition and passes
    pooled when it passed in every one."""
    params: type[BaseModel] | None = None
    """The model of the family's own fields (a plugin's threshold, a window, a mode), given in
    a check under ``params:`` and validated with the scenario, before the drill runs, at the
    check's line; the evaluator reads them with ``check.params_as(Model)``. ``None``: the
    family has none, and a check of it that gives ``params`` is refused."""
    unit: str | None = None
    """What a value of a count or number is counted in, shown after it with two decimals
    (``req/s``); ``None``: shown by its bound kind (a duration in ms or s, a share to three
    places, a count as it is)."""
    own_metric: bool = False
    """It reads its own metric (the engines' families: vLLM's, by name across versions), so
    it takes no ``metric``, ``labels`` or ``agg``."""
    worse: Literal["higher", "lower"] | None = None
    """Which way of its value is worse, where every check of the family agrees (latency:
    higher); a relative bound (``not_worse_than``) uses it when the check has no bound to say.
    Families of durations are worse higher unless they say otherwise."""

    def matches(self, name: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, name) is not None
        return name in self.names

    @property
    def listed(self) -> tuple[str, ...]:
        return (self.shown_as,) if self.shown_as else self.names

    @property
    def limits(self) -> tuple[float, float]:
        """The range every observed value of this family lies in."""
        return _LIMITS[self.bounds]

    def evaluate(self, check: Any, evaluation: Any) -> Any:
        fn = self.evaluator
        if isinstance(fn, str):
            module, _, attribute = fn.partition(":")
            fn = getattr(import_module(module), attribute)
        return fn(check, evaluation)


_MONITOR = frozenset({"monitoring"})


def _builtin(name: str, module: str, bounds: BoundKind, **kw: Any) -> CheckFamily:
    """A family with one check of its own name, evaluated by ``drills.checks.MODULE``."""
    evaluator = f"drills.checks.{module}:check_{name}"
    return CheckFamily(name, evaluator, bounds, names=(name,), **kw)


BUILTIN: tuple[CheckFamily, ...] = (
    CheckFamily(
        "latency",
        "drills.checks.latency:check_latency",
        "duration",
        pattern=r"(ttft|itl|e2e)\.p(50|75|90|95|99|999)",
        shown_as="ttft.pNN, itl.pNN, e2e.pNN",
        worse="higher",
        pools=True,
    ),
    CheckFamily(
        "rate",
        "drills.checks.rate:check_rate",
        "share",
        names=("error_rate", "fallback_rate", "success_rate", "truncated_rate"),
        pools=True,
    ),
    CheckFamily(
        "spread",
        "drills.checks.latency:check_spread",
        "count",
        names=("spread.ttft", "spread.itl", "spread.e2e"),
        worse="higher",
        pools=True,
    ),
    CheckFamily(
        "tokens",
        "drills.checks.tokens:check_tokens",
        "count",
        pattern=r"tokens\.p(50|75|90|95|99|999)",
        shown_as="tokens.pNN",
        pools=True,
    ),
    CheckFamily(
        "tokens_ratio",
        "drills.checks.tokens:check_tokens_ratio",
        "count",
        pattern=r"tokens_ratio\.p(50|75|90|95|99|999)",
        shown_as="tokens_ratio.pNN",
    ),
    CheckFamily(
        "group_ratio",
        "drills.checks.groups:check_group_ratio",
        "count",
        pattern=r"group_ratio\.((tokens|ttft|itl|e2e)\.p(50|75|90|95|99|999)|error_rate)",
        shown_as="group_ratio.tokens.pNN, group_ratio.ttft.pNN, group_ratio.e2e.pNN, "
        "group_ratio.itl.pNN, group_ratio.error_rate",
        fields=("group", "against"),
    ),
    CheckFamily(
        "group_ks",
        "drills.checks.groups:check_group_ks",
        "share",
        names=("group_ks.tokens", "group_ks.ttft", "group_ks.e2e"),
        fields=("group", "against"),
    ),
    CheckFamily(
        "engine",
        "drills.checks.engine:check_engine",
        "count",
        pattern=r"engine\.(waiting|running|preemptions|requests\.(stop|length|abort|error|repetition))",
        shown_as="engine.waiting, engine.running, engine.preemptions, engine.requests.REASON "
        "(stop, length, abort, error, repetition)",
        reads=frozenset({"engine_metrics"}),
        own_metric=True,
    ),
    CheckFamily(
        "engine_kv_cache",
        "drills.checks.engine:check_engine",
        "share",
        names=("engine.kv_cache",),
        reads=frozenset({"engine_metrics"}),
        own_metric=True,
    ),
    _builtin("throughput", "throughput", "number", unit="req/s"),
    _builtin("prometheus", "prometheus", "number", fields=("source", "metric")),
    _builtin("promql", "promql", "number", fields=("query",), reads=_MONITOR),
    # Did the team's monitoring see it (``drills.checks.alerts``): bounded by ``within``.
    *(
        _builtin(
            name,
            "alerts",
            "duration",
            needs_bound=False,
            fields=("alert", "within"),
            within=since,
            no_bounds="its bound is 'within' (e.g. within: 30s)",
            reads=reads,
            target_rule="onset",
        )
        for name, since, reads in (
            ("alert_fired", "the fault's application", _MONITOR),
            ("alert_paged", "the fault's application", _MONITOR | {"pager"}),
            ("alert_resolved_within", "the fault's revert to the alert's end", _MONITOR),
        )
    ),
    _builtin(
        "alert_quiet",
        "alerts",
        "count",
        needs_bound=False,
        takes=("alert",),
        no_bounds="it passes when no alert of the set fired in the window",
        reads=_MONITOR,
    ),
    _builtin(
        "alert_runbook",
        "alert_runbook",
        "count",
        needs_bound=False,
        takes=("alert",),
        no_bounds="it passes when every alert of the set that fired in the window names a "
        "runbook step that exists",
        reads=_MONITOR,
    ),
    _builtin(
        "breaker_opened_within",
        "breaker",
        "duration",
        needs_target=True,
        only_below=True,
        target_rule="faulted_hop",
    ),
    _builtin("recovered_within", "recovery", "duration", only_below=True, target_rule="any_fault"),
    _builtin(
        "replacement_ready_within",
        "replacement",
        "duration",
        needs_target=True,
        only_below=True,
        target_rule="killed",
    ),
    _builtin("requests_lost", "replacement", "count", only_below=True),
    _builtin(
        "stack_lint", "lint", "findings", takes_during=False, needs_bound=False, only_below=True
    ),
    _builtin("missing_context_share", "rag", "share", parts=frozenset({"rag"})),
    _builtin("tool_timeouts", "tools", "count", parts=frozenset({"rag"})),
    _builtin("breaker_opens", "breaker", "count", needs_target=True),
    _builtin(
        "retrieval_recall",
        "rag",
        "share",
        parts=frozenset({"rag"}),
        reads=frozenset({"recall_probe"}),
    ),
    _builtin("retry_amplification", "tools", "count", needs_target=True, unit="attempts/request"),
    _builtin("tasks_unfinished", "agent", "count", reads=frozenset({"agent_tasks"})),
    _builtin("tasks_resumed", "agent", "count", reads=frozenset({"agent_tasks"})),
    _builtin("tasks_duplicate_effects", "agent", "count", reads=frozenset({"agent_tasks"})),
    _builtin("tasks_answer_changed", "agent", "count", reads=frozenset({"agent_tasks"})),
    _builtin("workflow_wait", "workflow", "duration", only_below=True),
    _builtin("workflows_served", "workflow", "share", takes=("within",)),
    _builtin("workflow_fallbacks", "workflow", "count", takes=("within",)),
)
"""Every built-in check family, in one place."""

ALERT_TIMED = frozenset(f.family for f in BUILTIN if f.within is not None and "alert" in f.fields)
"""The alert checks bounded by ``within``: how long from the fault to the alert (or page), or
from the fault's revert to the alert's end."""
ALERT_FAMILIES = frozenset(f.family for f in BUILTIN if "alert" in (*f.fields, *f.takes))
"""Every check that reads the team's alerts (its Prometheus's ``ALERTS``, its pages)."""

GATED = ("alert", "query", "within")
"""Fields only some families take (``CheckFamily.fields`` or ``takes``); any other refuses
them."""


def accepts(family: CheckFamily, field: str) -> bool:
    """Whether a check of ``family`` may give ``field`` (``params``: where it has a model
    of its own fields)."""
    if field == "params":
        return family.params is not None
    return field not in GATED or field in family.fields or field in family.takes


def accepting(field: str) -> list[str]:
    """The check names that may give ``field`` (plugins included), for an error."""
    return [n for f in families() if field in GATED and accepts(f, field) for n in f.listed]


_EXTRA: list[CheckFamily] = []


def register(family: CheckFamily) -> None:
    """Add a check family in this process (a plugin's, a test's); a name a built-in family
    has is refused."""
    taken = [n for n in family.names if _builtin_of(n)] + [
        f.family for f in BUILTIN if f.family == family.family
    ]
    if taken:
        raise ValueError(f"check family {family.family!r}: {taken[0]!r} is built in")
    _EXTRA.append(family)


def _builtin_of(name: str) -> CheckFamily | None:
    return next((f for f in BUILTIN if f.matches(name)), None)


def _accept(entry: EntryPoint, loaded: object) -> CheckFamily:
    item = PLUGINS.typed(entry, loaded, CheckFamily, "family")
    for name in item.names:
        builtin = _builtin_of(name)
        if builtin is not None:
            _CLAIMED[name] = PLUGINS.refuse(
                entry,
                f"adds the check {name!r}, which is the built-in family {builtin.family!r}'s; "
                "rename the check (a plugin cannot replace a built-in)",
            )
            raise _CLAIMED[name]
    return item


_CLAIMED: dict[str, PluginError] = {}
"""Check names a plugin family claims that a built-in family has: the error for a drill that
uses one (which of the two it means cannot be told)."""


PLUGINS: Group[CheckFamily] = Group(
    "drills.checks", "check family", lambda: [f.family for f in BUILTIN], _accept
)
"""The ``drills.checks`` entry points (``drills.common.plugins``: one loader, one set of rules
for every group)."""


def families() -> list[CheckFamily]:
    """Every usable family: built in, registered here, from entry points (broken ones left
    out: ``PLUGINS.broken()``)."""
    return [*BUILTIN, *_EXTRA, *PLUGINS.load_all().values()]


def reads(name: str, what: str) -> bool:
    """Whether a check called ``name`` needs ``what`` collected (``CheckFamily.reads``)."""
    family = family_of(name)
    return family is not None and what in family.reads


def parts_of(name: str) -> frozenset[str]:
    """The optional parts of the embedded stack a check called ``name`` needs."""
    family = family_of(name)
    return family.parts if family is not None else frozenset()


def family_of(name: str) -> CheckFamily | None:
    """The family a check name belongs to; ``None`` if none; ``PluginError`` if the plugin
    family it names cannot be used."""
    clash = PLUGINS.clash(name)
    if clash is not None:
        raise clash
    found = next((f for f in families() if f.matches(name)), None)
    if name in _CLAIMED:
        raise _CLAIMED[name]
    if found is None and name in PLUGINS.names():
        PLUGINS.load(name)  # a broken family called like its check: its own error
    return found


def plugin_problems() -> list[PluginError]:
    """Why each ``drills.checks`` entry point that cannot be used cannot be."""
    PLUGINS.load_all()
    return PLUGINS.broken()


def known_checks() -> list[str]:
    """Every check name (or name pattern), for error messages and the schema."""
    return [n for f in families() for n in f.listed]
