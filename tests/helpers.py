"""Helpers shared by the tests: YAML problems, scenario copies, small HTTP servers, a real
Toxiproxy."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from drills.common.errors import ConfigError
from drills.common.ports import free_port
from drills.common.toxiproxy import ToxiproxyClient


def problems(load: Callable[[Path], Any], path: Path) -> list[str]:
    """The problems ``load`` reports for ``path``; it must refuse the file."""
    with pytest.raises(ConfigError) as info:
        load(path)
    return info.value.problems


def anchored(text: str, origin: Path) -> str:
    """The text of a scenario file from the folder ``origin`` with its relative runbook and
    prompts references made absolute, so that a copy a test writes elsewhere still validates
    (references are checked when a scenario is loaded)."""
    import re

    def absolute(match: re.Match[str]) -> str:
        key, value = match.group(1), match.group(2)
        if "://" in value or value.startswith("/"):
            return match.group(0)
        return f"{key}{(origin / value).resolve()}"

    return re.sub(r"((?:runbook|prompts|litellm): ?)([A-Za-z0-9_.][^\s,}\]'\"]*)", absolute, text)


def shortened(source: Path, out: Path, **durations: str) -> Path:
    """A shipped drill with some of its phases shortened for the test suite, written to
    ``out/sized/``: the same name, load, faults, checks, twins and abort conditions; only the
    phases named in ``durations`` (``baseline="10s"``) last less. A copy made from the shipped
    file rather than kept by hand, so that the tests always judge the drill that ships.

    Only phases around the fault are shortened, never to less than a bound that needs their
    length (a ``recovered_within`` needs a recovery phase at least as long as its bound)."""
    import yaml

    data = yaml.safe_load(anchored(source.read_text(), source.parent))
    for twin in data.get("twins") or []:  # a monitoring twin's rules files, relative too
        monitoring = twin.get("monitoring") or {}
        if "rules" in monitoring:
            monitoring["rules"] = [str((source.parent / r).resolve()) for r in monitoring["rules"]]
    phases = {p["name"]: p for p in data["phases"]}
    for name, duration in durations.items():
        if name not in phases:
            raise KeyError(f"{source.name} has no phase {name!r}: {sorted(phases)}")
        if phases[name].get("inject"):
            raise ValueError(f"{source.name}: phase {name!r} injects faults; keep its length")
        phases[name]["duration"] = duration
    path = out / "sized" / source.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real HTTP server on a free loopback port, in a thread, answering with ``handler``;
    yields its base URL and stops it afterwards."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def reply(handler: BaseHTTPRequestHandler, data: bytes, content_type: str) -> None:
    """A stub's whole answer: HTTP 200 with ``data`` as its body."""
    handler.send_response(200)
    handler.send_header("content-type", content_type)
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def made_up_scenario(
    fault: dict[str, Any],
    checks: list[dict[str, Any]] | None = None,
    *,
    recovery: bool = False,
    **load: Any,
) -> Any:
    """A scenario for the checks' unit tests: 10 s of baseline, 10 s with ``fault``, and
    (``recovery``) 20 s of recovery; ``load`` adds fields to the load section."""
    from drills.model.scenario import Scenario

    phases: list[dict[str, Any]] = [
        {"name": "baseline", "duration": "10s"},
        {"name": "fault", "duration": "10s", "inject": [fault]},
    ]
    if recovery:
        phases.append({"name": "recovery", "duration": "20s"})
    return Scenario.model_validate(
        {
            "drill": "t",
            "title": "t",
            "load": {"users": 1, **load},
            "phases": phases,
            "expect": checks or [{"check": "error_rate", "below": 0.5}],
        }
    )


def latency_fault_window(t0: float) -> tuple[Any, dict[str, tuple[float, float]]]:
    """The fault record of 3 s latency on vllm-0 applied at ``t0 + 10`` and reverted at
    ``t0 + 20``, and the phases around it (baseline, fault): for checks' unit tests."""
    from drills.model.journal import FaultRecord

    fault = FaultRecord(
        index=0,
        phase="fault",
        kind="toxiproxy.latency",
        target="vllm-0",
        scheduled_offset=10,
        scheduled_end=20,
        applied_at=t0 + 10,
        reverted_at=t0 + 20,
    )
    return fault, {"baseline": (t0, t0 + 10), "fault": (t0 + 10, t0 + 20)}


def drill_with_docker_fault(tmp_path: Path, host: str, target: str = "vllm-0") -> Path:
    """``tests/scenarios/tiny.yaml`` with a ``docker.pause`` of ``target`` on the daemon ``host``
    beside its latency fault (``phases[1].inject[1]``), written to ``tmp_path``."""
    tiny = Path(__file__).resolve().parent / "scenarios" / "tiny.yaml"
    text = tiny.read_text().replace(
        "      - {kind: toxiproxy.latency, target: vllm-0, latency: 200ms}\n",
        "      - {kind: toxiproxy.latency, target: vllm-0, latency: 200ms}\n"
        f"      - {{kind: docker.pause, target: '{target}', mode: all, host: '{host}'}}\n",
    )
    path = tmp_path / "docker-drill.yaml"
    path.write_text(anchored(text, tiny.parent))
    return path


@contextmanager
def toxiproxy_server(binary: Path) -> Iterator[ToxiproxyClient]:
    """A real toxiproxy-server (``binary``) on a free loopback port; yields its client and stops
    it afterwards."""
    port = free_port()
    server = subprocess.Popen(
        [str(binary), "-host", "127.0.0.1", "-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = ToxiproxyClient(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 10
        while not client.is_up():
            assert time.monotonic() < deadline, "toxiproxy-server did not start"
            time.sleep(0.05)
        yield client
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=10)


def drill_account(journal: dict[str, Any]) -> str:
    """Why a drill failed, in full (a plain string): each failed check with what it observed and
    why, and the errors the client saw, counted by phase and kind, with when the first came."""
    lines = [f"verdict {journal.get('verdict')} status {journal.get('status')}"]
    for check in journal.get("checks", []):
        if not check["passed"]:
            lines.append(
                f"  FAIL {check['label']}: observed {check.get('observed')} "
                f"expected {check.get('expected')}: {check.get('reason')}"
            )
    errors: dict[tuple[str, str], list[float]] = {}
    for record in journal.get("records", []):
        if record.get("error"):
            where = f"status {record.get('status')} upstream {record.get('upstream')}: "
            key = (str(record.get("phase")), where + str(record["error"])[:160])
            errors.setdefault(key, []).append(record["start"])
    t0 = journal.get("t0") or journal.get("started_at") or 0
    for (phase, error), starts in sorted(errors.items()):
        lines.append(
            f"  {len(starts)} error(s) in {phase}, first at t0+{min(starts) - t0:.1f}s: {error}"
        )
    return "\n".join(lines)


def twin_account(journal: dict[str, Any]) -> str:
    """Why a twin run held or not, in full (a plain string, which pytest prints whole where it
    cuts a dict short): how the run ended, what it missed, what failed unnamed, and every check's
    verdict with its reason."""
    twin = journal["twin"]
    lines = [
        f"twin {twin['name']}: held={twin['held']} status={twin['status']} "
        f"aborts={twin.get('aborts')} aborted_by={twin.get('aborted_by')}",
        f"missed (must fail, passed): {twin['missed']}",
        f"unnamed (failed, not named): {twin['unnamed']}",
    ]
    for check in journal.get("checks", []):
        verdict = "pass" if check["passed"] else "FAIL"
        lines.append(f"  {verdict} {check['label']}: {check.get('reason')}")
    return "\n".join(lines)


def assert_ended_at_replacement(journal: dict[str, Any], ready_at: float) -> None:
    """The journal's fault phase (``until: replaced``) ended at the first tick after
    ``ready_at``, before its planned end; the phase after it moved up with it."""
    names = [p["name"] for p in journal["phases"]]
    phases = {p["name"]: p for p in journal["phases"]}
    fault = phases["fault"]
    assert fault["planned_end"] is not None, fault
    assert ready_at <= fault["end"] <= ready_at + 1.5, (fault, ready_at)
    assert fault["end"] < fault["planned_end"]
    following = phases[names[names.index("fault") + 1]]
    assert abs(following["start"] - fault["end"]) < 0.01, (fault, following)
    ended = [e for e in journal["timeline"] if e["event"] == "phase_end" and e["phase"] == "fault"]
    assert ended and ended[0]["until"] == "replaced" and ended[0]["cut_s"] > 0, ended


def made_up_record(
    start: float, e2e: float = 0.5, status: int = 200, fallback: bool = False
) -> Any:
    """A made-up request sent at ``start`` (epoch seconds) and answered in ``e2e`` (its first
    token half-way), for the checks' unit tests; a status other than 200 is an error."""
    from drills.model.records import Record

    return Record(
        start=start,
        ttft=e2e / 2,
        itl=[0.05],
        e2e=e2e,
        status=status,
        error=None if status == 200 else "HTTP 502",
        fallback=fallback,
        trace_id="t",
    )
