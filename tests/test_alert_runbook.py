"""Where a page's ``runbook_url`` leads (``drills.checks.alert_runbook.link_problem``): an
https runbook is fetched, here from a real HTTP server on loopback that serves a Markdown
runbook, a rendered HTML one (GitHub's ``user-content-`` ids) and nothing else; a relative
one is read beside the rules file. The check itself runs against a real Prometheus and
Alertmanager in tests/test_monitoring.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from drills.checks.alert_runbook import link_problem

PAGES = {
    "/runbook.md": ("text/markdown", "# Pod loss\n\n## Breakers\n\nOpen them.\n"),
    "/runbook.html": (
        "text/html",
        '<html><body><h2 id="user-content-breakers">Breakers</h2>'
        '<a name="replacement"></a></body></html>',
    ),
    "/moved": ("", ""),
}


class _Runbooks(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/moved":
            self.send_response(301)
            self.send_header("Location", "/runbook.md")
            self.end_headers()
            return
        if self.path not in PAGES:
            self.send_error(404)
            return
        kind, body = PAGES[self.path]
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Runbooks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("/runbook.md#breakers", None),
        ("/runbook.md", None),
        ("/moved#breakers", None),
        ("/runbook.html#breakers", None),
        ("/runbook.html#replacement", None),
        (
            "/runbook.md#restart",
            "no heading of the page makes the anchor #restart; its anchors: breakers, pod-loss",
        ),
        ("/runbook.html#restart", "the page has no heading or element with the id #restart"),
        ("/gone.md#breakers", "answered HTTP 404"),
    ],
)
def test_an_https_runbook_is_fetched_and_its_anchor_must_be_a_heading(
    site: str, path: str, problem: str | None
) -> None:
    with httpx.Client(timeout=5, follow_redirects=True) as web:
        assert link_problem(site + path, None, web) == problem


def test_a_relative_runbook_is_read_beside_the_rules_file(tmp_path: Path) -> None:
    rules = tmp_path / "monitoring"
    rules.mkdir()
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "latency.md").write_text("# Latency\n\n## Timeouts\n")
    with httpx.Client(timeout=5) as web:
        assert link_problem("../runbooks/latency.md#timeouts", rules, web) is None
        assert "no heading that makes the anchor #retries" in str(
            link_problem("../runbooks/latency.md#retries", rules, web)
        )
        assert "no runbook file" in str(link_problem("../runbooks/gone.md", rules, web))
        assert link_problem("runbooks/{{ $labels.x }}.md", rules, web) == (
            "a template the harness cannot expand"
        )
        assert "did not say which rules file" in str(link_problem("latency.md", None, web))
        assert "not javascript:" in str(link_problem("javascript:alert(1)", rules, web))
