"""The drill on the team's tracing backend: each run exported as one OpenTelemetry trace over
OTLP/HTTP (``--otlp URL``, or the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_ENDPOINT``; headers from ``OTEL_EXPORTER_OTLP_HEADERS``).

The trace, built from the journal once the checks are judged::

    drill inference-latency                  the run: status, verdict, label, report; a check
    |                                          verdict per event ("check fallback_rate ...")
    +- phase baseline
    |  +- request                            one per request sent in the phase, linked to the
    |  +- ...                                  request's own trace (its ``traceparent``)
    +- phase fault
    |  +- fault toxiproxy.latency vllm-0     applied to reverted: kind, target, spec, evidence
    |  +- request ...
    +- phase recovery

The load's requests are traces of their own (what the gateway and the engines add to them
stays theirs); each request span links to its trace's client span, so a backend shows the
drill and every request it sent side by side. At most ``MAX_REQUEST_SPANS`` requests are
exported (the root says how many there were). An export that fails never fails the run: the
journal says why (``Journal.trace``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from drills.common.redact import redact_url
from drills.common.tracecontext import client_span_id
from drills.model.journal import Journal, TraceExport

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["MAX_REQUEST_SPANS", "OtlpTarget", "export_trace", "otlp_target"]

MAX_REQUEST_SPANS = 5000
"""Request spans exported per run at most (a one-hour drill at 10 requests a second sends
36,000); the first ones, in the order they were sent."""
_BATCH = 512  # spans per OTLP request: a few hundred kB, far under a receiver's body limit
_ATTRIBUTE = 4096  # characters of a JSON attribute (a fault's evidence) kept at most


@dataclass(frozen=True)
class OtlpTarget:
    """Where the trace goes: the OTLP/HTTP traces URL (``.../v1/traces``)."""

    endpoint: str
    timeout: float = 10.0


def otlp_target(flag: str | None, env: dict[str, str] | None = None) -> OtlpTarget | None:
    """The target from ``--otlp`` (a base URL, or one ending in ``/v1/traces``), else from the
    OpenTelemetry environment variables; ``None``: no trace is exported."""
    env = dict(os.environ) if env is None else env
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base = flag or (None if traces else env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    if base:
        url = base.rstrip("/")
        endpoint = url if url.endswith("/v1/traces") else f"{url}/v1/traces"
    elif traces:
        endpoint = traces
    else:
        return None
    timeout = env.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or env.get("OTEL_EXPORTER_OTLP_TIMEOUT")
    try:
        seconds = float(timeout) / 1000 if timeout else 10.0  # the variables are milliseconds
    except ValueError:
        seconds = 10.0
    return OtlpTarget(endpoint, seconds)


def export_trace(journal: Journal, target: OtlpTarget) -> Journal:
    """``journal`` with ``trace`` set: the run sent to ``target`` as one trace, or why not."""
    # Imported here: the OpenTelemetry SDK and its OTLP exporter take about 0.2 s to import,
    # and only a run that exports a trace needs them.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    spans, trace_id = _spans(journal)
    exporter = OTLPSpanExporter(endpoint=target.endpoint, timeout=target.timeout)
    reason = None
    try:
        for first in range(0, len(spans), _BATCH):
            result = exporter.export(spans[first : first + _BATCH])
            if result is not SpanExportResult.SUCCESS:
                reason = (
                    f"the OTLP receiver at {redact_url(target.endpoint)} did not take the "
                    f"spans ({first} of {len(spans)} sent; its answer is in the log)"
                )
                break
    except Exception as exc:  # the export is a copy of the run: it never fails the run
        reason = f"{type(exc).__name__}: {exc}"
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK (1.45)
    trace = TraceExport(
        endpoint=redact_url(target.endpoint),
        trace_id=trace_id,
        spans=len(spans),
        exported=reason is None,
        reason=reason,
    )
    return journal.model_copy(update={"trace": trace})


def _spans(journal: Journal) -> tuple[list[Any], str]:
    """The run's spans (ended, ready to export) and its trace id (32 hex digits)."""
    # Imported here: as in export_trace, only a run that exports a trace needs the SDK.
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    kept = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "drills", "drills.drill": journal.drill}),
        span_limits=SpanLimits(max_events=10_000, max_links=10, max_span_attributes=64),
    )
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("drills")
    ended_at = journal.ended_at

    root = tracer.start_span(
        f"drill {journal.drill}", start_time=_ns(journal.started_at), attributes=_run(journal)
    )
    inside = trace.set_span_in_context(root)
    phases: dict[str, Span] = {}
    for window in journal.phases:
        phases[window.name] = tracer.start_span(
            f"phase {window.name}",
            context=inside,
            start_time=_ns(window.start),
            attributes={"drills.phase": window.name},
        )
    for fault in journal.faults:
        planned = (journal.t0 or journal.started_at) + fault.scheduled_offset
        _fault_span(tracer, fault, phases.get(fault.phase, root), planned, ended_at)
    for record in journal.records[:MAX_REQUEST_SPANS]:
        _request_span(tracer, record, _phase_of(journal, record.start, phases) or root)
    for window in journal.phases:
        phases[window.name].end(end_time=_ns(window.end))
    for check in journal.checks:
        root.add_event(
            f"check {check.label}",
            timestamp=_ns(ended_at),
            attributes=_attributes(
                {
                    "drills.check": check.check,
                    "drills.check.passed": check.passed,
                    "drills.check.conclusive": check.conclusive,
                    "drills.check.observed": check.observed_text,
                    "drills.check.expected": check.expected,
                    "drills.check.reason": check.reason,
                    "drills.check.runbook": check.runbook,
                    "drills.check.severity": check.severity,
                }
            ),
        )
    if journal.status != "completed" or journal.deviated:
        root.set_status(trace.Status(trace.StatusCode.ERROR, _verdict(journal)))
    root.end(end_time=_ns(ended_at))
    trace_id = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()
    return list(kept.get_finished_spans()), trace_id


def _run(journal: Journal) -> dict[str, Any]:
    return _attributes(
        {
            "drills.drill": journal.drill,
            "drills.title": journal.title,
            "drills.run_id": journal.run_id,
            "drills.status": str(journal.status),
            "drills.verdict": _verdict(journal),
            "drills.label": journal.label,
            "drills.twin": journal.twin.name if journal.twin else None,
            "drills.report": journal.run_dir,
            "drills.requests": len(journal.records),
            "drills.requests.exported": min(len(journal.records), MAX_REQUEST_SPANS),
            "drills.checks.failed": sum(not c.passed for c in journal.checks),
        }
    )


def _verdict(journal: Journal) -> str:
    if journal.status != "completed":
        return str(journal.status)
    return "failed" if journal.deviated else "passed"


def _fault_span(tracer: Any, fault: Any, parent: Span, planned: float, ended_at: float) -> None:
    # Imported here: as in export_trace, only a run that exports a trace needs the SDK.
    from opentelemetry import trace

    # Never applied: a zero-length span at its planned time, with its error, says so.
    start = fault.applied_at if fault.applied_at is not None else planned
    span = tracer.start_span(
        f"fault {fault.kind} {fault.target}",
        context=trace.set_span_in_context(parent),
        start_time=_ns(start),
        attributes=_attributes(
            {
                "drills.fault.kind": fault.kind,
                "drills.fault.target": fault.target,
                "drills.fault.phase": fault.phase,
                "drills.fault.spec": _json(fault.spec),
                "drills.fault.evidence": _json(fault.evidence),
                "drills.fault.applied": fault.applied_at is not None,
                "drills.fault.reverted": fault.reverted_at is not None,
                "drills.fault.error": fault.error,
            }
        ),
    )
    if fault.error:
        span.set_status(trace.Status(trace.StatusCode.ERROR, fault.error))
    end = fault.reverted_at if fault.reverted_at is not None else ended_at
    if fault.applied_at is None:
        end = start
    span.end(end_time=_ns(max(end, start)))


def _request_span(tracer: Any, record: Any, parent: Span) -> None:
    # Imported here: as in export_trace, only a run that exports a trace needs the SDK.
    from opentelemetry import trace

    links = []
    if len(record.trace_id) == 32:
        try:
            own = trace.SpanContext(
                trace_id=int(record.trace_id, 16),
                span_id=int(client_span_id(record.trace_id), 16),
                is_remote=True,
                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            )
            links = [trace.Link(own, {"drills.link": "the request's own trace"})]
        except ValueError:
            links = []
    span = tracer.start_span(
        "request",
        context=trace.set_span_in_context(parent),
        start_time=_ns(record.start),
        links=links,
        attributes=_attributes(
            {
                "drills.request.trace_id": record.trace_id,
                "drills.request.endpoint": record.endpoint,
                "http.response.status_code": record.status or None,
                "drills.request.ttft_s": record.ttft,
                "drills.request.fallback": record.fallback,
                "drills.request.tokens": record.tokens,
                "drills.request.upstream": record.upstream,
                "error.type": record.error,
            }
        ),
    )
    if record.is_error:
        span.set_status(trace.Status(trace.StatusCode.ERROR, record.error or "error"))
    span.end(end_time=_ns(record.start + (record.e2e or 0.0)))


def _phase_of(journal: Journal, when: float, phases: dict[str, Span]) -> Span | None:
    for window in journal.phases:
        if window.start <= when < window.end:
            return phases[window.name]
    return None


def _ns(epoch: float) -> int:
    return int(epoch * 1e9)


def _json(value: Any) -> str | None:
    if value is None:
        return None
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= _ATTRIBUTE else text[: _ATTRIBUTE - 1] + "…"


def _attributes(values: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry takes no ``None``: those are left out."""
    return {k: v for k, v in values.items() if v is not None}
