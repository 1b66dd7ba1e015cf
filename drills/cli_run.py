"""The commands that run drills (``drills run``, ``drills gate``, ``drills gameday``): the run
options from the command line, the dry run, the drill and its twins, what is printed as they
go and the exit code. ``drills.cli`` builds the parser and hands these commands their flags.

The engine, the stack's control and the reports are imported inside the commands, for the
reason ``drills.cli`` gives: the commands that do not run a drill must not wait for them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drills.common.errors import (
    EXIT_FAILED,
    EXIT_FAULT_LEFT,
    EXIT_OK,
    EXIT_USAGE,
    InputError,
)
from drills.common.stats import CONFIDENCE
from drills.engine.events import FOR_PEOPLE, RunEvent
from drills.model.gameday_journal import DayJournal
from drills.model.journal import Journal

if TYPE_CHECKING:
    from drills.common.yamlsrc import YamlDocument
    from drills.engine.options import RunOptions
    from drills.model.scenario import Scenario
    from drills.model.twins import Twin

__all__ = [
    "endpoint_flag",
    "gameday_command",
    "gate_command",
    "run_command",
    "run_options",
]


def _print_day_plan_json(
    plan: Any, drills: list[Any], answers: dict[str, Any], options: RunOptions
) -> int:
    """``drills gameday --dry-run --json``: each step, a drill's with its plan."""
    drill_iter = iter(drills)
    steps: list[dict[str, Any]] = []
    for step in plan.steps:
        if step.note is not None:
            steps.append({"note": step.note})
        elif step.checkpoint is not None:
            answered = answers.get(step.checkpoint.id)
            pre = {"answer": answered.answer, "by": answered.by} if answered else None
            checkpoint = step.checkpoint.model_dump(mode="json")
            steps.append({"checkpoint": checkpoint, "pre_answered": pre})
        else:
            scenario, doc = next(drill_iter)
            steps.append({"drill": _plan(scenario, doc, options), "on_fail": step.on_fail})
    print(json.dumps({"gameday": plan.gameday, "title": plan.title, "steps": steps}, indent=2))
    return _allowed([s["drill"] for s in steps if "drill" in s])


def run_options(args: argparse.Namespace) -> RunOptions:
    from drills.engine.history import open_history
    from drills.engine.options import RunOptions
    from drills.engine.safety import load_policy
    from drills.model.gateways import merged
    from drills.model.scenario import Attach

    if args.toxiproxy and not args.gateway:
        raise InputError(
            "--toxiproxy without --gateway: attaching needs the gateway's URL (--gateway URL)"
        )
    if args.profile and args.gateway:
        raise InputError(
            "--profile brings a stack up; --gateway/--toxiproxy attach to one: not both"
        )
    adapter = getattr(args, "adapter", None)
    if adapter is not None:
        try:
            merged(adapter)
        except ValueError as exc:
            raise InputError(f"--adapter: {exc}") from None
    given = {
        "gateway": args.gateway,
        "toxiproxy": args.toxiproxy,
        "adapter": adapter,
        "hop": getattr(args, "hop", None),
        "prometheus": endpoint_flag("--prometheus", getattr(args, "prometheus", None)),
        "alertmanager": endpoint_flag("--alertmanager", getattr(args, "alertmanager", None)),
        "pager": _listen("--pager", getattr(args, "pager", None)),
        "exporter": _listen("--exporter", getattr(args, "exporter", None)),
    }
    # Only what was given: the scenario's attach section gives the rest (``attach_of``), and
    # a scenario without one needs --toxiproxy too (said there, with the scenario's name).
    attach = (
        Attach.model_construct(**{k: v for k, v in given.items() if v is not None})
        if args.gateway
        or any(given[k] for k in ("prometheus", "alertmanager", "pager", "exporter"))
        else None
    )
    history = getattr(args, "history", None)
    open_history(history)  # a history of a kind this version cannot keep: bad input, now
    return RunOptions(
        out_dir=args.out,
        profile=args.profile,
        attach=attach,
        state_dir=args.state_dir,
        on_event=_print_for_people,
        safety=load_policy(args.safety),
        stack_config=args.stack_config,
        keep_stack=getattr(args, "keep_stack", False),
        with_parts=frozenset(getattr(args, "with_parts", None) or ()),
        confidence=getattr(args, "confidence", CONFIDENCE),
        label=getattr(args, "label", None),
        history=history,
        otlp=otlp_flag(getattr(args, "otlp", None)),
    )


def otlp_flag(url: str | None) -> Any:
    """Where the run's trace goes (``--otlp URL``, else the OpenTelemetry environment
    variables); bad input if that is not an http(s):// URL."""
    from drills.engine.tracing import otlp_target

    target = otlp_target(url)
    given = url if url else (target.endpoint if target else "")
    if target is not None and not given.startswith(("http://", "https://")):
        where = "--otlp" if url else "$OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT"
        raise InputError(
            f"{where}: {given!r} is not an http(s):// URL; drills sends traces over OTLP/HTTP "
            "(e.g. http://collector:4318)"
        )
    return target


def endpoint_flag(flag: str, url: str | None) -> Any:
    """``--prometheus URL`` (or ``--alertmanager``) as the attach section's endpoint; bad input
    if no URL."""
    from pydantic import ValidationError

    from drills.model.scenario import PrometheusEndpoint

    if url is None:
        return None
    try:
        return PrometheusEndpoint(url=url)
    except ValidationError:
        raise InputError(f"{flag}: {url!r} is not an http(s):// URL") from None


def _listen(flag: str, value: str | None) -> str | None:
    """``--pager HOST:PORT`` (or ``--exporter``); bad input if it is not one."""
    from drills.engine.pager import parse_listen

    if value is not None:
        try:
            parse_listen(value)
        except ValueError as exc:
            raise InputError(f"{flag}: {exc}") from None
    return value


def _plan(scenario: Scenario, doc: YamlDocument, options: RunOptions) -> dict[str, Any]:
    """A drill's dry run (``drills.dryrun``): what it would do, touching nothing."""
    from drills.dryrun import dry_run

    assert options.safety is not None
    return dry_run(scenario, doc, options, options.safety)


def _print_plan(scenario: Scenario, doc: YamlDocument, options: RunOptions, as_json: bool) -> bool:
    """Print a dry run; return whether the safety policy allows the drill."""
    from drills.dryrun import describe

    plan = _plan(scenario, doc, options)
    if as_json:
        print(json.dumps(plan, indent=2))
    else:
        print("\n".join(describe(plan)))
    return not plan["safety"]["refused"]


def _allowed(plans: list[dict[str, Any]]) -> int:
    return EXIT_USAGE if any(p["safety"]["refused"] for p in plans) else EXIT_OK


def gate_command(args: argparse.Namespace) -> int:
    from drills.gate import collect_scenarios, run_gate, validate_all, write_gate_reports
    from drills.model.scenario import load_scenario

    if args.concurrency < 1:
        raise InputError(f"--concurrency: {args.concurrency}; expected 1 or more")
    options = run_options(args)
    assert options.safety is not None
    files = collect_scenarios(args.paths)
    if args.dry_run and args.json:
        plans = [_plan(*load_scenario(path), options) for path in files]  # scenario, doc
        print(json.dumps(plans, indent=2))
        return _allowed(plans)
    if args.dry_run:
        allowed = True
        for path in files:
            scenario, doc = load_scenario(path)
            allowed = _print_plan(scenario, doc, options, False) and allowed
            print()
        return EXIT_OK if allowed else EXIT_USAGE
    loaded = validate_all(files, options, options.safety)
    if args.twins:
        without = [str(p) for p, s in loaded if not s.twins]
        if without:
            print(
                "no twins declared (run on their own stack only): " + ", ".join(without),
                file=sys.stderr,
            )
    args.out.mkdir(parents=True, exist_ok=True)
    results = run_gate(
        loaded,
        args.out,
        options,
        safety=args.safety,
        concurrency=args.concurrency,
        twins=args.twins,
        inconclusive=args.inconclusive,
        rerun_max=args.rerun_max,
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
    paths = write_gate_reports(results, args.out)
    if args.json:
        return _print_gate_json(results, paths)
    _print_gate_results(results)
    print(f"junit: {paths['junit']}")
    print(f"summary: {paths['markdown']}")
    return EXIT_OK if all(r.verdict == "passed" for r in results) else EXIT_FAILED


def _print_gate_results(results: list[Any]) -> None:
    """Each drill's verdict, with its failed checks and the ones it passed without being sure."""
    from reports.common import interval_text

    for result in results:
        print(f"{result.verdict.upper():11} {result.name}  ({result.path})")
        outcome = result.journal.twin if result.journal else None
        if outcome is not None:
            if not outcome.held:
                print(f"            {outcome.summary()}")
            continue
        for check in result.failed_checks:
            runbook = check.runbook or (result.journal and result.journal.runbook) or "-"
            print(
                f"            FAIL {check.label}: observed {check.observed_text}, "
                f"expected {check.expected}  runbook: {runbook}"
            )
        for check in result.inconclusive_checks:
            print(f"            UNSURE {check.label}: {interval_text(check)}")


def _print_gate_json(results: list[Any], paths: dict[str, Path]) -> int:
    gated: dict[str, Any] = {
        "verdict": "passed" if all(r.verdict == "passed" for r in results) else "failed",
        "drills": [
            {
                "name": r.name,
                "path": str(r.path),
                "verdict": r.verdict,
                "run": _outcome_json(r.journal) if r.journal else None,
            }
            for r in results
        ],
        "junit": str(paths["junit"]),
        "summary": str(paths["markdown"]),
    }
    print(json.dumps(gated, indent=2))
    return EXIT_OK if gated["verdict"] == "passed" else EXIT_FAILED


def gameday_command(args: argparse.Namespace) -> int:
    from drills.gameday import GameDay, TerminalResponder, load_answers, load_plan

    options = run_options(args)
    plan, doc, drills = load_plan(args.plan)
    answers = load_answers(args.answers, plan) if args.answers else {}
    day = GameDay(
        plan,
        doc,
        drills,
        options,
        answers,
        TerminalResponder(name=args.person),
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
    if args.dry_run and args.json:
        return _print_day_plan_json(plan, drills, answers, day._options())
    if args.dry_run:
        allowed = True
        print(f"game day {plan.gameday}: {plan.title}  ({doc.path})")
        drill_iter = iter(drills)
        for i, step in enumerate(plan.steps, 1):
            if step.note is not None:
                print(f"\n{i}. note: {step.note}")
            elif step.checkpoint is not None:
                cp = step.checkpoint
                answered = answers.get(cp.id)
                pre = f" [pre-answered: {answered.answer} by {answered.by}]" if answered else ""
                print(
                    f"\n{i}. checkpoint {cp.id} ({cp.kind}, asks {cp.who or 'the room'}, "
                    f"on no: {cp.on_no}): {cp.ask}{pre}"
                )
            else:
                scenario, sdoc = next(drill_iter)
                print(f"\n{i}. drill (on fail: {step.on_fail})")
                allowed = _print_plan(scenario, sdoc, day._options(), False) and allowed
        return EXIT_OK if allowed else EXIT_USAGE
    day_dir = day.run()
    journal = DayJournal.load(day_dir)
    if args.json:
        summary = journal.model_dump(mode="json", include={"gameday", "verdict", "steps"})
        where = {"journal": str(day_dir / "gameday.json"), "report": str(day_dir / "index.html")}
        print(json.dumps({**summary, **where}, indent=2))
        return EXIT_OK if journal.verdict == "passed" else EXIT_FAILED
    for ran in journal.steps:
        if ran.kind == "drill":
            print(f"  drill {ran.drill}: {ran.verdict}")
        elif ran.kind == "checkpoint":
            print(f"  checkpoint {ran.id}: {ran.answer} by {ran.by}")
    print(f"verdict: {journal.verdict}")
    print(f"report: {day_dir / 'index.html'}")
    return EXIT_OK if journal.verdict == "passed" else EXIT_FAILED


def _print_checks(journal: Journal) -> None:
    for check in journal.checks:
        mark = "pass" if check.passed else "FAIL"
        print(f"  {mark}  {check.label}: observed {check.observed_text}, expected {check.expected}")


def _print_load(journal: Journal) -> None:
    """The load's line: an open loop's rate as asked and as sent, and a shortfall loudly."""
    load = journal.load
    if load is None or load.mode != "open":
        return
    sent = f"{load.observed_rate:.2f}/s" if load.observed_rate is not None else "too few to tell"
    print(f"  load: asked {load.asked_rate:g} requests/s ({load.arrival}), sent {sent}")
    if load.short:
        print(f"  LOAD FELL SHORT: {load.short}")
    elif load.warning:
        print(f"  load warning: {load.warning}")


def run_command(args: argparse.Namespace) -> int:
    from drills.engine.runner import Runner
    from drills.model.scenario import load_scenario

    options = run_options(args)
    scenario, doc = load_scenario(args.scenario)
    times = args.repeat or args.until_conclusive
    if times is not None and (args.twin is not None or args.dry_run):
        with_what = "--twin" if args.twin is not None else "--dry-run"
        flag = "--repeat" if args.repeat else "--until-conclusive"
        raise InputError(
            f"{flag} {times} repeats the drill itself; it does not go with {with_what} "
            "(a dry run changes nothing to repeat; a twin is judged by its own run)"
        )
    if times is not None:
        return _repeat_command(scenario, doc, options, args, times)
    if args.twin is not None:
        return _run_twins(scenario, doc, options, args)
    if args.dry_run:
        return EXIT_OK if _print_plan(scenario, doc, options, args.json) else EXIT_USAGE
    print(f"drill {scenario.drill}: {scenario.title} ({scenario.duration:.0f}s)", file=sys.stderr)
    journal = Runner(scenario, doc, options).run()
    if args.json:
        print(json.dumps(_outcome_json(journal), indent=2))
    else:
        _print_checks(journal)
        _print_load(journal)
        print(f"verdict: {journal.verdict}")
        print(f"report: {Path(journal.run_dir) / 'index.html'}")
    if journal.stack.profile:
        _after_the_drill(journal.stack.profile, args)
    if journal.rollbacks.left:
        for line in journal.rollbacks.left:
            print(f"STILL IN FORCE: {line} (`drills faults`, `drills abort`)", file=sys.stderr)
        return EXIT_FAULT_LEFT
    return EXIT_OK if journal.verdict == "passed" else EXIT_FAILED


def _repeat_command(
    scenario: Scenario,
    doc: YamlDocument,
    options: RunOptions,
    args: argparse.Namespace,
    times: int,
) -> int:
    """``drills run X --repeat N`` (``--until-conclusive MAX``): the drill run again and
    again on the same stack, each check judged over all the runs (``drills.engine.repeat``)."""
    from drills.engine.repeat import repeat, run_dir_of
    from reports.common import interval_text
    from reports.repeat import render_repeat

    asked = f"up to {times} times, until conclusive" if args.until_conclusive else f"{times} times"
    print(
        f"drill {scenario.drill}: {scenario.title} ({scenario.duration:.0f}s), {asked}",
        file=sys.stderr,
    )

    last: list[Journal] = []

    def said(i: int, journal: Journal) -> None:
        last[:] = [journal]
        print(
            f"run {i}: {journal.verdict} ({journal.status}); report: "
            f"{Path(journal.run_dir) / 'index.html'}",
            file=sys.stderr,
        )

    rep = repeat(scenario, doc, options, times, bool(args.until_conclusive), said)
    out = run_dir_of(scenario, options)
    paths = render_repeat(rep, out)
    if args.json:
        print(rep.model_dump_json(indent=2))
    else:
        for check in rep.checks:
            result = check.result
            mark = "PASS" if result.passed else "FAIL"
            interval = interval_text(result)
            print(
                f"  {mark}  {check.label} [{check.how}]: {result.observed_text} "
                f"(expected {result.expected})" + (f"; {interval}" if interval else "")
            )
        print(f"repetitions: {len(rep.runs)}; {rep.stopped}")
        print(f"verdict: {rep.verdict}")
        print(f"report: {paths['html']}")
    if last and last[-1].stack.profile:
        _after_the_drill(last[-1].stack.profile, args)
    if any(r.faults_left for r in rep.runs):
        for run in rep.runs:
            for line in run.faults_left:
                print(f"STILL IN FORCE: {line} (`drills faults`, `drills abort`)", file=sys.stderr)
        return EXIT_FAULT_LEFT
    return EXIT_OK if rep.verdict == "passed" else EXIT_FAILED


def _print_twin(twin: Twin) -> None:
    stack = (
        f"profile {twin.profile}"
        if twin.profile
        else f"LiteLLM with {twin.litellm}"
        if twin.litellm
        else f"attach {twin.attach}"
        if twin.attach
        else "the drill's stack"
    )
    if twin.kubernetes is not None:
        stack += ", kubernetes " + str(twin.kubernetes.model_dump(exclude_none=True))
    print(f"twin {twin.key} ({stack}): must fail: {', '.join(twin.must_fail)}")
    if twin.may_fail:
        print(f"  may fail: {', '.join(twin.may_fail)}")
    for hop in twin.absent:
        print(f"  faults on {hop} are not applied (the twin's stack has none)")


def _twin_plan(scenario: Scenario, twin: Twin, options: RunOptions) -> tuple[Scenario, RunOptions]:
    """What a dry run shows of a twin: its faults where the twin has them (``kubernetes``),
    on its attach fields over the drill's."""
    import dataclasses

    from drills.engine.options import attach_of
    from drills.engine.twins import in_twin_cluster
    from drills.model.scenario import Attach

    own = attach_of(scenario, options)
    if twin.attach is not None and own is not None:
        merged = {**own.model_dump(exclude_unset=True), **twin.attach}
        options = dataclasses.replace(options, attach=Attach.model_validate(merged))
    return in_twin_cluster(scenario, twin), options


def _run_twins(
    scenario: Scenario, doc: YamlDocument, options: RunOptions, args: argparse.Namespace
) -> int:
    """``drills run X --twin [NAME]``: the drill on its twins, one after another."""
    from drills.engine.options import attach_of
    from drills.engine.twins import pick_twins, run_twin

    twins = pick_twins(scenario, doc, args.twin or None)
    if args.dry_run and args.json:
        plans: list[dict[str, Any]] = [
            {"twin": twin.key, "plan": _plan(on, doc, opts)}
            for twin in twins
            for on, opts in [_twin_plan(scenario, twin, options)]
        ]
        print(json.dumps(plans, indent=2))
        return _allowed([p["plan"] for p in plans])
    if args.dry_run:
        planned = True
        for twin in twins:
            _print_twin(twin)
            on_twin, twin_options = _twin_plan(scenario, twin, options)
            planned = _print_plan(on_twin, doc, twin_options, args.json) and planned
        return EXIT_OK if planned else EXIT_USAGE
    code = EXIT_OK
    outcomes: list[dict[str, Any]] = []
    for twin in twins:
        print(
            f"drill {scenario.drill} on its twin {twin.key}: {twin.why or scenario.title} "
            f"({scenario.duration:.0f}s)",
            file=sys.stderr,
        )
        journal = run_twin(scenario, doc, twin, options)
        outcome = journal.twin
        assert outcome is not None
        if args.json:
            outcomes.append(_outcome_json(journal))
            code = code if outcome.held else EXIT_FAILED
            if journal.rollbacks.left:
                break
            continue
        _print_twin_checks(journal)
        for skipped in outcome.skipped_faults:
            print(f"  not applied: {skipped}")
        print(outcome.summary())
        print(f"report: {Path(journal.run_dir) / 'index.html'}")
        if journal.rollbacks.left:
            for line in journal.rollbacks.left:
                print(f"STILL IN FORCE: {line} (`drills faults`, `drills abort`)", file=sys.stderr)
            return EXIT_FAULT_LEFT
        if not outcome.held:
            code = EXIT_FAILED
    if args.json:
        print(json.dumps(outcomes, indent=2))
        if outcomes and outcomes[-1]["left_in_force"]:
            for line in outcomes[-1]["left_in_force"]:
                print(f"STILL IN FORCE: {line} (`drills faults`, `drills abort`)", file=sys.stderr)
            return EXIT_FAULT_LEFT
    if attach_of(scenario, options) is None:  # the drill's stack is an embedded profile
        _after_the_twins(args)
    return code


def _print_twin_checks(journal: Journal) -> None:
    """Each check of a twin's run with what the twin declared of it."""
    outcome = journal.twin
    assert outcome is not None
    for check in journal.checks:
        named = (
            "must fail"
            if check.label in outcome.must_fail
            else "may fail"
            if check.label in outcome.may_fail
            else "must pass"
        )
        mark = "pass" if check.passed else "FAIL"
        ok = (check.passed or named != "must pass") and (not check.passed or named != "must fail")
        print(
            f"  {mark}  {check.label} [{named}{'' if ok else ': NOT AS DECLARED'}]: "
            f"observed {check.observed_text}, expected {check.expected}"
        )


def _outcome_json(journal: Journal) -> dict[str, Any]:
    """What ``--json`` prints of a run: its verdict, each check, what it left in force, and
    where its journal and report are (the journal holds everything else)."""
    twin = journal.twin
    return {
        "drill": journal.drill,
        "run_id": journal.run_id,
        "twin": None
        if twin is None
        else {"name": twin.name, "held": twin.held, "missed": twin.missed, "unnamed": twin.unnamed},
        "verdict": journal.verdict,
        "status": journal.status.value,
        "checks": [
            {
                "label": c.label,
                "passed": c.passed,
                "observed": c.observed,
                "expected": c.expected,
                "runbook": c.runbook,
            }
            for c in journal.checks
        ],
        "aborted": journal.aborted,
        "left_in_force": journal.rollbacks.left,
        "journal": str(Path(journal.run_dir) / "journal.json"),
        "report": str(Path(journal.run_dir) / "index.html"),
    }


def _after_the_twins(args: argparse.Namespace) -> None:
    """What the twins' runs left up in the state directory: the drill's own stack, which a
    twin's gateway ran beside (a twin brought up whole replaced it). ``--stop-stack`` stops
    it, as after the drill."""
    from stack import control

    current = control.status(args.state_dir)
    if current.running:
        _after_the_drill(current.stack, args)


def _after_the_drill(profile: str, args: argparse.Namespace) -> None:
    """Say what became of the profile's stack (on stderr: the report's path stays the last
    line of stdout), or stop it (``--stop-stack``)."""
    from stack import control

    if args.stop_stack:
        control.down(args.state_dir)
        print(f"stack {profile!r}: stopped (--stop-stack)", file=sys.stderr)
        return
    whose = (
        "yours: no run replaces it"
        if control.owner(args.state_dir) == "user"
        else "a later drill of another profile replaces it while idle"
    )
    print(
        f"stack {profile!r} is still up ({whose}); `drills stack down` stops it",
        file=sys.stderr,
    )


def _print_for_people(event: RunEvent) -> None:
    """The run's live lines on the terminal (its timeline events are logged already)."""
    if event.kind in FOR_PEOPLE:
        print(event.message, file=sys.stderr, flush=True)
