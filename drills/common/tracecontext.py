"""W3C trace context for the load's requests: each request is its own trace, and the drill's
trace links to it (``drills.engine.tracing``).

The client's span id is the low half of the trace id, so that the drill's trace can link to
the request's client span from the record alone (the record keeps the trace id). The trace
id is random (128 bits from ``secrets``); W3C asks only that a span id be unique within its
trace and not all zeros, which a client span, the only span the load makes, is.
"""

from __future__ import annotations

import secrets

__all__ = ["client_span_id", "new_traceparent"]


def client_span_id(trace_id: str) -> str:
    """The span id the load gave its request of ``trace_id`` (16 hex digits); all zeros, which
    W3C forbids, is read as ``...01``."""
    low = trace_id[16:32].rjust(16, "0")
    return low if int(low, 16) else "0000000000000001"


def new_traceparent() -> tuple[str, str]:
    """A new trace id and the ``traceparent`` header that starts it (sampled)."""
    trace_id = secrets.token_hex(16)
    return trace_id, f"00-{trace_id}-{client_span_id(trace_id)}-01"
