"""A run as one OpenTelemetry trace (``drills.engine.tracing``), sent to a real Jaeger over
OTLP/HTTP and read back through its query API: the drill, its phases, its faults under the
phase they were applied in, each request linked to its own trace, the checks' verdicts as
events. The journal is built here (the export is the subject); the CLI's ``--otlp`` on a real
drill is in tests/test_drill_run.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from drills.common.ports import free_port
from drills.common.tracecontext import client_span_id, new_traceparent
from drills.engine.tracing import MAX_REQUEST_SPANS, OtlpTarget, export_trace, otlp_target
from drills.model.journal import Journal
from tests.jaeger_env import Jaeger

T0 = float(int(time.time()) - 120)  # recent, and whole seconds: the µs Jaeger shows are exact


def journal(records: int = 20, status: str = "completed", failed: bool = True) -> Journal:
    trace_ids = [new_traceparent()[0] for _ in range(records)]
    return Journal.model_validate(
        {
            "drill": "demo",
            "title": "Demo drill",
            "run_id": "demo-r1",
            "status": status,
            "deviated": failed,
            "started_at": T0 - 2,
            "t0": T0,
            "ended_at": T0 + 31,
            "stack": {"gateway": "http://127.0.0.1:1", "profile": "sound"},
            "phases": [
                {"name": "baseline", "start": T0, "end": T0 + 10},
                {"name": "fault", "start": T0 + 10, "end": T0 + 20},
                {"name": "recovery", "start": T0 + 20, "end": T0 + 30},
            ],
            "faults": [
                {
                    "index": 0,
                    "phase": "fault",
                    "kind": "toxiproxy.latency",
                    "target": "vllm-0",
                    "spec": {"latency": 3.0},
                    "scheduled_offset": 10,
                    "scheduled_end": 20,
                    "applied_at": T0 + 10.05,
                    "reverted_at": T0 + 20.02,
                    "evidence": {"toxics": [{"name": "drills-demo-r1-0"}]},
                },
                {
                    "index": 1,
                    "phase": "fault",
                    "kind": "toxiproxy.down",
                    "target": "vllm-1",
                    "scheduled_offset": 12,
                    "scheduled_end": 20,
                    "error": "ToxiproxyError: no proxy vllm-1",
                },
            ],
            "records": [
                {
                    "start": T0 + 0.5 + i * 29 / max(records, 1),
                    "ttft": 0.2,
                    "e2e": 0.6,
                    "status": 503 if 10 <= i * 29 / max(records, 1) < 20 else 200,
                    "error": "HTTP 503" if 10 <= i * 29 / max(records, 1) < 20 else None,
                    "trace_id": trace_ids[i],
                }
                for i in range(records)
            ],
            "checks": [
                {
                    "label": "error_rate during baseline",
                    "check": "error_rate",
                    "during": "baseline",
                    "expected": "< 0.01",
                    "observed": 0.0,
                    "observed_text": "0.000",
                    "passed": True,
                    "reason": "",
                    "samples": 7,
                    "runbook": "runbooks/llm-latency.md#errors",
                },
                {
                    "label": "fallback_rate during fault",
                    "check": "fallback_rate",
                    "during": "fault",
                    "expected": "> 0.8",
                    "observed": 0.0,
                    "observed_text": "0.000",
                    "passed": False,
                    "reason": "no fallback answered",
                    "samples": 7,
                    "runbook": "runbooks/llm-latency.md#fallback",
                },
            ],
            "run_dir": "/tmp/runs/demo-r1",
            "label": "v1.2.3",
        }
    )


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span["tags"]}


def test_a_run_is_one_trace_of_its_phases_faults_requests_and_checks(jaeger: Jaeger) -> None:
    ran = journal()
    sent = export_trace(ran, OtlpTarget(f"{jaeger.otlp}/v1/traces", timeout=10))
    assert sent.trace is not None and sent.trace.exported, sent.trace
    # The drill, 3 phases, 2 faults, 20 requests.
    assert sent.trace.spans == 26 and sent.trace.endpoint == f"{jaeger.otlp}/v1/traces"
    trace = jaeger.trace(sent.trace.trace_id, 26)
    spans = {s["spanID"]: s for s in trace["spans"]}  # type: ignore[attr-defined]
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans.values():
        by_name.setdefault(span["operationName"], []).append(span)
    processes = trace["processes"]
    assert {p["serviceName"] for p in processes.values()} == {"drills"}  # type: ignore[attr-defined]

    [root] = by_name["drill demo"]
    assert not root["references"]
    run = tags(root)
    assert run["drills.run_id"] == "demo-r1" and run["drills.label"] == "v1.2.3"
    assert run["drills.verdict"] == "failed" and run["drills.requests"] == 20
    assert run["otel.status_code"] == "ERROR"
    assert abs(root["startTime"] - (T0 - 2) * 1e6) <= 1 and abs(root["duration"] - 33e6) <= 1
    # The checks' verdicts: one event (a log in Jaeger) each, with its runbook step.
    checks = {
        f["value"]: {g["key"]: g["value"] for g in log["fields"]}
        for log in root["logs"]
        for f in log["fields"]
        if f["key"] == "event"
    }
    failed = checks["check fallback_rate during fault"]
    assert failed["drills.check.passed"] is False
    assert failed["drills.check.runbook"] == "runbooks/llm-latency.md#fallback"
    assert checks["check error_rate during baseline"]["drills.check.passed"] is True

    def parent(span: dict[str, Any]) -> dict[str, Any]:
        [ref] = [r for r in span["references"] if r["refType"] == "CHILD_OF"]
        return spans[ref["spanID"]]

    phases = {
        s["operationName"]: s for s in spans.values() if s["operationName"].startswith("phase")
    }
    assert sorted(phases) == ["phase baseline", "phase fault", "phase recovery"]
    assert all(parent(p) is root for p in phases.values())
    # Each fault under the phase it was applied in, from application to revert, its evidence
    # kept; one that never landed is there too, with its error.
    [latency] = by_name["fault toxiproxy.latency vllm-0"]
    assert parent(latency) is phases["phase fault"]
    assert abs(latency["startTime"] - (T0 + 10.05) * 1e6) <= 1
    assert abs(latency["duration"] - 9_970_000) <= 1
    assert "drills-demo-r1-0" in tags(latency)["drills.fault.evidence"]
    [down] = by_name["fault toxiproxy.down vllm-1"]
    assert tags(down)["drills.fault.applied"] is False
    assert tags(down)["otel.status_code"] == "ERROR" and down["duration"] == 0
    # Each request under its phase, failed ones marked, linked to the request's own trace
    # (the client span its traceparent named).
    requests = by_name["request"]
    assert len(requests) == 20
    for span in requests:
        own = tags(span)["drills.request.trace_id"]
        [link] = [r for r in span["references"] if r["traceID"] == own]
        assert link["spanID"] == client_span_id(own)
        phase = parent(span)["operationName"]
        assert (tags(span).get("otel.status_code") == "ERROR") == (phase == "phase fault")


def test_an_unreachable_receiver_leaves_the_run_whole() -> None:
    ran = journal(records=3)
    port = free_port()  # nothing listens there
    began = time.monotonic()
    sent = export_trace(ran, OtlpTarget(f"http://127.0.0.1:{port}/v1/traces", timeout=2))
    assert sent.trace is not None and not sent.trace.exported
    assert sent.trace.reason and str(port) in sent.trace.reason
    assert time.monotonic() - began < 30
    # The rest of the journal is the run as it was.
    assert sent.model_dump(exclude={"trace"}) == ran.model_dump(exclude={"trace"})


def test_requests_past_the_cap_are_counted_not_sent(jaeger: Jaeger) -> None:
    many = MAX_REQUEST_SPANS + 40
    sent = export_trace(journal(records=many), OtlpTarget(f"{jaeger.otlp}/v1/traces"))
    assert sent.trace is not None and sent.trace.exported
    assert sent.trace.spans == 1 + 3 + 2 + MAX_REQUEST_SPANS
    trace = jaeger.trace(sent.trace.trace_id, sent.trace.spans)
    [root] = [s for s in trace["spans"] if s["operationName"] == "drill demo"]  # type: ignore[attr-defined]
    assert tags(root)["drills.requests"] == many
    assert tags(root)["drills.requests.exported"] == MAX_REQUEST_SPANS


@pytest.mark.parametrize(
    ("flag", "env", "endpoint"),
    [
        (None, {}, None),
        ("http://collector:4318", {}, "http://collector:4318/v1/traces"),
        ("http://collector:4318/v1/traces", {}, "http://collector:4318/v1/traces"),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"),
        (
            None,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/custom",
            },
            "http://t:4318/custom",
        ),
        (
            "http://flag:4318",
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"},
            "http://flag:4318/v1/traces",
        ),
    ],
)
def test_where_the_trace_goes(flag: str | None, env: dict[str, str], endpoint: str | None) -> None:
    target = otlp_target(flag, env)
    assert (target.endpoint if target else None) == endpoint


def test_the_timeout_variable_is_in_milliseconds() -> None:
    target = otlp_target("http://c:4318", {"OTEL_EXPORTER_OTLP_TIMEOUT": "2500"})
    assert target is not None and target.timeout == 2.5


def test_a_client_span_id_is_never_all_zeros() -> None:
    assert client_span_id("ab" * 8 + "0" * 16) == "0000000000000001"
    trace_id, header = new_traceparent()
    assert header == f"00-{trace_id}-{client_span_id(trace_id)}-01"


def test_the_otlp_flag_must_be_http(tmp_path: Path) -> None:
    import subprocess
    import sys

    scenario = Path(__file__).resolve().parent / "scenarios" / "short-latency.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "drills.cli", "run", str(scenario), "--otlp", "grpc://c:4317",
         "--out", str(tmp_path / "runs")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--otlp: 'grpc://c:4317' is not an http(s):// URL" in result.stderr
    assert not (tmp_path / "runs").exists()
