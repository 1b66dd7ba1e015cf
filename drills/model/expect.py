"""What a drill expects (``expect:`` and ``abort_when:`` of a scenario): the checks that decide
its verdict and the conditions that stop it early.

A ``Check`` is validated against its family (``drills.model.check_families``): the fields it
takes, whether it needs a bound and in which unit, and whether that bound can be met and can
fail at all. A check that cannot fail proves nothing, so it is refused where it is written.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from drills.common.plugins import PluginError
from drills.common.units import Duration, parse_duration
from drills.model.check_families import (
    GATED,
    CheckFamily,
    accepting,
    accepts,
    family_of,
    known_checks,
    plugin_problems,
)
from drills.model.score import Severity
from drills.model.spec import SpecModel as _Model

__all__ = ["REFERENCES", "AbortCondition", "Check", "bound_value", "relative_margin"]

P = TypeVar("P", bound=BaseModel)

REFERENCES = ("last_passed", "last")
"""What a relative bound compares with: the last earlier run of the drill that passed, or the
last earlier run whatever its verdict (``drills.engine.relative``)."""


def relative_margin(by: str | float) -> tuple[float, bool]:
    """``by`` as ``(amount, is_share)``: ``10%`` is ``(0.10, True)``, a duration (``200ms``)
    its seconds and ``False``. ``ValueError`` naming what is allowed for anything else."""
    text = by.strip() if isinstance(by, str) else f"{by:g}"
    if isinstance(by, str) and text.endswith("%"):
        try:
            share = float(text[:-1]) / 100
        except ValueError:
            share = -1.0
        if share >= 0:
            return share, True
        raise ValueError(f"by {text!r}: a share is a number of 0 or more and %, e.g. by: 10%")
    if isinstance(by, str):
        try:
            return parse_duration(text), False
        except ValueError:
            pass
    shown = repr(text) if isinstance(by, str) else text
    raise ValueError(
        f"by {shown} needs a unit: a share of the reference run's value (by: 10%), or for a "
        "check of durations a duration (by: 200ms)"
    )


def bound_value(value: float | str | None) -> float | None:
    """A check's bound as a number (durations in seconds)."""
    if value is None:
        return None
    return parse_duration(value) if isinstance(value, str) else float(value)


class Check(_Model):
    check: str
    name: str | None = None
    during: str | None = None
    """A phase name; the whole drill if omitted."""
    below: float | str | None = None
    above: float | str | None = None
    target: str | None = None
    source: str | None = None
    """prometheus: whose metrics (gateway, toxiproxy or an engine replica's name); engine.*:
    the one engine judged (default: every engine the run scraped)."""
    metric: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    agg: Literal["increase", "max", "min", "avg", "last"] = "last"
    """prometheus, promql: how the window's values become one: ``increase`` reads a counter (a
    drop is a restart from zero, as Prometheus' ``increase`` has it), the others any value."""
    query: str | None = None
    """promql: a PromQL expression, evaluated on the team's Prometheus (``stack.attach.
    prometheus``) over the window as a range query; its values across the window (and across
    its series, if it returns several) become one by ``agg``."""
    baseline: str | None = None
    """tokens_ratio: the phase compared with (default: ``baseline``, else the first)."""
    group: str | None = None
    """group_ratio, group_ks: the group judged (``Scenario.groups``: the canary)."""
    against: str | None = None
    """group_ratio, group_ks: the group it is compared with (the stable replicas)."""
    since: Literal["fault_start", "fault_end"] = "fault_end"
    """recovered_within: count from when the faults began (a kill) or ended (a latency)."""
    workflow: Literal["brief", "lookup"] | None = None
    """workflow_* checks: the kind of workflow judged (default: every kind)."""
    within: Duration | None = None
    """workflows_served: an answer counts as served only when it came within this (a lookup
    answered only after a frozen orchestrator thawed was starved, not served);
    workflow_fallbacks: a fallback counts only when it came within this (the designed
    degradation answers in time; one that came only after the fault ended proves no limit)."""
    alert: str | None = None
    """alert_*: the alert's name (its ``alertname``), as the team's rules define it;
    alert_quiet and alert_runbook: a regular expression (PromQL's ``=~``), without it any
    alert. ``labels`` narrow it (``{upstream: vllm-0}``)."""
    not_worse_than: Literal["last_passed", "last"] | None = None
    """A bound relative to the run history: the observed value may be no worse than the same
    check's in the last earlier run of this drill that passed (``last_passed``) or in the last
    earlier run (``last``), by at most ``by``. With ``below``/``above`` too, both must hold.
    With no such run in the history the check is not conclusive, and says why."""
    by: str | float | None = None
    """How much worse than the reference run is allowed: a share of its value (``10%``), or
    for a check of durations a duration (``200ms``)."""
    worse_when: Literal["higher", "lower"] | None = None
    """Which way is worse for a relative bound; needed only where neither the check's
    ``below``/``above`` nor its family says (``below`` means higher is worse)."""
    params: dict[str, Any] | None = None
    """A check family's own fields, where it has a model of them (``CheckFamily.params``: a
    plugin's), validated with the scenario before the drill runs."""
    severity: Severity = "critical"
    """How much the check weighs in the drill's resilience score (``drills.model.score``):
    ``critical`` 3, ``warning`` 1."""
    runbook: str | None = None

    @model_validator(mode="after")
    def _coherent(self) -> Check:
        try:
            family = family_of(self.check)
        except PluginError as exc:
            raise ValueError(str(exc)) from None
        if family is None:
            broken = "".join(f"; {e}" for e in plugin_problems())
            raise ValueError(
                f"unknown check {self.check!r}; expected one of: {', '.join(known_checks())} "
                f"(pNN: p50, p75, p90, p95, p99, p999){broken}"
            )
        name = self.check
        if not family.takes_during and (self.above is not None or self.during is not None):
            raise ValueError(
                f"check {name!r} lints the stack's config: it takes no 'above' or "
                "'during' (optional 'below': how many error findings are tolerated, default 1)"
            )
        self._relative_fields(family)
        if (
            family.needs_bound
            and self.below is None
            and self.above is None
            and self.not_worse_than is None
        ):
            raise ValueError(
                f"check {name!r} needs a bound: below or above (or one relative to the run "
                "history: not_worse_than: last_passed, by: 10%)"
            )
        if family.only_below and self.above is not None:
            raise ValueError(f"check {name!r} takes only 'below'")
        if family.needs_target and not self.target:
            raise ValueError(f"check {name!r} needs a target (the faulted upstream/component)")
        if family.own_metric and (self.metric or self.labels or "agg" in self.model_fields_set):
            raise ValueError(
                f"check {name!r} reads its own metric from the engines (vLLM's, by name across "
                "versions): it takes no 'metric', 'labels' or 'agg'; for any other metric use "
                "check: prometheus with source and metric"
            )
        self._gated_fields(family)
        missing = [f for f in family.fields if not getattr(self, f)]
        if missing:
            raise ValueError(f"check {name!r} needs {' and '.join(repr(f) for f in missing)}")
        self._bound_units(family)
        self._reachable(family)
        return self

    def _bound_units(self, family: CheckFamily) -> None:
        """Durations written with a unit, numbers without one."""
        durations = family.bounds == "duration"
        for bound in (self.below, self.above):
            if bound is None:
                continue
            if durations and not isinstance(bound, str):
                raise ValueError(
                    f"check {self.check!r} compares durations; write the bound with a unit "
                    f"(e.g. 2s, 500ms), not {bound!r}"
                )
            if not durations and isinstance(bound, str):
                raise ValueError(f"check {self.check!r} compares numbers, not durations")

    def _relative_fields(self, family: CheckFamily) -> None:
        """``not_worse_than`` and ``by`` together, on a check with a value to compare, and a
        way that is worse."""
        name = self.check
        if self.not_worse_than is None:
            for field, value in (("by", self.by), ("worse_when", self.worse_when)):
                if value is not None:
                    raise ValueError(
                        f"check {name!r}: {field!r} belongs to a bound relative to the run "
                        "history; add not_worse_than: last_passed (or last)"
                    )
            return
        if family.bounds == "findings" or family.no_bounds is not None:
            raise ValueError(
                f"check {name!r} has no value to compare with an earlier run's: "
                "not_worse_than is for checks of a rate, a duration, a count or a number"
            )
        if self.by is None:
            raise ValueError(
                f"check {name!r}: not_worse_than needs 'by', how much worse than the reference "
                "run is allowed (e.g. by: 10%, or by: 0% for no worse at all)"
            )
        _, share = relative_margin(self.by)
        if not share and family.bounds != "duration":
            raise ValueError(
                f"check {name!r} compares {family.bounds}s, not durations: write 'by' as a "
                f"share of the reference run's value (e.g. by: 10%), not {self.by!r}"
            )
        if self.worse_direction(family) is None:
            raise ValueError(
                f"check {name!r}: which way is worse is not known for a relative bound; give "
                "worse_when: higher (or lower), or a below/above bound"
            )

    def worse_direction(self, family: CheckFamily | None = None) -> str | None:
        """``higher`` or ``lower``: which way of the observed value is worse (``None``: not
        known). Said by ``worse_when``, else by the bound (``below``: higher), else by the
        family (longer durations are worse)."""
        if self.worse_when is not None:
            return self.worse_when
        if self.below is not None:
            return "higher"
        if self.above is not None:
            return "lower"
        family = family or family_of(self.check)
        if family is None:
            return None
        if family.worse is not None:
            return family.worse
        return "higher" if family.bounds == "duration" else None

    def _gated_fields(self, family: CheckFamily) -> None:
        """The fields only some families take (``GATED``: ``alert``, ``query``, ``within``),
        refused on any other, each family's required ones asked for with what they mean, and
        no ``below``/``above`` where the family is judged by something else."""
        name = self.check
        for field in GATED:
            if getattr(self, field) is not None and not accepts(family, field):
                those = accepting(field)
                raise ValueError(
                    f"check {name!r} takes no {field!r} (only {', '.join(those)} "
                    f"{'does' if len(those) == 1 else 'do'})"
                )
        if family.no_bounds is not None and (self.below is not None or self.above is not None):
            raise ValueError(f"check {name!r} takes no 'below' or 'above': {family.no_bounds}")
        if "alert" in family.fields and not self.alert:
            raise ValueError(f"check {name!r} needs 'alert' (the alert's name)")
        if "query" in family.fields and self.query is None:
            raise ValueError(f"check {name!r} needs a 'query' (a PromQL expression)")
        if family.params is None and self.params is not None:
            raise ValueError(
                f"check {name!r} takes no 'params': its family {family.family!r} has no "
                "fields of its own"
            )
        if family.params is not None:
            try:
                family.params.model_validate(self.params or {})
            except ValidationError as exc:
                raise ValueError(
                    f"check {name!r}: "
                    + "; ".join(
                        f"params.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                        + (f" (got {e['input']!r})" if e["type"] != "missing" else "")
                        for e in exc.errors()
                    )
                ) from None
        if family.within is not None and self.within is None:
            raise ValueError(
                f"check {name!r} needs 'within': the longest time allowed from "
                f"{family.within} (e.g. within: 30s)"
            )

    def params_as(self, model: type[P]) -> P:
        """The check's ``params`` read as ``model`` (its family's ``params``, validated with
        the scenario)."""
        return model.model_validate(self.params or {})

    def _reachable(self, family: CheckFamily) -> None:
        """Refuse bounds that no observation can meet, or that every observation meets (a
        check that cannot fail proves nothing)."""
        lo, hi = family.limits
        below, above = bound_value(self.below), bound_value(self.above)
        shown_below, shown_above = (
            b if isinstance(b, str) else f"{b:g}" for b in (self.below or 0, self.above or 0)
        )
        what = {
            "share": "a share lies in 0..1",
            "duration": "a duration is 0s or more",
            "count": "a count is 0 or more",
            "findings": "a number of findings is 0 or more",
        }.get(family.bounds, "")
        if below is not None and below <= lo:
            raise ValueError(f"below {shown_below} can never be met: {what}")
        if above is not None and above >= hi:
            raise ValueError(f"above {shown_above} can never be met: {what}")
        if below is not None and below > hi and family.bounds == "share":
            raise ValueError(f"below {shown_below} can never fail: {what}")
        if above is not None and above < lo:
            raise ValueError(f"above {shown_above} can never fail: {what}")
        if below is not None and above is not None and below <= above:
            raise ValueError(
                f"below {shown_below} and above {shown_above} can never both be met: "
                "nothing lies between them"
            )

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = [self.check]
        if self.target:
            parts.append(self.target)
        if self.source:
            parts.append(self.source)
        if self.metric:
            parts.append(self.metric)
        if self.query:
            parts.append(self.query)
        if self.alert:
            parts.append(self.alert)
        if self.labels and self.alert is not None:
            parts.append("{" + ",".join(f"{k}={v}" for k, v in sorted(self.labels.items())) + "}")
        if self.group:
            parts.append(f"{self.group}/{self.against}")
        if self.workflow:
            parts.append(self.workflow)
        if self.params:
            parts.append("{" + ",".join(f"{k}={v}" for k, v in sorted(self.params.items())) + "}")
        if self.during:
            parts.append(f"during {self.during}")
        return " ".join(parts)


class AbortCondition(_Model):
    """Stop the drill early: ``error_rate`` or ``fallback_rate`` ``above`` a share for the
    whole of the last ``for``, as an alert rule's ``for:`` holds (at every second of it, the
    share of the requests that ended in the 10 s before that second; a second with none ended
    is not judged); or ``answer_rate`` ``below`` answers per second in the last ``for`` (a
    stack that stopped answering: frozen, not failing). Judged once the phases have run
    ``for`` (``drills.engine.abort``)."""

    check: Literal["error_rate", "fallback_rate", "answer_rate"]
    above: float | None = Field(default=None, ge=0, le=1)
    below: float | None = Field(default=None, gt=0)
    for_: Duration = Field(default=10.0, alias="for")
    min_requests: int = Field(default=3, ge=1)

    @field_validator("for_")
    @classmethod
    def _window(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(
                "an abort condition judges the requests of the last 'for', which must be "
                "longer than 0s (e.g. for: 10s)"
            )
        return value

    @model_validator(mode="after")
    def _bound(self) -> AbortCondition:
        if self.check == "answer_rate":
            if self.below is None or self.above is not None:
                raise ValueError(
                    "answer_rate aborts when fewer answers per second than 'below' came in the "
                    "last 'for' (e.g. below: 0.2): give 'below' only"
                )
        elif self.above is None or self.below is not None:
            raise ValueError(
                f"{self.check} aborts above a share of the requests (0..1, e.g. above: 0.5): "
                "give 'above' only"
            )
        return self

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )
