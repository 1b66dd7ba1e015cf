"""Reports rendered from a journal alone: ``index.html`` (for people), ``junit.xml`` (one test
case per check, for CI) and ``summary.md`` (for a pull-request comment).

``render_all(journal_path)`` writes all three beside the journal and returns their paths; it is
what ``drills report RUN_DIR`` calls, so a report can always be re-rendered later.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reports.html import render_html
from reports.junit import render_junit, render_junit_suites
from reports.markdown import render_markdown

__all__ = ["load_journal", "render_all", "render_junit_suites", "render_markdown"]


def load_journal(path: Path) -> dict[str, Any]:
    if path.is_dir():
        path = path / "journal.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def render_all(journal_path: Path) -> dict[str, Path]:
    journal_path = journal_path / "journal.json" if journal_path.is_dir() else journal_path
    journal = load_journal(journal_path)
    out = journal_path.parent
    paths = {
        "html": out / "index.html",
        "junit": out / "junit.xml",
        "markdown": out / "summary.md",
    }
    paths["html"].write_text(render_html(journal, out))
    paths["junit"].write_text(render_junit(journal))
    paths["markdown"].write_text(render_markdown(journal, out))
    return paths
