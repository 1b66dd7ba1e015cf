"""Hardware a drill's faults need, checked before anything starts.

A GPU fault (``gpu.memory_pressure``) on a host where NVML finds no NVIDIA GPU, or not the one it
names, cannot run: the drill is refused before the stack is started or any fault applied (exit
2), and its run directory still gets a journal and reports that say so, every check "not run".
Such a drill is never passed where it cannot run.
"""

from __future__ import annotations

import time
from pathlib import Path

from drills.checks.base import result
from drills.common.errors import InputError
from drills.common.redact import redact
from drills.common.yamlsrc import YamlDocument, format_path
from drills.engine.safety import fault_windows
from drills.model.journal import Journal, RunStatus, StackInfo
from drills.model.scenario import Attach, Scenario
from injectors import InjectionContext, Preflight, build
from reports import render_all

__all__ = ["refuse_without_hardware"]


def refuse_without_hardware(
    scenario: Scenario,
    doc: YamlDocument | None,
    run_id: str,
    run_dir: Path,
    attach: Attach | None,
) -> None:
    """Raise (an ``InputError``, located at the fault) when a hardware fault cannot run here,
    after writing the refused run's journal and reports in ``run_dir``."""
    for window in fault_windows(scenario):
        fault = scenario.phases[window.phase].inject[window.index]
        if fault.hardware is None:  # its preflight asks the host for hardware, nothing else
            continue
        injector = build(fault, InjectionContext(run_id, ""), window.index)
        if not isinstance(injector, Preflight):
            continue
        try:
            injector.preflight()
        except InputError as exc:
            loc = ("phases", window.phase, "inject", window.index)
            where = f"{doc.path}:{doc.line_of(loc)} " if doc else ""
            why = f"{where}{format_path(loc)}: {exc}"
            report = _write_refusal(scenario, doc, run_id, run_dir, attach, why, str(exc))
            raise type(exc)(f"{why}; nothing was started; report: {report}") from None


def _write_refusal(
    scenario: Scenario,
    doc: YamlDocument | None,
    run_id: str,
    run_dir: Path,
    attach: Attach | None,
    why: str,
    short: str,
) -> Path:
    now = time.time()
    journal = Journal(
        drill=scenario.drill,
        title=scenario.title,
        description=scenario.description,
        runbook=scenario.runbook,
        run_id=run_id,
        status=RunStatus.ABORTED,
        deviated=True,
        started_at=now,
        ended_at=now,
        scenario_path=str(doc.path) if doc else None,
        scenario=scenario.model_dump(mode="json", by_alias=True),
        stack=StackInfo(
            gateway=attach.gateway if attach else "(not started)",
            toxiproxy=attach.toxiproxy if attach else None,
            profile=None if attach else str(scenario.stack),
        ),
        aborted={"cause": "needs_hardware", "reason": "the drill cannot run here", "error": why},
        checks=[
            result(check, check.check, None, 0, f"not run: {short}") for check in scenario.expect
        ],
        run_dir=str(run_dir),
    )
    journal = Journal.model_validate(redact(journal.model_dump(mode="json")))
    journal.write(run_dir / "journal.json")

    return render_all(journal, run_dir)["html"]
