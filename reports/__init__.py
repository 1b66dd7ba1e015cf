"""Reports rendered from a journal alone: ``index.html`` (for people), ``junit.xml`` (one test
case per check, for CI) and ``summary.md`` (for a pull-request comment).

``render_all(journal, out_dir)`` writes all three and returns their paths; ``drills report
RUN_DIR`` reads the journal back (``load_journal``) and calls it, so a report can always be
re-rendered later from the journal alone.
"""

from __future__ import annotations

from pathlib import Path

from drills.model.journal import Journal
from reports.html import render_html
from reports.junit import render_junit, render_junit_suites
from reports.markdown import render_markdown

__all__ = ["load_journal", "render_all", "render_junit_suites", "render_markdown"]


def load_journal(path: Path) -> Journal:
    """The journal at ``path`` (a ``journal.json`` or its run directory)."""
    return Journal.read(path)


def render_all(journal: Journal, out: Path) -> dict[str, Path]:
    """Write the three reports of ``journal`` into ``out``; their paths by kind."""
    paths = {
        "html": out / "index.html",
        "junit": out / "junit.xml",
        "markdown": out / "summary.md",
    }
    paths["html"].write_text(render_html(journal, out))
    paths["junit"].write_text(render_junit(journal))
    paths["markdown"].write_text(render_markdown(journal, out))
    return paths
