"""pytest plugin: drill scenarios collected and run as tests.

Registered through the ``pytest11`` entry point (``drills``), so installing drills is enough::

    pytest drills/                       # every drill_*.yaml / *.drill.yaml below drills/
    pytest scenarios/inference-latency.yaml --drills-profile sound
    pytest -m latency --drills-gateway http://gw:8080 --drills-toxiproxy http://gw:8474

Each drill file is a collector; the drill runs once, the first time one of its items runs, and
each check of its ``expect`` list is reported as its own test case (plus one case saying every
fault was reverted), so JUnit XML shows a case per check. A failed case names the observed
value, what was expected and the runbook step. Drills are marked ``drill`` and with every entry
of their ``tags``, so ``-m`` selects them.

The stack: ``--drills-gateway`` (and ``--drills-toxiproxy`` for Toxiproxy faults) attach to a
running one; otherwise the profile (``--drills-profile``, or each scenario's own ``stack:``) is
brought up once for the session, with the optional parts its collected drills need
(``drills.engine.parts``), and taken down at its end if this session started it
(``--drills-keep-stack`` leaves it). Python tests get the same through the ``drills_stack``
and ``drills_run`` fixtures.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from drills.common.errors import DrillFailed, DrillsError, InputError
from drills.common.yamlsrc import YamlDocument
from drills.engine.options import RunOptions
from drills.engine.pager import parse_listen
from drills.engine.runner import Runner
from drills.engine.safety import load_policy
from drills.model.journal import CheckResult, Journal, RunStatus
from drills.model.scenario import Attach, PrometheusEndpoint, Scenario, load_scenario
from drills.model.twins import Twin

__all__ = ["DrillFailed", "DrillOutcome", "DrillSession"]

DEFAULT_PATTERNS = ["drill_*.yaml", "drill_*.yml", "*.drill.yaml", "*.drill.yml"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("drills", "drills: fault drills as tests")
    group.addoption(
        "--drills-profile",
        help="stack profile (name or YAML) to bring up once for the session",
    )
    group.addoption("--drills-gateway", help="attach: the gateway's base URL")
    group.addoption("--drills-toxiproxy", help="attach: the Toxiproxy API's base URL")
    group.addoption(
        "--drills-prometheus",
        help="attach: the team's Prometheus, which promql and alert_* checks query",
    )
    group.addoption("--drills-alertmanager", help="attach: the team's Alertmanager (read-only)")
    group.addoption(
        "--drills-exporter",
        help="attach: HOST:PORT where the harness serves each drill's metrics for Prometheus",
    )
    group.addoption(
        "--drills-pager",
        help="attach: HOST:PORT where the harness's pager listens for the team's Alertmanager",
    )
    group.addoption("--drills-stack-config", help="attach: the stack's config, for stack_lint")
    group.addoption("--drills-state-dir", help="where a brought-up stack keeps its state")
    group.addoption("--drills-out", default="runs", help="where run directories go (runs/)")
    group.addoption("--drills-safety", help="safety policy file")
    group.addoption(
        "--drills-twins",
        action="store_true",
        help="collect each drill's twins too: a case per check, which passes when the check "
        "does on the twin what the twin declares, and one saying the twin held",
    )
    group.addoption(
        "--drills-keep-stack",
        action="store_true",
        help="leave a stack this session brought up running at the end",
    )
    parser.addini(
        "drills_files",
        type="args",
        default=DEFAULT_PATTERNS,
        help="glob patterns of drill scenario files to collect "
        "(files named on the command line are collected whatever their name)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "drill: a drill scenario collected from YAML")
    for name in ("drills_prometheus", "drills_alertmanager"):
        url = config.getoption(name)
        if url and not str(url).startswith(("http://", "https://")):
            flag = "--" + name.replace("_", "-")
            raise pytest.UsageError(f"{flag}: {url!r} is not an http(s):// URL")
    for name in ("drills_pager", "drills_exporter"):
        listen = config.getoption(name)
        if listen:
            try:
                parse_listen(str(listen))
            except ValueError as exc:
                flag = "--" + name.replace("_", "-")
                raise pytest.UsageError(f"{flag}: {exc}") from None
    if config.getoption("drills_toxiproxy") and not config.getoption("drills_gateway"):
        raise pytest.UsageError(
            "--drills-toxiproxy without --drills-gateway: attaching needs the gateway's URL"
        )
    config.stash[_SESSION] = DrillSession(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is not None:
        session.finish()


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    drills = {id(i.parent): i.parent.scenario for i in items if isinstance(i.parent, Drill)}
    config.stash[_SESSION].planned = list(drills.values())


def _is_drill_file(path: Path) -> bool:
    try:
        with path.open(errors="replace") as handle:
            return any(line.startswith("drill:") for line in handle)
    except OSError:
        return False


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> DrillFile | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    patterns = parent.config.getini("drills_files")
    named = parent.session.isinitpath(file_path)
    if not (named or any(fnmatch.fnmatch(file_path.name, p) for p in patterns)):
        return None
    if not _is_drill_file(file_path):
        return None
    return DrillFile.from_parent(parent, path=file_path)


# -- running drills ---------------------------------------------------------------------------


@dataclass
class DrillOutcome:
    """What one drill run produced: its journal (``None`` when the run failed to start)."""

    scenario: Scenario
    run_dir: Path | None
    journal: Journal | None
    error: str | None = None

    @property
    def verdict(self) -> str:
        return self.journal.verdict if self.journal else "error"

    @property
    def checks(self) -> list[CheckResult]:
        return list(self.journal.checks) if self.journal else []


class DrillSession:
    """The session's stack and runs: brought up (or attached) once, shared by every drill."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._owned_state: Path | None = None
        self._checked: set[str] = set()
        self.planned: list[Scenario] = []
        """The collected drills: the stack starts with every part any of them needs."""

    def _opt(self, name: str) -> Any:
        return self.config.getoption(name)

    def options(self, scenario: Scenario) -> RunOptions:
        gateway, toxiproxy = self._opt("drills_gateway"), self._opt("drills_toxiproxy")
        prometheus = self._opt("drills_prometheus")
        alertmanager = self._opt("drills_alertmanager")
        safety = self._opt("drills_safety")
        state = self._opt("drills_state_dir")
        given = {
            "toxiproxy": toxiproxy,
            "prometheus": PrometheusEndpoint(url=prometheus) if prometheus else None,
            "alertmanager": PrometheusEndpoint(url=alertmanager) if alertmanager else None,
            "pager": self._opt("drills_pager"),
            "exporter": self._opt("drills_exporter"),
        }
        options = RunOptions(
            out_dir=Path(self._opt("drills_out")),
            profile=self._opt("drills_profile"),
            # Only what was given: a drill's attach section gives the rest, and a drill
            # without Toxiproxy faults needs no Toxiproxy (``runner.attach_of``).
            attach=Attach.model_construct(
                gateway=gateway, **{k: v for k, v in given.items() if v is not None}
            )
            if gateway
            else None,
            state_dir=Path(state) if state else None,
            safety=load_policy(Path(safety) if safety else None),
            stack_config=self._opt("drills_stack_config"),
        )
        if options.attach is None:
            self._bring_up(options.profile or _profile_of(scenario), scenario, options)
        return options

    def _bring_up(self, profile: str, scenario: Scenario, options: RunOptions) -> None:
        """Bring ``profile`` up once, with the parts the session's drills need; remember
        whether this session started it (then a drill run from a fixture that needs more may
        restart it whole, and the session takes it down at its end)."""
        if profile in self._checked:
            return
        # Imported here, as below: pytest loads this plugin in every session of a project that
        # installs drills; the engine and the stack's control only for one that runs a drill.
        from drills.engine.options import no_other_run, parts_for_all
        from stack import control
        from stack.state import default_state_dir

        state_dir = options.state_dir
        try:
            running = control.status(state_dir).running
        except DrillsError:
            running = False
        control.up(
            profile,
            state_dir,
            by="user" if running else "run",
            idle=no_other_run,
            parts=parts_for_all([*self.planned, scenario], options),
        )
        if not running and self._owned_state is None:
            self._owned_state = state_dir or default_state_dir()
        self._checked.add(profile)

    def run(self, path: Path | str) -> DrillOutcome:
        """Run one scenario file against the session's stack."""
        scenario, doc = load_scenario(path)
        return self.run_loaded(scenario, doc)

    def run_loaded(self, scenario: Scenario, doc: YamlDocument | None) -> DrillOutcome:
        try:
            journal = Runner(scenario, doc, self.options(scenario)).run()
        except InputError:
            raise
        except Exception as exc:  # reported on every check of the drill, not lost
            return DrillOutcome(scenario, None, None, f"{type(exc).__name__}: {exc}")
        return DrillOutcome(scenario, Path(journal.run_dir), journal)

    def run_twin(self, scenario: Scenario, doc: YamlDocument | None, twin: Twin) -> DrillOutcome:
        """Run ``scenario`` on its twin ``twin`` (``drills.engine.twins``)."""
        from drills.engine.twins import run_twin

        try:
            journal = run_twin(scenario, doc, twin, self.options(scenario))
        except InputError:
            raise
        except Exception as exc:
            return DrillOutcome(scenario, None, None, f"{type(exc).__name__}: {exc}")
        return DrillOutcome(scenario, Path(journal.run_dir), journal)

    def finish(self) -> None:
        if self._owned_state is not None and not self._opt("drills_keep_stack"):
            from stack import control

            control.down(self._owned_state)
            self._owned_state = None


def _profile_of(scenario: Scenario) -> str:
    return scenario.stack if isinstance(scenario.stack, str) else "sound"


_SESSION = pytest.StashKey[DrillSession]()


@pytest.fixture(scope="session")
def drills_session(pytestconfig: pytest.Config) -> DrillSession:
    """The session's drill runner (the same one collected drill files use)."""
    return pytestconfig.stash[_SESSION]


@pytest.fixture
def drills_run(drills_session: DrillSession) -> Callable[[Path | str], DrillOutcome]:
    """``drills_run("scenarios/x.yaml")`` runs a drill on the session's stack and returns its
    ``DrillOutcome`` (verdict, checks, journal, run directory)."""
    return drills_session.run


# -- collection -----------------------------------------------------------------------------


class DrillFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        try:
            scenario, doc = load_scenario(self.path)
        except InputError as exc:
            raise self.CollectError(str(exc)) from None
        yield Drill.from_parent(self, name=scenario.drill, scenario=scenario, doc=doc)
        if self.config.getoption("drills_twins"):
            for twin in scenario.twins:
                yield TwinDrill.from_parent(
                    self,
                    name=f"{scenario.drill}[twin {twin.key}]",
                    scenario=scenario,
                    doc=doc,
                    twin=twin,
                )


class Drill(pytest.Collector):
    """One drill: it runs once, the first time one of its check items runs."""

    def __init__(self, *, scenario: Scenario, doc: YamlDocument, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.doc = doc
        self._outcome: DrillOutcome | None = None
        self.add_marker("drill")
        for tag in scenario.tags:
            self.config.addinivalue_line("markers", f"{tag}: drills tagged {tag!r}")
            self.add_marker(tag)

    def collect(self) -> Iterator[pytest.Item]:
        seen: dict[str, int] = {}
        for index, check in enumerate(self.scenario.expect):
            name = check.label
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name = f"{name} #{seen[name]}"
            yield CheckItem.from_parent(self, name=name, index=index)
        yield RevertItem.from_parent(self, name="every fault reverted")

    def outcome(self) -> DrillOutcome:
        if self._outcome is None:
            session: DrillSession = self.config.stash[_SESSION]
            self._outcome = session.run_loaded(self.scenario, self.doc)
        return self._outcome


class TwinDrill(Drill):
    """A drill on one of its twins: it runs once, the first time one of its items runs."""

    def __init__(self, *, twin: Twin, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.twin = twin

    def collect(self) -> Iterator[pytest.Item]:
        for index, check in enumerate(self.scenario.expect):
            yield TwinCheckItem.from_parent(self, name=check.label, index=index)
        yield TwinHeldItem.from_parent(self, name="the twin held")

    def outcome(self) -> DrillOutcome:
        if self._outcome is None:
            session: DrillSession = self.config.stash[_SESSION]
            self._outcome = session.run_twin(self.scenario, self.doc, self.twin)
        return self._outcome


class _DrillItem(pytest.Item):
    parent: Drill

    def _ran(self) -> DrillOutcome:
        outcome = self.parent.outcome()
        if outcome.journal is None:
            raise DrillFailed(f"the drill did not run: {outcome.error}")
        self.user_properties.append(("run_dir", str(outcome.run_dir)))
        self.user_properties.append(("verdict", outcome.verdict))
        return outcome

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, DrillFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"drill {self.parent.name}: {self.name}"


class CheckItem(_DrillItem):
    def __init__(self, *, index: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.index = index

    def runtest(self) -> None:
        outcome = self._ran()
        assert outcome.journal is not None and outcome.run_dir is not None
        check = outcome.checks[self.index]
        if outcome.journal.status in (RunStatus.ABORTED, RunStatus.INTERRUPTED):
            raise DrillFailed(
                f"drill {outcome.journal.status}: {outcome.journal.aborted or ''}\n"
                f"report: {outcome.run_dir / 'index.html'}"
            )
        if not check.passed:
            from reports.common import runbook_link

            runbook = check.runbook or outcome.journal.runbook
            link = runbook_link(outcome.journal, runbook, Path.cwd())
            raise DrillFailed(
                f"{check.label}: observed {check.observed_text}, expected "
                f"{check.expected}\n"
                f"  {check.reason}\n"
                f"  runbook: {link or '-'}\n"
                f"  report: {outcome.run_dir / 'index.html'}"
            )


class RevertItem(_DrillItem):
    def runtest(self) -> None:
        outcome = self._ran()
        assert outcome.journal is not None
        if outcome.journal.rollbacks.left:
            raise DrillFailed(
                "left in force after the drill (reverts that failed, or the chain differs "
                "from before it):\n  " + "\n  ".join(outcome.journal.rollbacks.left)
            )


class TwinCheckItem(CheckItem):
    """Passes when the check did on the twin what the twin says: failed when it must fail,
    passed when it must pass (either way when it may fail)."""

    def runtest(self) -> None:
        outcome = self._ran()
        assert outcome.journal is not None and outcome.journal.twin is not None
        twin = outcome.journal.twin
        check = outcome.checks[self.index]
        if check.label in twin.missed:
            raise DrillFailed(
                f"{check.label} must fail on the twin {twin.name} and passed: observed "
                f"{check.observed_text}, expected {check.expected}: the drill does not see "
                f"this break\n  report: {outcome.run_dir}/index.html"
            )
        if check.label in twin.unnamed:
            raise DrillFailed(
                f"{check.label} failed on the twin {twin.name}, which does not name it: "
                f"observed {check.observed_text}, expected {check.expected} ({check.reason})"
                f"\n  report: {outcome.run_dir}/index.html"
            )


class TwinHeldItem(_DrillItem):
    def runtest(self) -> None:
        outcome = self._ran()
        assert outcome.journal is not None and outcome.journal.twin is not None
        twin = outcome.journal.twin
        problems = [] if twin.held else [twin.summary()]
        problems += [f"not reverted: {line}" for line in outcome.journal.rollbacks.left]
        if problems:
            raise DrillFailed("\n".join(problems))
