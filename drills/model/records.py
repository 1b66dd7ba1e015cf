"""One record per request the load sent: the schema the load process writes and every check
reads (``records.jsonl`` in the run directory, ``Journal.records``).

Times are seconds; ``start`` is the epoch time the request was sent, the others are measured
from it with a monotonic clock. A record is written whatever happened to the request: an error
is a record with ``error`` set, never a missing line.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Record"]


class Record(BaseModel):
    """One request, as the client saw it."""

    model_config = ConfigDict(extra="forbid")

    start: float
    """Epoch seconds when the request was sent."""
    ttft: float | None = None
    """Time to the first content token (streamed) or to the whole answer (not streamed)."""
    itl: list[float] = Field(default_factory=list)
    """Gaps between consecutive content tokens (streamed answers)."""
    e2e: float | None = None
    """Time to the end of the answer (or of the failure)."""
    status: int = 0
    """The HTTP status; 0 when no answer came (connection refused, client timeout)."""
    error: str | None = None
    """Why the request failed, as the client saw it; ``None`` when it did not."""
    tokens: int = 0
    """Content tokens the client received (chunks carrying content, when streamed)."""
    finish_reason: str | None = None
    """The last ``finish_reason`` the answer carried (``stop``, ``length``); ``None``: none."""
    truncated: bool = False
    """With the length pinned (``load.pin_length``): fewer tokens came than were asked for."""
    fallback: bool = False
    """The answer was the stack's fallback (by text or by the route header)."""
    route: str | None = None
    """The gateway's route header (``x-drills-route``), when it sends one."""
    upstream: str | None = None
    """The upstream the gateway says served it (``x-drills-upstream``)."""
    trace_id: str
    text: str = ""
    """The first 300 characters of the answer."""
    endpoint: str = "chat"
    """``chat``, ``rag`` or ``agent``."""
    missing_context: bool | None = None
    """RAG answers: the answer declared it had no retrieved context."""
    agent_status: str | None = None
    task_id: str | None = None
    """Agent tasks the load resumes (``load.resume``): the task this send belongs to."""
    attempt: int | None = None
    """Agent tasks the load resumes: which send of its task this was (1: the first)."""
    prompt: int | None = None
    """RAG and agent requests: which of the load's prompts it sent (its index)."""
    resumed_from: int | None = None
    """Agent answers: the steps the gateway says were done before this send (its claim)."""
    workflow: str | None = None
    """Workflow requests (``endpoint: workflow``): the kind sent (``brief``, ``lookup``)."""
    waited: float | None = None
    """Workflow answers: the longest any of its tasks waited for a dependency, from the answer
    (the orchestrator's account of each wait); the client's own view is ``e2e``."""
    context_ids: list[str | None] | None = None
    phase: str | None = None
    """The phase the request counts in (``drills.model.windows``: the one it was sent in,
    unless it met a fault it was not sent under, which then takes it)."""
    counted_at: float | None = None
    """The epoch time the request counts at in windows: its ``start``, or when it met a fault."""
    straddles: str | None = None
    """Why the request ends outside the window it counts in (sent before a fault and in flight
    when it was applied, answered after its phase ended); ``None``: it does not."""
    worker: str | None = None
    """The Locust worker that sent it (its ``start`` moved onto the master's clock); ``None``:
    a single load process sent it."""
    lag: float | None = None
    """Open-loop load: how long after its scheduled arrival the request left (the load
    generator's own delay; ``None`` for a closed-loop user's request). Large values say the
    generator, not the stack, set the pace."""
    attempts: int | None = None
    """Model calls of this request that reached the harness's L7 hop, matched by trace id
    (set by the runner; ``None``: the gateway does not pass ``traceparent`` on, or no hop)."""
    served_by: str | None = None
    """The hop whose answer the client got, as the harness saw it (set by the runner)."""
    first_call: str | None = None
    """The hop this request's first model call reached, seen at the L7 hop by its trace id
    (set by the runner; failed requests too): the route the gateway chose for it."""
    group: str | None = None
    """The scenario's group it falls in (``Scenario.groups``, set by the runner)."""
    served_by_how: Literal["trace", "timing"] | None = None
    """How ``served_by`` was found: the request's trace id at the hop, or (when the gateway
    does not pass it on) the one attempt that ended when the client's answer did."""

    @classmethod
    def begin(cls, trace_id: str, endpoint: str) -> Record:
        """A request about to be sent."""
        return cls(start=time.time(), trace_id=trace_id, endpoint=endpoint)

    @property
    def is_error(self) -> bool:
        return self.status != 200 or bool(self.error)
