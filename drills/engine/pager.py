"""The pager: a webhook receiver the harness runs during a drill, where Alertmanager sends
its notifications (a ``webhook_configs`` receiver). It records each one with the time it
arrived, which is what ``alert_paged`` judges: the page reached someone, and how fast.

A team points a route of its own Alertmanager at it (``stack.attach.pager``: the address the
harness listens on); the embedded stack's Alertmanager sends everything to it
(``stack.monitoring``). It binds before anything is applied: a taken port is bad input.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from drills.common.errors import InputError
from drills.model.journal import Page, PagedAlert

__all__ = ["Pager", "parse_listen"]


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT``, on 127.0.0.1) as a pair; ``ValueError`` otherwise."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:9099)")
    return host.strip("[]") or "127.0.0.1", int(port)


class Pager:
    """Listens at ``host:port`` for Alertmanager's webhook (any path), until ``stop``."""

    def __init__(self, listen: str) -> None:
        self.address = parse_listen(listen)
        self.pages: list[Page] = []
        self.refused: list[str] = []
        """Bodies that were not a webhook notification (kept short, for the journal)."""
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{host}:{port}/"

    def start(self) -> None:
        """Bind and serve; ``InputError`` (bad input) if the address cannot be bound."""
        pager = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                pager._receive(self.rfile.read(length))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        try:
            self._server = ThreadingHTTPServer(self.address, Handler)
        except OSError as exc:
            host, port = self.address
            raise InputError(
                f"stack.attach.pager: the pager cannot listen at {host}:{port}: "
                f"{exc.strerror or exc} (give a free HOST:PORT that the Alertmanager can reach)"
            ) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="drills-pager", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def received(self) -> list[Page]:
        with self._lock:
            return list(self.pages)

    def _receive(self, body: bytes) -> None:
        at = time.time()
        try:
            payload = json.loads(body)
            page = Page(
                received_at=at,
                status=str(payload.get("status", "")),
                receiver=str(payload.get("receiver", "")),
                alerts=[
                    PagedAlert(
                        name=str(a.get("labels", {}).get("alertname", "")),
                        status=str(a.get("status", "")),
                        labels={str(k): str(v) for k, v in a.get("labels", {}).items()},
                        annotations={str(k): str(v) for k, v in a.get("annotations", {}).items()},
                        starts_at=a.get("startsAt"),
                    )
                    for a in payload.get("alerts", [])
                ],
            )
        except (ValueError, AttributeError, TypeError):
            with self._lock:
                self.refused.append(body[:200].decode(errors="replace"))
            return
        with self._lock:
            self.pages.append(page)

    def __enter__(self) -> Pager:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
