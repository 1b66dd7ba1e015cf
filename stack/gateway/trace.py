"""W3C trace context: accept a caller's ``traceparent``, start a span of our own, pass it on."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

__all__ = ["TraceContext"]

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


@dataclass(frozen=True)
class TraceContext:
    trace_id: str
    span_id: str
    parent_id: str | None
    flags: str = "01"

    @classmethod
    def from_header(cls, value: str | None) -> TraceContext:
        """Continue the caller's trace if ``value`` is a valid traceparent, else start one."""
        span_id = secrets.token_hex(8)
        if value:
            match = _TRACEPARENT.match(value.strip().lower())
            if match and match.group(1) != "0" * 32 and match.group(2) != "0" * 16:
                return cls(match.group(1), span_id, match.group(2), match.group(3))
        return cls(secrets.token_hex(16), span_id, None)

    @property
    def traceparent(self) -> str:
        """The header to send downstream and back to the caller: our span as the parent."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"
