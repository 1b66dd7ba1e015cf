"""Game days: a plan of drills in order, with the people in the room.

A plan (``scenarios/gameday-*.yaml``) lists steps: ``note`` (read out to the room), ``checkpoint``
(a person confirms or answers before the day goes on: "the on-call approves cutting traffic") and
``drill`` (a scenario file, run like ``drills run``). Checkpoints are answered at the terminal, or
ahead of time from an answers file for a rehearsal. Observers add notes at any time, at a
checkpoint prompt (``note: ...``) or from another terminal (``drills note TEXT``).

The day writes one directory: ``gameday.json`` (the contract, like a drill's journal), each
drill's own run directory under ``runs/``, and one combined report: a minute-by-minute timeline of
all drills, checkpoints and notes, who confirmed what, each drill's verdict, and the runbook steps
the day exercised against those it never reached. ``drills abort`` stops the day: the running
drill reverts everything and no further step starts.
"""

from __future__ import annotations

import getpass
import json
import logging
import re
import secrets
import select
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from drills.common.errors import ConfigError, KillSwitch, SafetyViolation
from drills.common.jsonl import read_jsonl
from drills.common.redact import redact
from drills.common.system import pid_alive
from drills.common.units import Duration
from drills.common.yamlsrc import YamlDocument, format_path, load_yaml, parse_model
from drills.engine.events import FOR_PEOPLE, RunEvent
from drills.engine.options import RunOptions, attach_of, attach_urls, parts_for_all
from drills.engine.runner import Runner
from drills.engine.safety import abort_request, check_scenario, load_policy, register_run, runs_dir
from drills.model.gameday_journal import DAY_FORMAT, DayJournal
from drills.model.scenario import Attach, Scenario, load_scenario
from drills.model.score import Score, combined
from reports.gameday import render_gameday

__all__ = [
    "Answer",
    "Checkpoint",
    "GameDay",
    "Plan",
    "Step",
    "TerminalResponder",
    "add_note",
    "load_answers",
    "load_plan",
    "runbook_steps",
]

logger = logging.getLogger(__name__)

DAY_EVENTS = frozenset({"phase_start", "fault_applied", "fault_reverted", "aborted"})
"""The events of a drill that the game day's timeline shows."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Checkpoint(_Model):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,60}$")
    ask: str = Field(min_length=1)
    kind: Literal["confirm", "answer"] = "confirm"
    """``confirm``: yes or no; ``answer``: free text (a decision, a number, a name)."""
    who: str | None = None
    """The role expected to answer (on-call, incident commander, product owner)."""
    on_no: Literal["stop", "continue"] = "stop"
    """What a "no" (or no answer before ``timeout``) does to the day."""
    timeout: Duration | None = None
    runbook: str | None = None
    """The runbook step this checkpoint exercises (``path#anchor``, relative to the plan)."""


class Step(_Model):
    """Exactly one of ``note``, ``checkpoint``, ``drill``."""

    note: str | None = None
    checkpoint: Checkpoint | None = None
    drill: str | None = None
    """A scenario file, relative to the plan."""
    notes: str = ""
    """For the people in the room, shown before the drill starts."""
    on_fail: Literal["continue", "stop"] = "continue"

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        kinds = [k for k in ("note", "checkpoint", "drill") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                "a step is exactly one of: note, checkpoint, drill"
                + (f" (got {', '.join(kinds)})" if kinds else "")
            )
        return self

    @property
    def kind(self) -> str:
        return "note" if self.note is not None else "checkpoint" if self.checkpoint else "drill"


class Plan(_Model):
    gameday: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,60}$")
    title: str
    description: str = ""
    facilitator: str | None = None
    stack: str | Attach | None = None
    """Overrides every drill's own ``stack:`` (a profile name or attach endpoints)."""
    steps: list[Step] = Field(min_length=1)

    def problems(self) -> Iterator[tuple[tuple[str | int, ...], str, Any]]:
        seen: set[str] = set()
        for i, step in enumerate(self.steps):
            if step.checkpoint is not None:
                if step.checkpoint.id in seen:
                    yield (
                        ("steps", i, "checkpoint", "id"),
                        "checkpoint ids must be unique",
                        step.checkpoint.id,
                    )
                seen.add(step.checkpoint.id)


def load_plan(path: Path | str) -> tuple[Plan, YamlDocument, list[tuple[Scenario, YamlDocument]]]:
    """Load a plan and every drill it names; raise ``ConfigError`` listing every problem."""
    doc = load_yaml(path)
    plan = parse_model(Plan, doc)
    problems: list[str] = []
    drills: list[tuple[Scenario, YamlDocument]] = []
    for i, step in enumerate(plan.steps):
        if step.drill is None:
            continue
        file = doc.path.parent / step.drill
        if not file.exists():
            problems.append(
                f"{doc.path}:{doc.line_of(('steps', i, 'drill'))} "
                f"{format_path(('steps', i, 'drill'))}: no such scenario file {step.drill!r} "
                f"(looked for {file})"
            )
            continue
        try:
            drills.append(load_scenario(file))
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)
    return plan, doc, drills


# -- answers ---------------------------------------------------------------------------------


@dataclass
class Answer:
    answer: str | None
    """``yes``/``no`` for confirm checkpoints, the text for answer checkpoints; ``None``: no
    answer came (timeout or end of input)."""
    by: str | None
    source: Literal["rehearsal", "terminal", "timeout", "end-of-input"]
    at: float = field(default_factory=time.time)

    @property
    def confirmed(self) -> bool:
        return self.answer is not None and self.answer.lower() not in ("no", "n")


class AnswersFile(BaseModel):
    """A rehearsal's pre-answered checkpoints (``--answers FILE``)."""

    model_config = ConfigDict(extra="forbid")
    answers: dict[str, str | bool | dict[str, str]]


def load_answers(path: Path, plan: Plan) -> dict[str, Answer]:
    """Pre-answered checkpoints for a rehearsal: ``answers: {ID: yes | TEXT | {answer, by}}``."""
    doc = load_yaml(path)
    parsed = parse_model(AnswersFile, doc)
    ids = [s.checkpoint.id for s in plan.steps if s.checkpoint is not None]
    out, problems = {}, []
    for key, value in parsed.answers.items():
        if key not in ids:
            problems.append(
                f"{path}:{doc.line_of(('answers', key))} answers.{key}: the plan has no such "
                f"checkpoint; expected one of: {', '.join(ids) or '(none)'}"
            )
            continue
        by = "rehearsal"
        if isinstance(value, dict):
            by = value.get("by", by)
            text = value.get("answer")
        else:
            text = ("yes" if value else "no") if isinstance(value, bool) else value
        out[key] = Answer(text, by, "rehearsal")
    if problems:
        raise ConfigError(problems)
    return out


class TerminalResponder:
    """Asks checkpoints on a terminal (or any line stream: a pipe works for a scripted day)."""

    def __init__(
        self, stdin: IO[str] = sys.stdin, stdout: IO[str] = sys.stderr, name: str | None = None
    ) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self.name = name

    def _line(self, prompt: str, deadline: float | None) -> str | None:
        self.stdout.write(prompt)
        self.stdout.flush()
        if deadline is not None:
            remaining = max(deadline - time.time(), 0.0)
            ready, _, _ = select.select([self.stdin], [], [], remaining)
            if not ready:
                self.stdout.write("\n")
                return None
        line = self.stdin.readline()
        return None if line == "" else line.strip()

    def ask(self, checkpoint: Checkpoint, note: Callable[[str, str], None]) -> Answer:
        deadline = time.time() + checkpoint.timeout if checkpoint.timeout else None
        who = f" ({checkpoint.who})" if checkpoint.who else ""
        self.stdout.write(f"\n[checkpoint {checkpoint.id}]{who} {checkpoint.ask}\n")
        choices = "yes/no" if checkpoint.kind == "confirm" else "your answer"
        while True:
            line = self._line(f"  {choices} (or 'note: TEXT') > ", deadline)
            if line is None:
                return Answer(None, None, "timeout" if deadline else "end-of-input")
            if line.lower().startswith("note:"):
                note(line[5:].strip(), self.name or "room")
                continue
            if checkpoint.kind == "confirm" and line.lower() not in ("yes", "y", "no", "n"):
                self.stdout.write("  please answer yes or no\n")
                continue
            if not line:
                continue
            answer = "yes" if line.lower() in ("yes", "y") else line
            answer = "no" if line.lower() in ("no", "n") else answer
            by = self.name or self._line("  your name > ", deadline) or getpass.getuser()
            return Answer(answer, by, "terminal")


# -- runbooks ---------------------------------------------------------------------------------


def _slug(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", title.strip().lower()))


def runbook_steps(path: Path) -> list[tuple[str, str]]:
    """``(anchor, title)`` of every ``##``/``###`` heading of a Markdown runbook."""
    steps = []
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code:
            continue
        match = re.match(r"^(##|###)\s+(.+?)\s*#*$", line)
        if match:
            steps.append((_slug(match.group(2)), match.group(2)))
    return steps


def _split(base: Path, link: str) -> tuple[Path, str]:
    path, _, anchor = link.partition("#")
    return (base / path).resolve(), anchor


# -- running a day ----------------------------------------------------------------------------


class GameDay:
    """Run a plan; ``run()`` returns the day's directory (``gameday.json`` and reports)."""

    def __init__(
        self,
        plan: Plan,
        doc: YamlDocument,
        drills: list[tuple[Scenario, YamlDocument]],
        options: RunOptions,
        answers: dict[str, Answer] | None = None,
        responder: TerminalResponder | None = None,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.plan = plan
        self.doc = doc
        self.drills = drills
        self.options = options
        self.answers = answers or {}
        self.responder = responder or TerminalResponder()
        self.say = say
        self.day_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
        self.dir = options.out_dir / f"gameday-{plan.gameday}-{self.day_id}"
        self.timeline: list[dict[str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.notes_path = self.dir / "notes.jsonl"

    def check(self) -> None:
        """Everything the day will run, against the safety policy, before anything starts."""

        policy = self.options.safety or load_policy()
        problems: list[str] = []
        for scenario, doc in self.drills:
            try:
                check_scenario(
                    scenario, doc, policy, attach_urls(attach_of(scenario, self._options()))
                )
            except SafetyViolation as exc:
                problems.extend(exc.problems)
        if problems:
            raise SafetyViolation(problems)

    def _options(self) -> RunOptions:
        options = self.options
        if options.attach is None and options.profile is None and self.plan.stack is not None:
            if isinstance(self.plan.stack, Attach):
                options = RunOptions(**{**options.__dict__, "attach": self.plan.stack})
            else:
                options = RunOptions(**{**options.__dict__, "profile": self.plan.stack})
        # The stack starts with what any drill of the day needs: none restarts it mid-day.
        parts = parts_for_all([s for s, _ in self.drills], options)
        return RunOptions(**{**options.__dict__, "with_parts": parts})

    def _event(self, source: str, event: str, **detail: Any) -> None:
        self.timeline.append({"time": time.time(), "source": source, "event": event, **detail})

    def _note(self, text: str, by: str, source: str = "checkpoint prompt") -> None:
        with self.notes_path.open("a") as out:
            out.write(json.dumps({"time": time.time(), "by": by, "text": text, "source": source}))
            out.write("\n")

    def run(self) -> Path:
        self.check()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.notes_path.touch()
        started = time.time()
        status = "completed"
        stop_reason: str | None = None
        drill_iter = iter(self.drills)
        with register_run(self.day_id, f"gameday {self.plan.gameday}", self.dir) as abort_path:
            self._event("gameday", "day_start", title=self.plan.title)
            try:
                for index, step in enumerate(self.plan.steps):
                    record: dict[str, Any] = {
                        "index": index,
                        "kind": step.kind,
                        "started_at": time.time(),
                    }
                    self.steps.append(record)
                    if step.note is not None:
                        record["text"] = step.note
                        self.say(f"\n[note] {step.note}")
                        self._event("plan", "note", text=step.note)
                    elif step.checkpoint is not None:
                        if not self._checkpoint(step.checkpoint, record):
                            status, stop_reason = "stopped", f"checkpoint {step.checkpoint.id}"
                    else:
                        scenario, sdoc = next(drill_iter)
                        verdict = self._drill(step, scenario, sdoc, record)
                        if verdict == "aborted" and record.get("kill_switch"):
                            raise KillSwitch(record.get("abort_reason") or "drills abort")
                        if verdict == "interrupted":
                            status, stop_reason = "interrupted", f"drill {scenario.drill}"
                        elif verdict != "passed" and step.on_fail == "stop":
                            status, stop_reason = "stopped", f"drill {scenario.drill} {verdict}"
                    record["ended_at"] = time.time()
                    if status != "completed":
                        break
            except KillSwitch as exc:
                status = "aborted"
                stop_reason = f"kill switch: {exc}"
                detail = abort_request(abort_path)
                self._event("gameday", "aborted", reason=str(exc), **detail)
            except KeyboardInterrupt:
                status, stop_reason = "interrupted", "Ctrl-C"
                self._event("gameday", "interrupted")
        ended = time.time()
        self._event("gameday", "day_end", status=status)
        journal = self._journal(started, ended, status, stop_reason)
        path = self.dir / "gameday.json"
        # Written through its model: a field the day sets that the journal does not know is
        # an error here, not a key the report never reads.
        # (Through JSON first, as it was written before: a detail that is not JSON, such as a
        # path, is kept as its text.)
        DayJournal.of(json.loads(json.dumps(redact(journal), default=str))).write(path)

        render_gameday(path)
        return self.dir

    def _checkpoint(self, checkpoint: Checkpoint, record: dict[str, Any]) -> bool:
        record.update(id=checkpoint.id, ask=checkpoint.ask, who=checkpoint.who)
        self._event("checkpoint", "asked", id=checkpoint.id, ask=checkpoint.ask)
        answer = self.answers.get(checkpoint.id)
        if answer is None:
            answer = self.responder.ask(checkpoint, lambda text, by: self._note(text, by))
        else:
            self.say(
                f"\n[checkpoint {checkpoint.id}] {checkpoint.ask}\n"
                f"  pre-answered ({answer.source}): {answer.answer} by {answer.by}"
            )
            answer.at = time.time()
        record.update(
            answer=answer.answer,
            by=answer.by,
            source=answer.source,
            confirmed=answer.confirmed,
            answered_at=answer.at,
            runbook=checkpoint.runbook,
        )
        self._event(
            "checkpoint",
            "answered" if answer.answer is not None else "unanswered",
            id=checkpoint.id,
            answer=answer.answer,
            by=answer.by,
            via=answer.source,
        )
        if not answer.confirmed and checkpoint.on_no == "stop":
            self.say(f"  the day stops here: checkpoint {checkpoint.id} was not confirmed")
            return False
        return True

    def _drill(
        self, step: Step, scenario: Scenario, doc: YamlDocument, record: dict[str, Any]
    ) -> str:
        record.update(drill=scenario.drill, file=str(doc.path), title=scenario.title)
        if step.notes:
            self.say(f"\n[drill {scenario.drill}] {step.notes}")
        self.say(f"\n[drill {scenario.drill}] {scenario.title} ({scenario.duration:.0f}s)")

        def on_event(event: RunEvent) -> None:
            # The drill's phases and faults go in the day's timeline as they happen.
            if event.kind in FOR_PEOPLE:
                self.say(event.message)
            elif event.kind in DAY_EVENTS:
                self._event(scenario.drill, event.kind, **event.detail)

        options = RunOptions(
            **{**self._options().__dict__, "out_dir": self.dir / "runs", "on_event": on_event}
        )
        self._event("drill", "drill_start", drill=scenario.drill)
        try:
            journal = Runner(scenario, doc, options).run()
        except KillSwitch as exc:
            record.update(verdict="aborted", kill_switch=True, abort_reason=str(exc))
            self._event("drill", "drill_end", drill=scenario.drill, verdict="aborted")
            return "aborted"
        except Exception as exc:  # recorded on the day, not lost
            record.update(verdict="error", error=f"{type(exc).__name__}: {exc}")
            self._event("drill", "drill_end", drill=scenario.drill, verdict="error")
            self.say(f"[drill {scenario.drill}] could not run: {exc}")
            return "error"
        aborted = journal.aborted or {}
        record.update(
            verdict=journal.verdict,
            run_dir=journal.run_dir,
            run_id=journal.run_id,
            runbook=journal.runbook,
            checks=[
                c.model_dump(include={"label", "passed", "observed_text", "expected", "runbook"})
                for c in journal.checks
            ],
            kill_switch=aborted.get("cause") == "kill_switch",
            abort_reason=aborted.get("reason"),
            # Who saw each fault, how fast: the day's report opens with it.
            detection=[d.model_dump(mode="json") for d in journal.detection],
            score=journal.score.model_dump() if journal.score else None,
        )
        self._event("drill", "drill_end", drill=scenario.drill, verdict=journal.verdict)
        self.say(f"[drill {scenario.drill}] verdict: {journal.verdict}")
        return journal.verdict

    def _notes(self) -> list[dict[str, Any]]:
        return read_jsonl(self.notes_path)

    def _coverage(self) -> list[dict[str, Any]]:
        """Each runbook the day's drills and checkpoints link to, step by step: exercised (a
        check linked to it was evaluated, or a checkpoint was answered) or never reached."""
        plan_base = self.doc.path.parent
        links: dict[Path, dict[str, list[dict[str, Any]]]] = {}

        def touch(file: Path, anchor: str, entry: dict[str, Any] | None) -> None:
            steps = links.setdefault(file, {})
            if entry is not None:
                steps.setdefault(anchor, []).append(entry)

        for scenario, doc in self.drills:
            base = doc.path.parent
            if scenario.runbook:
                touch(_split(base, scenario.runbook)[0], "", None)
            for check in scenario.expect:
                if check.runbook:
                    touch(_split(base, check.runbook)[0], "", None)
        for record in self.steps:
            if record["kind"] == "checkpoint" and record.get("runbook"):
                file, anchor = _split(plan_base, record["runbook"])
                touch(
                    file,
                    anchor,
                    {"by": f"checkpoint {record['id']}", "passed": bool(record.get("confirmed"))},
                )
            if record["kind"] == "drill" and record.get("checks"):
                base = Path(record["file"]).parent
                for check in record["checks"]:
                    if check.get("runbook"):
                        file, anchor = _split(base, check["runbook"])
                        touch(
                            file,
                            anchor,
                            {
                                "by": f"{record['drill']}: {check['label']}",
                                "passed": check["passed"],
                            },
                        )
        coverage = []
        for file, reached in sorted(links.items()):
            steps = runbook_steps(file) if file.exists() else []
            coverage.append(
                {
                    "runbook": str(file),
                    "steps": [
                        {
                            "anchor": anchor,
                            "title": title,
                            "exercised": bool(reached.get(anchor)),
                            "by": reached.get(anchor, []),
                        }
                        for anchor, title in steps
                    ],
                }
            )
        return coverage

    def _journal(
        self, started: float, ended: float, status: str, stop_reason: str | None
    ) -> dict[str, Any]:
        drills = [s for s in self.steps if s["kind"] == "drill"]
        checkpoints = [s for s in self.steps if s["kind"] == "checkpoint"]
        skipped = [
            {
                "index": i,
                "kind": step.kind,
                "what": step.drill or (step.checkpoint and step.checkpoint.id),
            }
            for i, step in enumerate(self.plan.steps)
            if i >= len(self.steps)
        ]
        notes = self._notes()
        for note in notes:
            self.timeline.append(
                {
                    "time": note["time"],
                    "source": "observer",
                    "event": "note",
                    "by": note["by"],
                    "text": note["text"],
                    "via": note["source"],
                }
            )
        if status == "aborted":
            verdict = "aborted"
        elif status == "interrupted":
            verdict = "interrupted"
        elif (
            status == "completed"
            and all(d.get("verdict") == "passed" for d in drills)
            and all(c.get("confirmed") for c in checkpoints)
        ):
            verdict = "passed"
        else:
            verdict = "failed"
        return {
            "format": DAY_FORMAT,
            "gameday": self.plan.gameday,
            "title": self.plan.title,
            "description": self.plan.description,
            "facilitator": self.plan.facilitator,
            "id": self.day_id,
            "plan_path": str(self.doc.path),
            "status": status,
            "stop_reason": stop_reason,
            "verdict": verdict,
            "score": _day_score(drills),
            "started_at": started,
            "ended_at": ended,
            "steps": self.steps,
            "skipped": skipped,
            "notes": notes,
            "timeline": sorted(self.timeline, key=lambda e: e["time"]),
            "runbooks": self._coverage(),
        }


def _day_score(drills: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The day's resilience score: its drills' scores weighted by their checks
    (``drills.model.score.combined``); a drill that could not run scores nothing."""
    day = combined([Score.model_validate(d["score"]) for d in drills if d.get("score")])
    return day.model_dump() if day else None


def add_note(text: str, by: str | None = None) -> list[dict[str, Any]]:
    """Append an observer note to every running game day on this machine."""
    days = []
    for entry in sorted(runs_dir().glob("*.json")):
        try:
            data = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        if not str(data.get("what", "")).startswith("gameday "):
            continue

        if not pid_alive(int(data.get("pid", 0))):
            continue
        notes = Path(data["run_dir"]) / "notes.jsonl"
        with notes.open("a") as out:
            out.write(
                json.dumps(
                    {
                        "time": time.time(),
                        "by": by or getpass.getuser(),
                        "text": text,
                        "source": "drills note",
                    }
                )
                + "\n"
            )
        days.append(data)
    return days
