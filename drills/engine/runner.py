"""The drill runner: one timeline of phases, load and faults, then checks and a journal.

Order of a run:

1. resolve the stack (attach to endpoints, or bring a profile up) and check it is healthy;
2. refuse faults on hops the stack does not have (before anything is touched);
3. sweep the ledger: remove faults a crashed earlier run left behind, and say so;
4. start probes and load, then walk the phases; each fault is applied at its offset and
   reverted at the end of its window, with evidence read back each time;
5. abort conditions are watched on the live records; Ctrl-C and SIGTERM interrupt;
6. whatever happens, every applied fault is reverted (an ``ExitStack``), load and probes stop;
7. checks are evaluated over their windows; the journal is written and the reports rendered.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from drills.checks import Evaluation, evaluate, is_error, percentile
from drills.checks.alerts import (
    check_alert_rules,
    check_alertmanager,
    has_monitoring,
    held_by_alertmanager,
)
from drills.checks.detection import alert_history, detection_matrix
from drills.checks.observed import attribute
from drills.checks.promql import check_queries
from drills.common.errors import (
    InputError,
    Interrupted,
    KillSwitch,
    LoadError,
    SafetyViolation,
)
from drills.common.hop import HopClient
from drills.common.redact import redact
from drills.common.toxiproxy import ToxiproxyClient
from drills.common.yamlsrc import YamlDocument, format_path
from drills.engine.abort import abort_reason
from drills.engine.chain import differences
from drills.engine.claims import run_claims
from drills.engine.clock import PhaseClock, replaced_at
from drills.engine.events import RunEvent
from drills.engine.exporter import DrillExporter
from drills.engine.faults import FaultLifecycle, FaultRun, parallel
from drills.engine.hardware import refuse_without_hardware
from drills.engine.history import keep, reference_runs
from drills.engine.ledger import Ledger
from drills.engine.monitoring import embedded_monitoring
from drills.engine.options import (
    RunOptions,
    StackEndpoints,
    attach_of,
    attach_urls,
    base_profile,
    check_health,
    l7_hop_names,
    proxy_names,
    resolve_stack,
    scenario_sends_at_once,
)
from drills.engine.pager import Pager
from drills.engine.relative import judge_relative
from drills.engine.safety import (
    SafetyPolicy,
    abort_request,
    check_scenario,
    fault_windows,
    kubernetes_scope,
    load_policy,
    register_run,
)
from drills.engine.sharing import beside, running_host
from drills.engine.stack_reads import StackReads
from drills.engine.tracing import export_trace
from drills.engine.twin_plan import twin_outcome
from drills.engine.watchdog import Watchdog
from drills.load import LoadProcess, RecordReader, load_prompts
from drills.load.report import load_report
from drills.model.journal import (
    CheckResult,
    Journal,
    LoadReport,
    PhaseWindow,
    Probe,
    Rollbacks,
    RunStatus,
    TimelineEvent,
    TwinOutcome,
)
from drills.model.records import Record
from drills.model.scenario import (
    Scenario,
    check_adapter_hops,
    check_profile,
    check_targets,
    twin_rules,
)
from drills.model.score import score_of
from drills.probes import Prober
from injectors import InjectionContext, Observer, Preflight, Prepares, build
from reports import render_all

__all__ = ["Interrupted", "Runner"]

logger = logging.getLogger(__name__)


@dataclass
class _Outcome:
    """How the walk through the timeline ended, and what it saw on the way."""

    started_at: float
    reader: RecordReader
    status: RunStatus = RunStatus.COMPLETED
    abort: dict[str, Any] | None = None
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)
    live: list[Record] = field(default_factory=list)


class Runner:
    def __init__(self, scenario: Scenario, doc: YamlDocument | None, options: RunOptions) -> None:
        self.scenario = scenario
        self.doc = doc
        self.options = options
        self.run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
        self.timeline: list[dict[str, Any]] = []
        self.lifecycle: FaultLifecycle | None = None
        self.t0 = 0.0
        self.clock = PhaseClock.of(scenario.phases)
        self._stop_reason: str | None = None
        self.policy = options.safety or SafetyPolicy()
        self.retrieval_status: dict[str, Any] | None = None
        self._hop_since = 0
        self._began = time.time()
        self._watchdog_actions: list[dict[str, Any]] = []
        self._differs: list[str] = []  # the chain after the drill against before it
        self._l7_hops: list[str] | None = None  # what the L7 hop fronts, as it said
        self._pager: Pager | None = None  # the pager, while a drill that names one runs
        self._exporter: DrillExporter | None = None  # the drill's metrics, when asked for
        self._unread: list[str] = []
        self.evaluation: Evaluation | None = None  # what the checks judged (``repeat`` pools it)

    @property
    def reads(self) -> StackReads:
        """The stack's reads, with the options as they are now (a run beside the running
        stack replaces them: ``_beside_running_stack``)."""
        return StackReads(self.scenario, self.doc, self.options)

    @property
    def revert_errors(self) -> list[str]:
        """One line per fault whose revert failed (its ledger entry is kept)."""
        return self.lifecycle.revert_errors if self.lifecycle else []

    # -- helpers ---------------------------------------------------------------------------

    def _event(self, event: str, **detail: Any) -> None:
        now = time.time()
        self.timeline.append(
            {"time": now, "offset": now - self.t0 if self.t0 else 0.0, "event": event, **detail}
        )
        message = f"{event} " + " ".join(f"{k}={v}" for k, v in detail.items())
        logger.info("%s", message)
        if self._exporter is not None:
            self._exporter.observe(event, detail)
        self._emit(RunEvent(event, message, now, dict(detail)))

    def _say(self, text: str, kind: str = "progress") -> None:
        self._emit(RunEvent(kind, text, time.time()))

    def _emit(self, event: RunEvent) -> None:
        if self.options.on_event is not None:
            self.options.on_event(event)

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        def handler(signum: int, frame: FrameType | None) -> None:
            raise Interrupted(signal.Signals(signum).name)

        previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    # -- the run ---------------------------------------------------------------------------

    def run(self) -> Journal:
        """Run the drill; return its journal (written, with the reports, in its run directory,
        ``Journal.run_dir``).

        Raises ``SafetyViolation`` or ``ConfigError`` before anything is touched when the drill
        exceeds the safety policy or names hops the stack does not have."""
        scenario = self.scenario
        self._began = time.time()
        policy = self.policy = self.options.safety or load_policy()
        attached = attach_of(scenario, self.options)
        check_scenario(scenario, self.doc, policy, attach_urls(attached))
        # Before any stack is started: on a team's stack, promql and alert checks need the
        # team's Prometheus (or pager); the embedded stack starts its own (``_run``), also for
        # a twin whose gateway runs beside it (attached to, but the stack is ours).
        if attached is not None and not self.options.component_states:
            has_monitoring(scenario, self.doc, attached.prometheus, attached.pager)
        if self.options.profile and attach_of(scenario, self.options) is None:
            # Another profile than the scenario's: its hops are known before it is started.
            check_profile(scenario, self.doc, self.options.profile)
        twin = f"twin-{self.options.twin.twin.key}-" if self.options.twin else ""
        run_dir = self.options.out_dir / f"{scenario.drill}-{twin}{self.run_id}"
        attach = attach_of(scenario, self.options)
        profile = base_profile(scenario, self.options)
        # One drill at a time: refused here, before the stack is touched, when a live run of
        # another process drills the same stack or target.
        claims = run_claims(scenario, attach, profile, self.options.state_dir)
        with register_run(self.run_id, f"drill {scenario.drill}", run_dir, claims) as abort_path:
            run_dir.mkdir(parents=True, exist_ok=True)
            # A GPU fault where there is no such GPU: refused now, before the stack starts.
            refuse_without_hardware(scenario, self.doc, self.run_id, run_dir, attach)
            try:
                with self._beside_running_stack(run_dir):
                    return self._run(run_dir, abort_path)
            except KillSwitch:
                # Asked to stop before the timeline began (while the stack came up): nothing
                # was applied; the journal-less run directory says so.
                (run_dir / "ABORTED").write_text(json.dumps(abort_request(abort_path)))
                raise

    @contextlib.contextmanager
    def _beside_running_stack(self, run_dir: Path) -> Iterator[None]:
        """With the user's stack up and a drill whose profile differs from it only in the
        gateway, that profile's gateway runs beside it for this run (``drills.engine.sharing``)
        rather than the run being refused."""
        host = running_host(self.scenario, self.options)
        if host is None:
            yield
            return
        profile = base_profile(self.scenario, self.options)
        with beside(self.scenario, self.options, str(host), profile, run_dir / "gateway") as opts:
            assert opts.attach is not None
            self._say(
                f"profile {profile!r} differs from the running stack only in its gateway: its "
                f"gateway runs beside that stack's engines for this run ({opts.attach.gateway})"
            )
            self.options = opts
            yield

    def _run(self, run_dir: Path, abort_path: Path) -> Journal:
        endpoints = resolve_stack(self.scenario, self.options)
        check_health(endpoints, self.doc)
        state_dir = self.reads.state_dir_of_run()
        home = run_dir / "monitoring"
        beside = self.options.component_states
        twin = self.options.twin.twin if self.options.twin else None
        feared = None
        if twin is not None and twin.monitoring is not None:
            feared = (twin_rules(twin, self.doc), twin.monitoring.route == "dropped")
        with embedded_monitoring(
            self.scenario, endpoints, state_dir, home, self._say, beside, feared
        ) as seen:
            return self._checked(run_dir, abort_path, seen, state_dir)

    def _checked(
        self, run_dir: Path, abort_path: Path, endpoints: StackEndpoints, state_dir: Path | None
    ) -> Journal:
        """Refuse what the stack cannot do before anything is applied, then drill."""
        scenario = self.scenario
        check_queries(scenario, self.doc, endpoints.prometheus)
        proxies, l7 = proxy_names(endpoints), l7_hop_names(endpoints)
        self._l7_hops = l7
        check_targets(scenario, self.doc, proxies, self.reads.components(state_dir), l7)
        check_adapter_hops(endpoints.adapter, self.doc, sorted({*proxies, *l7}))
        check_alert_rules(scenario, self.doc, endpoints.prometheus)
        check_alertmanager(self.doc, endpoints.alertmanager)
        # The pager and the exporter listen before anything is applied: a taken address is
        # bad input.
        self._pager = Pager(endpoints.pager) if endpoints.pager else None
        self._exporter = (
            DrillExporter(endpoints.exporter, scenario.drill, self.run_id)
            if endpoints.exporter
            else None
        )
        with contextlib.ExitStack() as listening:
            if self._pager is not None:
                listening.enter_context(self._pager)
                self._say(f"the pager listens at {self._pager.url} for Alertmanager's webhook")
            if self._exporter is not None:
                listening.enter_context(self._exporter)
                self._say(f"the drill's metrics are served at {self._exporter.url}")
            return self._drill(run_dir, abort_path, endpoints, state_dir)

    def _drill(
        self, run_dir: Path, abort_path: Path, endpoints: StackEndpoints, state_dir: Path | None
    ) -> Journal:
        """The drill itself, once everything it needs was checked: plan, apply, revert, judge."""
        shared = ToxiproxyClient(endpoints.toxiproxy) if endpoints.toxiproxy else None
        try:
            if shared is not None:
                shared.version()  # open the kept-alive connection before the first fault
            faults = self._plan(endpoints, shared, state_dir)
            ledger = Ledger(self.options.ledger)
            swept = ledger.sweep()
            for item in swept:
                self._say(
                    f"removed a fault left by an earlier run: {item['kind']} on "
                    f"{item['target']} ({item.get('method')})",
                    "swept",
                )
            self.lifecycle = FaultLifecycle(
                self.run_id, ledger, self._event, grace=self.policy.fault_grace
            )
            load, prober, reader = self._instruments(run_dir, endpoints, state_dir)
            if endpoints.hop is not None:
                with HopClient(endpoints.hop) as hop:
                    self._hop_since = hop.next_seq()  # this run's records begin here
            before = self.reads.chain(endpoints, state_dir)
            # The dead-man's switch: reverts this run's faults if the runner dies or hangs.
            watchdog = Watchdog.start(self.run_id, ledger.path, run_dir)
            try:
                self._prepare(faults)
                outcome = self._walk(faults, self.lifecycle, load, prober, reader, abort_path)
            finally:
                self._release(faults)
                watchdog.stop()
            self._watchdog_actions = [a for a in watchdog.actions() if "key" in a]
            for action in self._watchdog_actions:
                detail = {k: v for k, v in action.items() if k != "event"}
                self._event(f"watchdog_{action['event']}", **detail)
            after = self.reads.chain(endpoints, state_dir)
            self._differs = differences(before, after)
            self._unread = sorted({*before.unread, *after.unread})
            for line in self._differs:
                self._say(f"the chain differs from before the drill: {line}", "warning")
        finally:
            if shared is not None:
                shared.close()
        self._observe(faults)
        return self._conclude(run_dir, endpoints, state_dir, faults, prober, outcome, swept)

    def _plan(
        self, endpoints: StackEndpoints, shared: ToxiproxyClient | None, state_dir: Path | None
    ) -> list[FaultRun]:
        """One injector per scheduled fault; those that can say what they would hit
        (``Preflight``: Kubernetes) check it now, reading only, so that a refusal leaves
        nothing applied."""
        scenario = self.scenario
        context = InjectionContext(
            self.run_id,
            endpoints.toxiproxy,
            shared,
            state_dir,
            kubernetes_scope(scenario, self.doc, self.policy),
            self.policy.max_pods,
            self.policy.max_containers,
            endpoints.hop,
            self.options.component_states,
        )
        faults: list[FaultRun] = []
        for window in fault_windows(scenario):
            fault = scenario.phases[window.phase].inject[window.index]
            faults.append(
                FaultRun(
                    len(faults),
                    scenario.phases[window.phase].name,
                    window.start,
                    window.end,
                    build(fault, context, len(faults)),
                    fault.model_dump(mode="json", by_alias=True),
                )
            )
        windows = fault_windows(scenario)
        for planned, window in zip(faults, windows, strict=True):
            if not isinstance(planned.injector, Preflight):
                continue
            try:
                planned.preflight = planned.injector.preflight()
            except SafetyViolation:
                raise
            except InputError as exc:  # located at the fault that cannot be carried out
                loc = ("phases", window.phase, "inject", window.index)
                where = f"{self.doc.path}:{self.doc.line_of(loc)} " if self.doc else ""
                raise InputError(f"{where}{format_path(loc)}: {exc}") from None
        return faults

    def _instruments(
        self, run_dir: Path, endpoints: StackEndpoints, state_dir: Path | None
    ) -> tuple[LoadProcess, Prober, RecordReader]:
        """The load process, the probes and the reader of the load's records."""
        scenario = self.scenario
        base = self.doc.path.parent if self.doc else Path.cwd()
        records_path = run_dir / "records.jsonl"
        load = LoadProcess(
            endpoints.gateway,
            scenario.load,
            scenario.fallback,
            load_prompts(scenario.load, base),
            records_path,
            scenario.duration + scenario.load.warmup,
            endpoints.adapter,
        )
        gpu_faults = any(f.hardware == "GPU" for p in scenario.phases for f in p.inject)
        prober = Prober(
            dict(endpoints.metrics),
            scenario.probe_interval,
            gpu=scenario.gpu_telemetry or gpu_faults,
        )
        self.retrieval_status = self.reads.retrieval_probe(prober, state_dir, endpoints)
        return load, prober, RecordReader(records_path)

    def _walk(
        self,
        faults: list[FaultRun],
        lifecycle: FaultLifecycle,
        load: LoadProcess,
        prober: Prober,
        reader: RecordReader,
        abort_path: Path,
    ) -> _Outcome:
        """Load, probes and the timeline of phases; every fault reverted on the way out,
        however the way out is taken."""
        outcome = _Outcome(started_at=time.time(), reader=reader)
        with self._signals():
            try:
                with contextlib.ExitStack() as stack:
                    prober.start()
                    stack.callback(prober.stop)
                    load.start()
                    stack.callback(load.stop)
                    for planned in faults:
                        stack.callback(lifecycle.revert, planned)
                    load.wait_for_workers()
                    self._warmup(reader, outcome.live)
                    # And no window opens before the load has sent its first request: Locust's
                    # start-up took 1-3 s on a busy 2-core machine, and a drill with a shorter
                    # warm-up opened its first window on no load.
                    if scenario_sends_at_once(self.scenario):
                        load.wait_started()
                    self.t0 = time.time()
                    load.mark_origin(self.t0)
                    outcome.phases = self._windows()
                    try:
                        outcome.abort = self._timeline(faults, lifecycle, reader, outcome.live)
                    finally:  # as they were run: a phase may have ended early
                        outcome.phases = self._windows()
                    if outcome.abort is not None:
                        outcome.status = RunStatus.ABORTED
            except Interrupted as exc:
                outcome.status = RunStatus.INTERRUPTED
                self._event("interrupted", signal=str(exc))
            except LoadError as exc:  # before any phase: nothing was judged on a partial load
                outcome.status = RunStatus.ABORTED
                outcome.abort = {"cause": "load_failed", "reason": str(exc)}
                self._event("aborted", **outcome.abort)
            except KillSwitch:
                outcome.status = RunStatus.ABORTED
                request = abort_request(abort_path)
                outcome.abort = {
                    "cause": "kill_switch",
                    "reason": "kill switch (drills abort)",
                    "by": request.get("by"),
                    "message": request.get("reason"),
                    "requested_at": request.get("at"),
                }
                self._event("aborted", **outcome.abort)
        return outcome

    def _prepare(self, faults: list[FaultRun]) -> None:
        """Faults that take long to set up (``Prepares``: a tool flood's sessions) get ready
        now, before the load and the timeline, so each lands whole at its scheduled time."""
        for planned in faults:
            if isinstance(planned.injector, Prepares):
                began = time.time()
                ready = planned.injector.prepare()
                planned.preflight = {
                    **(planned.preflight or {}),
                    "prepared": {**ready, "took_s": round(time.time() - began, 2)},
                }
                self._say(
                    f"{planned.injector.kind} on {planned.injector.target}: ready in "
                    f"{time.time() - began:.1f}s, to be applied at its time"
                )

    @staticmethod
    def _release(faults: list[FaultRun]) -> None:
        """Undo what ``_prepare`` set up for faults that were never applied."""
        for planned in faults:
            if isinstance(planned.injector, Prepares) and planned.applied_at is None:
                planned.injector.release()

    @staticmethod
    def _observe(faults: list[FaultRun]) -> None:
        """Ask each applied fault that can (``Observer``) how its target recovered."""
        for ran in faults:
            if ran.applied_at is not None and isinstance(ran.injector, Observer):
                try:
                    ran.after = ran.injector.observe()
                except Exception as exc:  # the run's evidence is incomplete, not lost
                    ran.after = {"error": f"could not observe the recovery: {exc}"}

    def _conclude(
        self,
        run_dir: Path,
        endpoints: StackEndpoints,
        state_dir: Path | None,
        faults: list[FaultRun],
        prober: Prober,
        outcome: _Outcome,
        swept: list[dict[str, Any]],
    ) -> Journal:
        """Checks over their windows, then the journal (written) and the reports."""
        ev = self.evaluation = self._evaluation(endpoints, state_dir, faults, prober, outcome)
        results = self._relative(evaluate(ev), outcome.started_at)
        scenario = self.scenario
        delivered = self._delivered(run_dir, ev)
        status = self._status(outcome.status, delivered)
        journal = Journal(
            drill=scenario.drill,
            title=scenario.title,
            description=scenario.description,
            runbook=scenario.runbook,
            run_id=self.run_id,
            status=status,
            deviated=not all(r.passed for r in results),
            started_at=outcome.started_at,
            t0=self.t0 or None,
            ended_at=ev.run_window[1],
            scenario_path=str(self.doc.path) if self.doc else None,
            scenario=scenario.model_dump(mode="json", by_alias=True),
            stack=endpoints.info(),
            phases=self._phase_windows(ev),
            timeline=[TimelineEvent.model_validate(e) for e in self.timeline],
            faults=ev.faults,
            aborted=outcome.abort,
            rollbacks=self._rollbacks(swept),
            records=ev.records,
            hop_records=ev.hop_records or [],
            probes=ev.probes,
            probe_failures=prober.failures,
            gpu=prober.gpu,
            retrieval=self.retrieval_status,
            checks=results,
            detection=detection_matrix(ev, alert_history(ev)),
            pages=ev.pages,
            alertmanager=held_by_alertmanager(endpoints.alertmanager),
            load=delivered,
            twin=self._twin(results, status, outcome.abort),
            run_dir=str(run_dir),
            label=self.options.label,
            score=score_of(results, _scored_as(status, outcome.abort)),
        )
        return self._kept(journal, run_dir)

    def _kept(self, journal: Journal, run_dir: Path) -> Journal:
        """``journal`` with its secrets masked, kept in the run history, written, and rendered
        as the reports; what is written and what is returned are the same."""
        journal = Journal.model_validate(redact(journal.model_dump(mode="json")))
        journal = keep(journal, self.options.history)
        if journal.history is not None and not journal.history.written:
            self._say(f"the run history was not written: {journal.history.reason}", "warning")
        if self.options.otlp is not None:
            journal = export_trace(journal, self.options.otlp)
            assert journal.trace is not None
            if journal.trace.exported:
                self._say(
                    f"trace {journal.trace.trace_id} ({journal.trace.spans} spans) sent to "
                    f"{journal.trace.endpoint}"
                )
            else:
                self._say(f"the trace was not sent: {journal.trace.reason}", "warning")
        journal.write(run_dir / "journal.json")

        render_all(journal, run_dir)
        return journal

    def _relative(self, results: list[CheckResult], started_at: float) -> list[CheckResult]:
        """The checks with a bound relative to the run history judged against their reference
        run (``drills.engine.relative``); the others as they are."""
        checks = self.scenario.expect
        if not any(c.not_worse_than for c in checks):
            return results
        twin = self.options.twin.twin.key if self.options.twin else ""
        previous, why = reference_runs(self.options.history, self.scenario.drill, twin, started_at)
        return judge_relative(checks, results, previous, why)

    def _phase_windows(self, ev: Evaluation) -> list[PhaseWindow]:
        """Each phase as it ran; one that ended early (``until``) with its planned end."""
        planned = {
            n: self.t0 + e for n, (_, e) in self.clock.planned.items() if n in self.clock.cut
        }
        return [
            PhaseWindow(name=n, start=s, end=e, planned_end=planned.get(n))
            for n, (s, e) in ev.phases.items()
        ]

    def _rollbacks(self, swept: list[dict[str, Any]]) -> Rollbacks:
        """What was undone, by whom, and what was left or differs after the drill."""
        return Rollbacks(
            failed=list(self.revert_errors),
            swept=swept,
            watchdog=self._watchdog_actions,
            differs=self._differs,
            unread=self._unread,
        )

    def _status(self, status: RunStatus, delivered: LoadReport) -> RunStatus:
        """A run that completed its timeline failed all the same when a fault was not
        reverted, or reverted by the watchdog because the run was stuck past its schedule (the
        run did not keep its own timeline), or when its load fell short (the stack was judged
        on less traffic than the drill asked for)."""
        if status is RunStatus.COMPLETED and (
            self.revert_errors or self._differs or self._watchdog_actions or delivered.short
        ):
            return RunStatus.FAILED
        return status

    def _delivered(self, run_dir: Path, ev: Evaluation) -> LoadReport:
        """What the load delivered; a shortfall is said at once (it fails the run)."""
        records = run_dir / "records.jsonl"
        delivered = load_report(self.scenario.load, records, ev.records, ev.phases)
        if delivered.short:
            self._say(f"the load fell short: {delivered.short}", "warning")
        return delivered

    def _twin(
        self, results: list[CheckResult], status: RunStatus, aborted: dict[str, Any] | None
    ) -> TwinOutcome | None:
        if self.options.twin is None:
            return None
        return twin_outcome(self.options.twin, results, status, aborted)

    def _evaluation(
        self,
        endpoints: StackEndpoints,
        state_dir: Path | None,
        faults: list[FaultRun],
        prober: Prober,
        outcome: _Outcome,
    ) -> Evaluation:
        """Everything the checks look at. The evaluation says which phase each request counts
        in (``drills.model.windows``: the one it was sent in, or the fault it met)."""
        records = outcome.live + outcome.reader.read_new()
        phases = outcome.phases or {p.name: (outcome.started_at,) * 2 for p in self.scenario.phases}
        hop_records = self.reads.hop_records(endpoints, self._hop_since, self._say)
        if hop_records is not None:
            attribute(records, hop_records)
        if self.scenario.groups:
            for record in records:
                record.group = self.scenario.group_of(record)
        return Evaluation(
            self.scenario,
            records,
            phases,
            (self.t0 or outcome.started_at, time.time()),
            [f.record() for f in faults],
            [Probe.model_validate(p) for p in prober.results],
            self.reads.lint(endpoints),
            prober.gpu,
            self.retrieval_status,
            *self.reads.agent_identity(state_dir, endpoints),
            endpoints.adapter,
            hop_records,
            self.reads.tool_audit(state_dir, self._began),
            self._l7_hops,
            endpoints.prometheus,
            self._pager.received() if self._pager is not None else None,
            self.options.confidence,
        )

    def _warmup(self, reader: RecordReader, live: list[Record]) -> None:
        """Let the load start (Locust's own start-up, first requests to each engine) before
        any window opens."""
        deadline = time.monotonic() + self.scenario.load.warmup
        while time.monotonic() < deadline:
            live.extend(reader.read_new())
            self._say(
                f"[warm-up] {deadline - time.monotonic():3.0f}s left, {len(live)} request(s) done"
            )
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))

    def _windows(self) -> dict[str, tuple[float, float]]:
        """Each phase's window in epoch seconds, as the clock has it now."""
        return {n: (self.t0 + s, self.t0 + e) for n, (s, e) in self.clock.windows.items()}

    def _phase_end(self, name: str) -> None:
        cut = self.clock.cut.get(name)
        detail = {"until": "replaced", "cut_s": round(cut, 2)} if cut else {}
        self._event("phase_end", phase=name, **detail)

    def _until(self, name: str, now: float, faults: list[FaultRun]) -> None:
        """End phase ``name`` now if it waits for its kills' replacements and they are back."""
        phase = next(p for p in self.scenario.phases if p.name == name)
        ready = replaced_at(phase, faults)
        if ready is None:
            return
        cut = self.clock.end_early(name, now, faults)
        if cut:
            planned = self.clock.planned[name][1] - self.clock.planned[name][0]
            self._say(
                f"[{name}] every killed target replaced at +{ready - self.t0:.1f}s: the phase "
                f"ends {cut:.0f}s before its {planned:g}s"
            )

    def _timeline(
        self,
        faults: list[FaultRun],
        lifecycle: FaultLifecycle,
        reader: RecordReader,
        live: list[Record],
    ) -> dict[str, Any] | None:
        clock = self.clock
        current: str | None = None
        last_tick = 0.0
        while True:
            now = time.time() - self.t0
            if now >= clock.total:
                if current:
                    self._phase_end(current)
                return None
            phase = clock.phase_at(now)
            if phase != current:
                if current:
                    self._phase_end(current)
                self._event("phase_start", phase=phase)
                current = phase
            # Windows that end now are reverted before those that begin now are applied: a
            # fault in the next phase finds its target as the drill found it, not faulted.
            ending = [
                f
                for f in faults
                if f.applied_at is not None and f.reverted_at is None and now >= f.end
            ]
            parallel(lifecycle.revert, ending)
            due = [
                f for f in faults if f.applied_at is None and f.error is None and now >= f.offset
            ]
            for fault, error in zip(due, parallel(lifecycle.apply, due), strict=True):
                if error is not None:
                    # A fault that did not land makes the drill meaningless: stop it.
                    detail = {
                        "cause": "fault_failed",
                        "reason": "a fault did not land",
                        "fault": fault.index,
                        "error": str(error),
                    }
                    self._event("aborted", **detail)
                    return detail
            if now - last_tick >= 1.0:
                last_tick = now
                live.extend(reader.read_new())
                self._until(phase, now, faults)
                self._progress(phase, now, clock.windows[phase], live)
                abort = abort_reason(self.scenario.abort_when, live, time.time(), self.t0)
                if abort is not None:
                    self._event("aborted", **abort)
                    return abort
            upcoming = [f.offset for f in faults if f.applied_at is None and f.error is None]
            upcoming += [
                f.end for f in faults if f.applied_at is not None and f.reverted_at is None
            ]
            upcoming += [min(clock.total, last_tick + 1.0)]
            time.sleep(min(max(min(upcoming) - (time.time() - self.t0), 0.001), 0.05))

    def _progress(
        self, phase: str, now: float, window: tuple[float, float], live: list[Record]
    ) -> None:
        recent = [r for r in live if r.start >= time.time() - 10]
        done = [r.e2e for r in recent if r.e2e is not None]
        rps = len(recent) / 10
        p50 = f"{percentile(done, 50):.2f}s" if done else "-"
        p99 = f"{percentile(done, 99):.2f}s" if done else "-"
        errors = sum(is_error(r) for r in live)
        fallbacks = sum(r.fallback for r in live)
        self._say(
            f"[{phase} {now - window[0]:4.0f}s/{window[1] - window[0]:.0f}s] "
            f"elapsed {now:4.0f}s  {rps:4.1f} req/s  p50 {p50}  p99 {p99}  "
            f"requests {len(live)}  errors {errors}  fallbacks {fallbacks}"
        )


def _scored_as(status: RunStatus, aborted: dict[str, Any] | None) -> str:
    """How a run counts for its resilience score (``drills.model.score.score_of``): judged
    when it ran to its end, aborted when its abort conditions stopped it, else not at all."""
    if status is RunStatus.COMPLETED:
        return "judged"
    if status is RunStatus.ABORTED and (aborted or {}).get("cause") == "abort_condition":
        return "aborted"
    return "not scored"
