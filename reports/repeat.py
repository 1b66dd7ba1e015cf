"""The report of a drill's repetitions (``drills run --repeat``), from ``repeat.json`` alone:
``index.html`` and ``summary.md``, each check over all the runs beside its result in each."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from drills.model.journal import CheckResult
from drills.model.repeat import Repetitions
from reports.common import interval_text, md_cell
from reports.html import COLORS, CSS, environment

__all__ = ["render_repeat"]


def _cell(result: CheckResult | None) -> dict[str, str]:
    if result is None:
        return {"text": "not judged", "css": "fail"}
    mark = "" if result.passed else "FAILED "
    return {"text": f"{mark}{result.observed_text}", "css": "pass" if result.passed else "fail"}


def _markdown(rep: Repetitions) -> str:
    runs = len(rep.runs)
    lines = [
        f"# {rep.title}: {rep.verdict.upper()}",
        "",
        f"Drill `{rep.drill}`, {rep.asked}: {runs} run(s); {rep.stopped}. "
        f"{rep.confidence * 100:g}% intervals; "
        + ("every pooled check conclusive." if rep.conclusive else "not conclusive."),
        "",
        "| check | how | verdict | observed | expected | interval | "
        + " | ".join(f"run {i}" for i in range(1, runs + 1))
        + " |",
        "|---|---|---|---|---|---|" + "---|" * runs,
    ]
    for check in rep.checks:
        result = check.result
        cells = [
            md_cell(check.label),
            check.how,
            "passed" if result.passed else "**FAILED**",
            md_cell(result.observed_text),
            md_cell(result.expected),
            md_cell(interval_text(result)),
            *(md_cell(_cell(c)["text"]) for c in check.each),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| # | run | status | verdict | faults left |", "|---|---|---|---|---|"]
    for i, run in enumerate(rep.runs, 1):
        left = md_cell("; ".join(run.faults_left)) or "none"
        lines.append(f"| {i} | `{run.run_dir}` | {run.status} | {run.verdict} | {left} |")
    return "\n".join(lines) + "\n"


def render_repeat(rep: Repetitions, out: Path) -> dict[str, Path]:
    """Write ``repeat.json``, ``index.html`` and ``summary.md`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "repeat.json", "html": out / "index.html", "md": out / "summary.md"}
    paths["json"].write_text(rep.model_dump_json(indent=2))
    rows: list[dict[str, Any]] = [
        {"check": c, "interval": interval_text(c.result), "each": [_cell(e) for e in c.each]}
        for c in rep.checks
    ]
    runs = [
        {
            "run": run,
            "href": os.path.relpath(Path(run.run_dir).resolve() / "index.html", out.resolve()),
            "ok": run.verdict == "passed" and not run.faults_left,
        }
        for run in rep.runs
    ]
    html = (
        environment()
        .get_template("repeat.html.j2")
        .render(rep=rep, rows=rows, runs=runs, css=CSS, color=COLORS[rep.verdict])
    )
    paths["html"].write_text(html)
    paths["md"].write_text(_markdown(rep))
    return paths
