"""The CI resilience gate: run a set of drills, write one JUnit file and one summary, fail on any
failed check.

A check that passed on too few requests to be sure (its confidence interval reaches past the
bound: ``CheckResult.conclusive`` is false) passes the gate by default, as its observed value
says, and is listed as inconclusive; with ``inconclusive="fail"`` (``--inconclusive fail``) it
fails the gate. The default is ``pass`` because a short drill in CI judges a few dozen requests,
whose intervals are wide: failing on each would fail most gates on noise, and a gate that
flakes is switched off. Teams that run drills long enough to be sure opt in to ``fail``; with
``inconclusive="rerun"`` (``--inconclusive rerun``) a drill runs again (``drills run
--until-conclusive``) until its checks, judged over its runs, are sure, ``rerun_max`` runs at
most, and fails the gate if they are still not.

Every file is validated (schema, stack hops, safety policy) before the first drill starts: a gate
with one bad file touches nothing. Drills share the stack, so by default they run one at a time;
each runs in its own ``drills run`` process (a crash or a kill switch ends that drill, not the
gate), with its journal and reports under ``OUT/runs``.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree as ET

from drills.common.errors import ConfigError, InputError, SafetyViolation
from drills.common.stats import CONFIDENCE
from drills.engine.options import RunOptions, attach_of, attach_urls, parts_for_all
from drills.engine.safety import SafetyPolicy, check_scenario
from drills.model.journal import CheckResult, Journal
from drills.model.repeat import Repetitions
from drills.model.scenario import Scenario, load_scenario
from reports import load_journal, render_junit_suites, render_markdown
from reports.common import interval_text

__all__ = ["GateResult", "collect_scenarios", "run_gate", "validate_all"]

logger = logging.getLogger(__name__)


@dataclass
class GateResult:
    path: Path
    drill: str
    verdict: str
    """passed, failed, aborted, interrupted, ``error`` (the drill produced no journal), or
    ``inconclusive`` (passed with a check that was not sure, under ``--inconclusive fail``)."""
    run_dir: Path | None
    journal: Journal | None
    exit_code: int
    log: Path | None = None
    twin: str | None = None
    """The twin this run was on (``--twins``); its verdict is whether the twin held."""

    @property
    def name(self) -> str:
        return f"{self.drill} on its twin {self.twin}" if self.twin else self.drill

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [c for c in (self.journal.checks if self.journal else []) if not c.passed]

    @property
    def inconclusive_checks(self) -> list[CheckResult]:
        """Checks that passed on too few requests to be sure (another run could turn them)."""
        checks = self.journal.checks if self.journal else []
        return [c for c in checks if c.passed and c.conclusive is False]


def collect_scenarios(paths: list[Path]) -> list[Path]:
    """Scenario files named or found (``*.yaml``/``*.yml`` with a top-level ``drill:``) in
    directories, in a stable order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            for candidate in sorted([*path.rglob("*.yaml"), *path.rglob("*.yml")]):
                try:
                    head = candidate.read_text(errors="replace")
                except OSError:
                    continue
                if any(line.startswith("drill:") for line in head.splitlines()):
                    found.append(candidate)
        elif path.exists():
            found.append(path)
        else:
            raise InputError(f"{path}: no such file or directory")
    if not found:
        raise InputError(f"no drill scenarios in {', '.join(map(str, paths))}")
    return found


def validate_all(
    files: list[Path], options: RunOptions, policy: SafetyPolicy
) -> list[tuple[Path, Scenario]]:
    """Load every scenario and check it against the safety policy; raise ``ConfigError`` with
    every problem of every file at once."""
    problems: list[str] = []
    loaded = []
    for path in files:
        try:
            scenario, doc = load_scenario(path)
            check_scenario(scenario, doc, policy, attach_urls(attach_of(scenario, options)))
        except SafetyViolation as exc:
            problems.extend(exc.problems)
            continue
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        loaded.append((path, scenario))
    if problems:
        raise ConfigError(problems)
    return loaded


def _child_args(options: RunOptions, safety: Path | None) -> list[str]:
    args: list[str] = []
    if options.profile:
        args += ["--profile", options.profile]
    if options.attach is not None:  # what the command line gave, passed on as given
        for name in (
            "gateway",
            "toxiproxy",
            "hop",
            "adapter",
            "prometheus",
            "alertmanager",
            "pager",
            "exporter",
        ):
            value = getattr(options.attach, name, None)
            if name in ("prometheus", "alertmanager") and value is not None:
                value = value.url  # --prometheus gives a URL alone
            if name in options.attach.model_fields_set and isinstance(value, str):
                args += [f"--{name}", value]
    if options.state_dir is not None:
        args += ["--state-dir", str(options.state_dir)]
    if options.stack_config:
        args += ["--stack-config", options.stack_config]
    if safety is not None:
        args += ["--safety", str(safety)]
    if options.confidence != CONFIDENCE:
        args += ["--confidence", repr(options.confidence)]
    return args


def run_gate(
    files: list[tuple[Path, Scenario]],
    out: Path,
    options: RunOptions,
    *,
    safety: Path | None = None,
    concurrency: int = 1,
    twins: bool = False,
    inconclusive: str = "pass",
    rerun_max: int = 3,
    say: Callable[[str], None] = lambda line: None,
) -> list[GateResult]:
    """Run each drill in its own process, at most ``concurrency`` at once, each followed by
    its twins (``twins``); the results in the order of ``files`` (``_verdict``)."""

    runs = out / "runs"
    extra = _child_args(options, safety)
    # Every drill's stack starts with what any of them needs: no drill restarts it for another.
    for part in sorted(parts_for_all([s for _, s in files], options)):
        extra += ["--with", part]

    jobs = [
        (path, scenario, twin)
        for path, scenario in files
        for twin in [None, *([t.key for t in scenario.twins] if twins else [])]
    ]

    def one(index: int, path: Path, scenario: Scenario, twin: str | None) -> GateResult:
        name = f"{scenario.drill}-twin-{twin}" if twin else scenario.drill
        drill_out = runs / f"{index:02d}-{name}"
        drill_out.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "drills.cli", "run", str(path), "--out", str(drill_out)]
        if twin:
            command += ["--twin", twin]
        elif inconclusive == "rerun":
            command += ["--until-conclusive", str(rerun_max)]
        say(f"[gate] {index + 1}/{len(jobs)} {name} ({path})")
        log = drill_out / "drill.log"
        started = time.monotonic()
        code = _child([*command, *extra], log, say if concurrency == 1 else None)
        run_dir, journal = _read_back(drill_out, twin)
        verdict = _verdict(journal, twin, inconclusive)
        say(
            f"[gate] {name}: {verdict} after {time.monotonic() - started:.0f}s"
            + ("" if journal else f" (no journal; exit code {code}; see {log})")
        )
        return GateResult(path, scenario.drill, verdict, run_dir, journal, code, log, twin)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(one, i, p, s, t) for i, (p, s, t) in enumerate(jobs)]
        return [f.result() for f in futures]


def _read_back(drill_out: Path, twin: str | None) -> tuple[Path | None, Journal | None]:
    """The last run's folder and journal under ``drill_out`` (``None``: it left none); after
    repetitions (``--inconclusive rerun``), the journal judged over every run."""
    run_dirs = sorted(p.parent for p in drill_out.glob("*/journal.json"))
    if not run_dirs:
        return None, None
    journal = load_journal(run_dirs[-1])
    repeated = sorted(drill_out.glob("*/repeat.json"))
    if repeated and not twin:
        journal = _over_the_runs(journal, Repetitions.model_validate_json(repeated[-1].read_text()))
    return run_dirs[-1], journal


def _over_the_runs(journal: Journal, rep: Repetitions) -> Journal:
    """The last run's journal, judged over every run of the drill (``--inconclusive rerun``):
    its checks and verdict are the repetitions' (``drills.engine.repeat``), so the JUnit
    file and the summary show what the gate decided on."""
    return journal.model_copy(
        update={"checks": [c.result for c in rep.checks], "verdict": rep.verdict}
    )


def _verdict(journal: Journal | None, twin: str | None, inconclusive: str) -> str:
    """A drill's verdict in the gate: its journal's (``error`` without one); on a twin,
    whether the twin held; ``inconclusive`` for a drill that passed with a check that was not
    sure, when the gate's policy fails those."""
    if journal is None:
        return "error"
    if twin:
        return "passed" if journal.twin and journal.twin.held else "failed"
    unsure = any(c.passed and c.conclusive is False for c in journal.checks)
    if inconclusive in ("fail", "rerun") and journal.verdict == "passed" and unsure:
        return "inconclusive"
    return journal.verdict


def _child(argv: list[str], log: Path, say: Callable[[str], None] | None) -> int:
    """Run one ``drills run``, its output into ``log`` (and, given ``say``, to the terminal
    as it comes: one drill at a time); its exit code."""
    with open(log, "w") as out_file:
        if say is None:
            return subprocess.run(
                argv, stdout=out_file, stderr=subprocess.STDOUT, check=False
            ).returncode
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            out_file.write(line)
            say(f"  {line.rstrip()}")
        return proc.wait()


def write_gate_reports(results: list[GateResult], out: Path) -> dict[str, Path]:
    """``junit.xml`` (a suite per drill, a case per check) and ``summary.md`` for the PR."""

    journals = [r.journal for r in results if r.journal is not None]
    junit = out / "junit.xml"
    junit.write_text(render_junit_suites("drills gate", journals))
    passed = sum(r.verdict == "passed" for r in results)
    on_twins = [r for r in results if r.twin]
    held = sum(r.verdict == "passed" for r in on_twins)
    lines = [
        f"## Resilience gate: **{'PASSED' if passed == len(results) else 'FAILED'}** "
        f"({passed - held}/{len(results) - len(on_twins)} drills passed"
        + (f", {held}/{len(on_twins)} twins held" if on_twins else "")
        + ")",
        "",
    ]
    for result in results:
        if result.journal is not None and result.run_dir is not None:
            lines.append(render_markdown(result.journal, result.run_dir))
        else:
            lines += [
                f"### Drill `{result.name}`: **ERROR**",
                "",
                f"`{result.path}` produced no journal (exit code {result.exit_code}); "
                f"its log: `{result.log}`",
                "",
            ]
    summary = out / "summary.md"
    summary.write_text("\n".join(lines))
    # A drill that left no journal still fails the JUnit file: CI must not see fewer tests.
    if any(r.journal is None for r in results):
        _append_errors(junit, [r for r in results if r.journal is None])
    unsure = [r for r in results if r.verdict == "inconclusive"]
    if unsure:
        _append_inconclusive(junit, unsure)
    return {"junit": junit, "markdown": summary}


def _append_inconclusive(junit: Path, results: list[GateResult]) -> None:
    """A suite of the gate's own: a failed case per check that passed without being sure,
    under ``--inconclusive fail``."""

    root = ET.fromstring(junit.read_text())
    checks = [(r, c) for r in results for c in r.inconclusive_checks]
    suite = ET.SubElement(
        root,
        "testsuite",
        name="gate:inconclusive",
        tests=str(len(checks)),
        failures=str(len(checks)),
    )
    for result, check in checks:
        case = ET.SubElement(
            suite, "testcase", classname=f"drills.{result.drill}", name=f"{check.label} is sure"
        )
        failure = ET.SubElement(
            case, "failure", message=f"inconclusive: {interval_text(check)} (--inconclusive fail)"
        )
        failure.text = f"observed {check.observed_text}, expected {check.expected}"
    root.set("failures", str(int(root.get("failures", "0")) + len(checks)))
    root.set("tests", str(int(root.get("tests", "0")) + len(checks)))
    ET.indent(root)
    junit.write_text('<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode"))


def _append_errors(junit: Path, broken: list[GateResult]) -> None:

    root = ET.fromstring(junit.read_text())
    for result in broken:
        kind = f"twin:{result.drill}:{result.twin}" if result.twin else f"drill:{result.drill}"
        suite = ET.SubElement(root, "testsuite", name=kind, tests="1", failures="0", errors="1")
        classname = f"drills.{result.drill}" + (f".twin.{result.twin}" if result.twin else "")
        case = ET.SubElement(suite, "testcase", classname=classname, name="run")
        error = ET.SubElement(
            case, "error", message=f"the drill produced no journal (exit code {result.exit_code})"
        )
        error.text = result.log.read_text()[-4000:] if result.log and result.log.exists() else ""
    root.set("errors", str(int(root.get("errors", "0")) + len(broken)))
    root.set("tests", str(int(root.get("tests", "0")) + len(broken)))
    ET.indent(root)
    junit.write_text('<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode"))
