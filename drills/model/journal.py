"""The journal of one drill run: the contract between the engine and the reports.

``Runner.run()`` returns a ``Journal``; it is written as ``journal.json`` in the run directory
(``Journal.write``) and read back with ``Journal.read``, so a report can be rendered from it
alone (``drills report RUN_DIR``). ``drills schema journal`` prints its JSON Schema.

Status words are chaostoolkit-lib's:

- ``status``: how the run itself ended: ``completed`` (the timeline ran to its end),
  ``failed`` (the run broke: a fault could not be reverted), ``aborted`` (an abort condition,
  a fault that did not land, or ``drills abort``), ``interrupted`` (Ctrl-C, SIGTERM);
- ``deviated``: a check failed (the stack did not degrade as designed);
- ``verdict``: the one word for a person and for exit codes: ``passed`` only when the run
  completed and nothing deviated; otherwise ``failed``, ``aborted`` or ``interrupted``;
- ``rollbacks``: everything about taking faults away: per fault (``FaultRecord.rollback``), the
  reverts that failed, and the faults an earlier run left that were swept before this one.

Format 3 (this one) writes the probe scrapes in columns (``drills.model.columns``: each
series' name and labels once, its values beside the scrape times), compact: a one-hour drill's
journal is a few MB, not 150. Format 2 had every sample as an object; format 2 renamed format
1's ``revert`` / ``revert_errors`` / ``leftovers_removed``. ``Journal.read`` reads all three.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_serializer,
    model_validator,
)

from drills.common.hop import HopRecord
from drills.model.columns import from_columns, is_columns, to_columns
from drills.model.records import Record
from drills.model.score import Score, Severity

__all__ = [
    "FORMAT",
    "CheckResult",
    "Detection",
    "DetectionSign",
    "FaultRecord",
    "Journal",
    "LoadProcessHealth",
    "LoadReport",
    "Page",
    "PagedAlert",
    "PastCheck",
    "PastRun",
    "PhaseWindow",
    "Probe",
    "RelativeReference",
    "Rollbacks",
    "RunHistory",
    "RunStatus",
    "Sample",
    "StackInfo",
    "TimelineEvent",
    "TraceExport",
    "TwinOutcome",
]

FORMAT = 3


class RunStatus(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"
    INTERRUPTED = "interrupted"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StackInfo(_Model):
    gateway: str
    toxiproxy: str | None = None
    metrics: dict[str, str] = Field(default_factory=dict)
    profile: str | None = None
    """The embedded stack's profile; ``None`` for an attached stack."""
    components: list[dict[str, Any]] = Field(default_factory=list)
    adapter: str = "drills"
    """The gateway adapter the harness read the gateway with (``drills.model.gateways``)."""
    hop: str | None = None
    """The control API of the harness's L7 hop, when the stack runs one."""
    left_out: list[str] = Field(default_factory=list)
    """Optional parts of the profile the embedded stack ran without (``stack.config``)."""


class PhaseWindow(_Model):
    name: str
    start: float
    end: float
    planned_end: float | None = None
    """Set when the phase ended early (``until: replaced``): when it would have ended."""


class TimelineEvent(BaseModel):
    """Something that happened, in order: ``event`` names it, the rest is its detail."""

    model_config = ConfigDict(extra="allow")

    time: float
    offset: float
    event: str

    @property
    def detail(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class FaultRecord(_Model):
    """One scheduled fault and what happened to it (``drills.engine.faults.FaultRun``)."""

    index: int
    phase: str
    kind: str
    target: str
    spec: dict[str, Any] = Field(default_factory=dict)
    scheduled_offset: float
    scheduled_end: float
    applied_at: float | None = None
    reverted_at: float | None = None
    evidence: dict[str, Any] | None = None
    """What ``apply`` read back from the target."""
    rollback: dict[str, Any] | None = None
    """What ``revert`` did (``method``, ``finished_at``, ...)."""
    after: dict[str, Any] | None = None
    """What the injector observed after the run (a killed target's replacement)."""
    preflight: dict[str, Any] | None = None
    error: str | None = None
    revert_attempts: list[dict[str, Any]] = Field(default_factory=list)
    """Every attempt at reverting it (``attempt``, ``at``, ``error``: ``None`` when it worked);
    a revert is retried with backoff a bounded number of times."""


class Sample(_Model):
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    value: float


class Probe(_Model):
    """One scrape of one source (a Prometheus endpoint, NVML, the recall probe)."""

    time: float
    source: str
    samples: list[Sample] = Field(default_factory=list)
    error: str | None = None
    ended: float | None = None
    """When a probe that takes a while (the recall probe) finished."""


class PagedAlert(_Model):
    """One alert of a notification, as Alertmanager's webhook sends it."""

    name: str
    status: str
    """``firing`` or ``resolved``."""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: str | None = None
    """When Prometheus saw it start firing (RFC 3339, Alertmanager's ``startsAt``)."""


class Page(_Model):
    """One notification the harness's pager received (``drills.engine.pager``)."""

    received_at: float
    """When it reached the pager (epoch seconds)."""
    status: str
    """The group's status: ``firing`` while any of its alerts fires, else ``resolved``."""
    receiver: str = ""
    alerts: list[PagedAlert] = Field(default_factory=list)


class DetectionSign(_Model):
    """The first sign of a fault at one layer (``drills.checks.detection``)."""

    layer: str
    """``client``, ``gateway, seen at the hop``, ``gateway, its claim``, ``engine, its
    metrics``, ``alert pending``, ``alert firing``, ``page`` (``alerts``: not read)."""
    after: float | None
    """Seconds from the fault's application to the sign; ``None``: the layer did not show it."""
    what: str
    runbook: str | None = None
    """The runbook step the alert or page names."""


class Detection(_Model):
    """One row of the detection matrix: a fault (or a load spike) and the first sign of it at
    each layer."""

    fault: int | None
    """The fault's index in ``Journal.faults``; ``None``: a load spike, no fault."""
    what: str
    phase: str
    applied_at: float
    """When the fault was applied, or the spike began."""
    signs: list[DetectionSign] = Field(default_factory=list)
    detected: bool
    """Whether any layer showed it."""


class RelativeReference(_Model):
    """The earlier run a relative bound (``not_worse_than``) was judged against."""

    run_id: str
    label: str | None = None
    started_at: float
    which: str
    """``last_passed`` or ``last``: how it was chosen."""
    observed: float
    observed_text: str
    limit: float
    """Its value made worse by the check's ``by``: the worst this run's value could be."""


class CheckResult(_Model):
    label: str
    check: str
    during: str | None
    expected: str
    observed: float | None
    observed_text: str
    passed: bool
    reason: str
    samples: int
    runbook: str | None
    source: Literal["observed", "claimed"] = "observed"
    """``observed``: judged from what the harness saw itself (its L7 hop, the client's answers,
    the engines' metrics); ``claimed``: from the gateway's account of itself."""
    claim: str | None = None
    """The gateway's own account of the same thing, beside an observed result (``None``: it has
    none to give, or the result is the claim)."""
    disagrees: bool = False
    """The gateway's claim and the harness's observation disagree (shown in the report)."""
    interval: tuple[float | None, float | None] | None = None
    """Where the true value lies at ``confidence`` (95% unless ``--confidence``): a share of
    requests from its count and ``samples`` (Wilson score interval); a time-to-first-token or
    end-to-end percentile from the requests' order statistics, a side ``None`` where too few
    requests bound it (a p99 from 40 requests has no upper bound). ``None`` for checks of
    other kinds."""
    conclusive: bool | None = None
    """With an interval: whether all of it lies on the verdict's side of the bound. ``False``
    is a verdict that another run of the same drill could turn (too few requests to tell);
    the reports say so, and ``drills gate --inconclusive fail`` fails on it. The verdict
    itself is the observed value's."""
    confidence: float | None = None
    """The confidence of ``interval`` (``None``: 0.95, in journals from before it was kept)."""
    reference: RelativeReference | None = None
    """For a bound relative to the run history: the earlier run it was judged against
    (``None``: no such bound, or no such run; the reason says which)."""
    severity: Severity = "critical"
    """The check's weight in the run's resilience score (``drills.model.score``)."""


class LoadProcessHealth(_Model):
    """One Locust process of the load, as the master (or the single process) saw it."""

    id: str
    role: Literal["single", "master", "worker"]
    records: int = 0
    """Records it sent (a master: all it wrote, its workers' included)."""
    cpu_peak: float = 0.0
    """Its highest CPU use seen, percent of one core (Locust's own reading)."""
    offset: float | None = None
    """A worker: its clock minus the master's, seconds (its records were moved by it)."""
    rtt: float | None = None
    """A worker: the round trip of the clock probe the offset came from (the offset's error
    is at most half of it)."""
    connected_at: float | None = None


class LoadReport(_Model):
    """What the load delivered, against what the scenario asked. An open-loop load that did
    not send every request its schedule had falls short, and the run fails saying so."""

    mode: Literal["closed", "open"]
    """``closed``: users waiting for their answers; ``open``: requests sent at a rate."""
    users: int | None = None
    asked_rate: float | None = None
    """Open loop: the rate the scenario asked for, requests per second."""
    arrival: str | None = None
    burstiness: float | None = None
    max_in_flight: int | None = None
    scheduled: int | None = None
    """Open loop: arrivals the schedule had, warm-up included."""
    sent: int = 0
    """Requests sent (records written), warm-up included."""
    not_sent: int = 0
    """Open loop: arrivals not sent because ``max_in_flight`` requests were in flight."""
    not_sent_by_phase: dict[str, int] = Field(default_factory=dict)
    peak_in_flight: int | None = None
    observed_rate: float | None = None
    """Requests per second sent over the phases (warm-up left out)."""
    observed_cv: float | None = None
    """The coefficient of variation of the gaps between those requests (open loop: 0 for
    constant arrivals, 1 for poisson, 1/sqrt(burstiness) for gamma)."""
    expected_cv: float | None = None
    lag_p50: float | None = None
    """Open loop: how late requests left against their schedule, median and p99 (seconds)."""
    lag_p99: float | None = None
    workers_expected: int = 0
    """Load workers under a master (0: one Locust process)."""
    processes: list[LoadProcessHealth] = Field(default_factory=list)
    short: str | None = None
    """Why the load fell short of what the scenario asked; ``None``: it did not."""
    warning: str | None = None
    """Something about the load a reader should know that did not fail the run (the load
    generator sending late, say)."""


class TwinOutcome(_Model):
    """A run on one of the drill's twins (``Scenario.twins``): a broken stack the drill must
    fail on, naming the checks that catch it. The twin holds when the run completed and
    exactly the checks it names failed (``may_fail`` ones either way)."""

    name: str
    why: str = ""
    stack: str
    """How the twin's stack was had, in words (its profile brought up; its gateway beside the
    running stack's engines; an attached stack)."""
    must_fail: list[str]
    may_fail: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    """Every check that failed on the twin."""
    skipped_faults: list[str] = Field(default_factory=list)
    """Faults not applied: their target is one the twin's stack does not have (``absent``)."""
    status: RunStatus = RunStatus.COMPLETED
    aborts: str | None = None
    """The abort condition that must stop the run on the twin (``Twin.aborts``)."""
    aborted_by: str | None = None
    """The abort condition that did stop it, if one did."""

    @property
    def ended_as_declared(self) -> bool:
        """Completed, or stopped by the abort condition the twin declares (and no other)."""
        if self.aborts is None:
            return self.status is RunStatus.COMPLETED
        return self.status is RunStatus.ABORTED and self.aborted_by == self.aborts

    @computed_field  # type: ignore[prop-decorator]
    @property
    def missed(self) -> list[str]:
        """Checks that must fail on the twin and passed: the drill cannot see that break."""
        return [c for c in self.must_fail if c not in self.failed]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def unnamed(self) -> list[str]:
        """Checks that failed on the twin and that it does not name."""
        return [c for c in self.failed if c not in self.must_fail and c not in self.may_fail]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def held(self) -> bool:
        return self.ended_as_declared and not self.missed and not self.unnamed

    @property
    def cannot_tell(self) -> bool:
        """The drill passed on the twin: it cannot tell this broken stack from a sound one."""
        return self.status is RunStatus.COMPLETED and not self.failed

    def summary(self) -> str:
        """One line for a person."""
        if self.aborts is not None and not self.ended_as_declared:
            by = f" by {self.aborted_by}" if self.aborted_by else ""
            return (
                f"twin {self.name}: NOT HELD: its {self.aborts} abort condition must stop the "
                f"run on it, and the run was {self.status.value}{by}"
            )
        if not self.ended_as_declared:
            return (
                f"twin {self.name}: NOT HELD: the run on the twin was {self.status.value}, so "
                "what it catches is not known"
            )
        if self.cannot_tell:
            return (
                f"twin {self.name}: NOT HELD: the drill passed on it: this drill cannot tell a "
                "broken stack from a sound one"
            )
        parts = []
        if self.missed:
            parts.append("passed but must fail: " + ", ".join(self.missed))
        if self.unnamed:
            parts.append("failed and not named by the twin: " + ", ".join(self.unnamed))
        if parts:
            return f"twin {self.name}: NOT HELD: " + "; ".join(parts)
        stopped = f"aborted by {self.aborts} and " if self.aborts else ""
        return f"twin {self.name}: held: {stopped}failed as declared: " + ", ".join(self.failed)

    @model_validator(mode="before")
    @classmethod
    def _computed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in ("missed", "unnamed", "held")}
        return data


class Rollbacks(_Model):
    failed: list[str] = Field(default_factory=list)
    """One line per fault whose revert failed (its ledger entry was kept for the next sweep)."""
    swept: list[dict[str, Any]] = Field(default_factory=list)
    """Faults left by an earlier run, removed before this one started."""
    watchdog: list[dict[str, Any]] = Field(default_factory=list)
    """What the run's watchdog reverted (or tried to) while the runner lived: a fault that
    outlived its scheduled end by more than the grace period (``drills.engine.watchdog``)."""
    differs: list[str] = Field(default_factory=list)
    """How the chain read after the last revert differs from the chain read before the first
    fault (``drills.engine.chain``): a proxy left disabled, a toxic or hop fault left behind,
    a process left stopped, whatever the injectors said of their reverts."""
    unread: list[str] = Field(default_factory=list)
    """The parts of the chain that could not be read before or after, so were not compared."""

    @property
    def left(self) -> list[str]:
        """Everything the drill may have left in force: failed reverts, then differences."""
        return [*self.failed, *(f"differs from before the drill: {d}" for d in self.differs)]


class PastCheck(_Model):
    """One check of an earlier run, as the run history kept it."""

    label: str
    observed: float | None
    observed_text: str
    passed: bool
    conclusive: bool | None = None


class PastRun(_Model):
    """An earlier run of the same drill (and the same twin, if any), from the run history."""

    run_id: str
    label: str | None = None
    started_at: float
    verdict: str
    checks: list[PastCheck] = Field(default_factory=list)
    score: float | None = None
    """Its resilience score when it ran (``None``: not scored, or kept before scores were)."""


class RunHistory(_Model):
    """Where this run was kept, and the runs of the same drill before it (oldest first), so
    that the report shows each check over the last runs from the journal alone."""

    store: str
    """The history's location (``sqlite:///...``); its credentials, if any, masked."""
    written: bool
    """Whether this run is in it. ``False`` with ``reason``: it could not be written (the
    run, its journal and its reports are complete all the same)."""
    reason: str | None = None
    previous: list[PastRun] = Field(default_factory=list)


class TraceExport(_Model):
    """The run as one OpenTelemetry trace on the team's tracing backend
    (``drills.engine.tracing``)."""

    endpoint: str
    """The OTLP/HTTP traces URL it was sent to (credentials masked)."""
    trace_id: str
    """The drill's trace id (32 hex digits): what to search the backend for."""
    spans: int
    """Spans in it: the drill, its phases, its faults and (up to a cap) its requests."""
    exported: bool
    """Whether the receiver took every span. ``False`` with ``reason``: the run, its journal
    and its reports are complete all the same."""
    reason: str | None = None


class Journal(_Model):
    format: Literal[3] = 3
    drill: str
    title: str
    description: str = ""
    runbook: str | None = None
    run_id: str
    status: RunStatus
    deviated: bool
    """A check failed."""
    started_at: float
    t0: float | None = None
    """When the first phase began (``None``: the run stopped before it)."""
    ended_at: float
    scenario_path: str | None = None
    scenario: dict[str, Any] = Field(default_factory=dict)
    stack: StackInfo
    phases: list[PhaseWindow] = Field(default_factory=list)
    timeline: list[TimelineEvent] = Field(default_factory=list)
    faults: list[FaultRecord] = Field(default_factory=list)
    aborted: dict[str, Any] | None = None
    """Why the run was aborted: ``cause`` is ``abort_condition``, ``fault_failed`` or
    ``kill_switch``; the rest is the condition or the kill switch's request."""
    rollbacks: Rollbacks = Field(default_factory=Rollbacks)
    records: list[Record] = Field(default_factory=list)
    hop_records: list[HopRecord] = Field(default_factory=list)
    """Every request that reached the harness's L7 hop during the run (each attempt the gateway
    made at a model hop), as the hop saw it."""
    probes: list[Probe] = Field(default_factory=list)
    probe_failures: dict[str, Any] = Field(default_factory=dict)
    gpu: dict[str, Any] | None = None
    retrieval: dict[str, Any] | None = None
    checks: list[CheckResult] = Field(default_factory=list)
    detection: list[Detection] = Field(default_factory=list)
    """For each applied fault, how long until each layer showed it (the detection matrix)."""
    pages: list[Page] | None = None
    """Every notification the pager received during the run (``None``: no pager ran)."""
    alertmanager: dict[str, Any] | None = None
    """What the team's Alertmanager held at the run's end (``url``, ``alerts``: name, labels,
    state, start, receivers, runbook_url; ``error`` if it could not be read); ``None``: the
    drill names none."""
    load: LoadReport | None = None
    """What the load delivered against what was asked (``None`` in journals from before it)."""
    twin: TwinOutcome | None = None
    """Set when the run was on one of the drill's twins (``drills run --twin``)."""
    run_dir: str
    label: str | None = None
    """What this run is of, as the team names it (``--label``: a release, a git sha)."""
    trace: TraceExport | None = None
    """The run as an OpenTelemetry trace, when one was exported (``--otlp``)."""
    history: RunHistory | None = None
    """The run history's account of this run and the ones before it (``None``: the history
    is off, ``--history none``)."""
    score: Score | None = None
    """The run's resilience score (``drills.model.score``; ``None``: the run says nothing about
    the stack: interrupted, or failed for the harness's own reasons)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> Literal["passed", "failed", "aborted", "interrupted"]:
        if self.status in (RunStatus.ABORTED, RunStatus.INTERRUPTED):
            return self.status.value  # type: ignore[return-value]
        if self.status is RunStatus.FAILED or self.deviated:
            return "failed"
        return "passed"

    @property
    def origin(self) -> float:
        """Time zero of the charts and timelines: the first phase's start, else the run's."""
        return self.t0 or self.started_at

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            data.pop("verdict", None)  # computed
            if data.get("format") == 1:
                data = _from_format_1(data)
            if data.get("format") == 2:  # it differs only in how the probes were written
                data["format"] = FORMAT
            if is_columns(data.get("probes")):
                data["probes"] = from_columns(data["probes"])
        return data

    @field_serializer("probes", when_used="json")
    def _probes_in_columns(self, probes: list[Probe]) -> list[dict[str, Any]]:
        """In JSON, the scrapes in columns (``drills.model.columns``)."""
        return to_columns([p.model_dump() for p in probes])

    def write(self, path: Path) -> None:
        """Write the journal as JSON (secrets in it masked by the caller)."""
        path.write_text(self.model_dump_json())

    @classmethod
    def read(cls, path: Path) -> Journal:
        """The journal at ``path`` (a ``journal.json``, or the run directory holding it)."""
        if path.is_dir():
            path = path / "journal.json"
        return cls.model_validate(json.loads(path.read_text()))


def _from_format_1(data: dict[str, Any]) -> dict[str, Any]:
    """Format 1 had a verdict instead of status + deviated, and three words for rollbacks."""
    verdict = data.get("verdict")
    status = data.get("status", "completed")
    errors = data.pop("revert_errors", []) or []
    data["format"] = FORMAT
    data["status"] = "failed" if status == "completed" and errors else status
    data["deviated"] = any(not c.get("passed") for c in data.get("checks", [])) or (
        verdict == "failed" and not errors
    )
    data["rollbacks"] = {"failed": errors, "swept": data.pop("leftovers_removed", []) or []}
    for fault in data.get("faults", []):
        fault["rollback"] = fault.pop("revert", None)
    return data
