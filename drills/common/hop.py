"""The harness's L7 hop: its fault rules and a typed client for its control API.

The hop (``drills.hop``, run as ``python -m drills.hop``) is an HTTP and SSE proxy that the
harness owns, in front of each model upstream (beside Toxiproxy, which stays for TCP faults). It
records every request that reaches it (see ``HopRecord``) and injects per-request faults that a
TCP proxy cannot: an HTTP status with a body, a slow first token, a stall or a cut after N
chunks, a malformed chunk, a wedged engine whose ``/health`` still answers 200.

The rules here are what its control API accepts (``POST /hops/{hop}/faults``); the scenario's
``hop.*`` fault kinds are these rules plus the fields every fault has. Faults touch model calls
only (``POST /v1/...``); health and metrics requests pass untouched, which is what makes
``hop.wedge`` the wedged engine of vLLM #39863.

Control API (JSON)::

    GET    /health                      200 {"hops": [...]}
    GET    /hops                        {name: {listen, upstream, faults, requests, refusing}}
    POST   /hops/{hop}/faults           201 the fault; 404 unknown hop; 409 name taken; 400 bad rule
    GET    /hops/{hop}/faults           [fault, ...] (each with ``hits``: requests it touched)
    DELETE /hops/{hop}/faults/{name}    200 the fault as removed (with its hits); 404 if gone
    POST   /hops/{hop}/refuse           200 {"refusing": true}: the upstream is about to refuse
                                        connections; the hop refuses them until it accepts again
    GET    /records?since=SEQ&limit=N   {"next": SEQ, "records": [HopRecord, ...]}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

import httpx
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from drills.common.errors import HopError
from drills.common.http import checked_call
from drills.common.units import Duration

__all__ = [
    "RULES",
    "CutRule",
    "FirstTokenDelayRule",
    "HopClient",
    "HopError",
    "HopRecord",
    "HopRule",
    "MalformedRule",
    "StallRule",
    "StatusRule",
    "WedgeRule",
    "parse_rule",
]


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    kind: str
    toxicity: float = Field(default=1.0, ge=0.0, le=1.0)
    """The share of model calls the fault hits (each call drawn at random)."""


class StatusRule(_Rule):
    """Answer a model call with an HTTP error, without calling the upstream."""

    kind: Literal["hop.status"]
    status: int = Field(default=503, ge=400, le=599)
    body: str | None = None
    """Default: an OpenAI-shaped error (``{"error": {"message": ..., "type": ...}}``)."""
    retry_after: Duration | None = None
    """Sent as ``Retry-After`` (whole seconds, rounded up), as a rate-limited engine does."""


class FirstTokenDelayRule(_Rule):
    """Hold the answer's headers and first chunk for ``delay``; the rest flows at its pace."""

    kind: Literal["hop.first_token_delay"]
    delay: Duration = Field(gt=0)


class StallRule(_Rule):
    """Stop the stream for ``duration`` after ``after_chunks`` SSE events (a hung decode)."""

    kind: Literal["hop.stall"]
    after_chunks: int = Field(default=1, ge=0)
    duration: Duration = Field(gt=0)


class CutRule(_Rule):
    """End the stream after ``after_chunks`` SSE events, before ``[DONE]``.

    ``clean: true`` ends the HTTP response properly (the last chunk of the chunked encoding is
    sent): only the missing ``[DONE]`` and ``finish_reason`` tell. ``clean: false`` drops the
    connection mid-body."""

    kind: Literal["hop.cut"]
    after_chunks: int = Field(default=1, ge=0)
    clean: bool = False


class MalformedRule(_Rule):
    """Replace the SSE event after ``after_chunks`` good ones with one that is not JSON."""

    kind: Literal["hop.malformed"]
    after_chunks: int = Field(default=1, ge=0)


class WedgeRule(_Rule):
    """Model calls hang (nothing is sent upstream, nothing comes back) while ``/health`` and
    ``/metrics`` still answer: the wedged engine a liveness probe does not see."""

    kind: Literal["hop.wedge"]


RULES: tuple[type[_Rule], ...] = (
    StatusRule,
    FirstTokenDelayRule,
    StallRule,
    CutRule,
    MalformedRule,
    WedgeRule,
)
HopRule = Annotated[
    Union[StatusRule, FirstTokenDelayRule, StallRule, CutRule, MalformedRule, WedgeRule],  # noqa: UP007
    Field(discriminator="kind"),
]
_RULE = TypeAdapter[Any](HopRule)


def parse_rule(data: Any) -> _Rule:
    """One rule from JSON; ``pydantic.ValidationError`` when it is not one."""
    rule: _Rule = _RULE.validate_python(data)
    return rule


class HopRecord(BaseModel):
    """One request that reached a hop, as the hop saw it (times in epoch seconds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int
    hop: str
    method: str
    path: str
    arrived_at: float
    status: int | None = None
    """What the hop answered (``None``: no answer began: the client left first)."""
    first_byte_s: float | None = None
    """From arrival to the first body byte sent back."""
    chunks: int = 0
    """SSE events sent back (``[DONE]`` included)."""
    finish_reason: str | None = None
    done: bool = False
    """``data: [DONE]`` was sent back."""
    bytes: int = 0
    ended_at: float | None = None
    outcome: Literal["complete", "client_disconnected", "upstream_error", "injected"] = "complete"
    error: str | None = None
    traceparent: str | None = None
    fault: str | None = None
    """The hop fault that touched this request (its name), if any."""
    fault_kind: str | None = None


class HopClient:
    """The hop's control API (see the module docstring)."""

    def __init__(self, base_url: str, *, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def __enter__(self) -> HopClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        where = f"the L7 hop at {self.base_url}"
        return checked_call(self._http, HopError, method, path, where=where, **kwargs)

    def next_seq(self) -> int:
        """The sequence number the next request to reach the hop will get."""
        return int(self._call("GET", "/health").json()["next_seq"])

    def hops(self) -> dict[str, dict[str, Any]]:
        hops: dict[str, dict[str, Any]] = self._call("GET", "/hops").json()
        return hops

    def fronting(self, listen: str) -> list[str]:
        """The hops whose upstream is the listener ``listen`` (``HOST:PORT``, as Toxiproxy
        writes a proxy's; a wildcard host matches the port alone)."""
        host, _, port = listen.rpartition(":")
        wildcard = host.strip("[]") in {"", "0.0.0.0", "::"}
        found = []
        for name, hop in self.hops().items():
            upstream = httpx.URL(hop["upstream"])
            if str(upstream.port) == port and (wildcard or upstream.host == host.strip("[]")):
                found.append(name)
        return found

    def refuse(self, hop: str) -> None:
        """Announce that ``hop``'s upstream is about to refuse connections: the hop refuses
        them from now on, until the upstream accepts again (or it never refused within 2 s)."""
        self._call("POST", f"/hops/{hop}/refuse")

    def refusing(self, hop: str) -> bool:
        return bool(self.hops()[hop].get("refusing"))

    def add_fault(self, hop: str, name: str, rule: dict[str, Any]) -> dict[str, Any]:
        fault: dict[str, Any] = self._call(
            "POST", f"/hops/{hop}/faults", json={**rule, "name": name}
        ).json()
        return fault

    def faults(self, hop: str) -> list[dict[str, Any]]:
        faults: list[dict[str, Any]] = self._call("GET", f"/hops/{hop}/faults").json()
        return faults

    def remove_fault(self, hop: str, name: str) -> dict[str, Any] | None:
        """The fault as removed (with its ``hits``), or ``None`` when it was already gone."""
        try:
            removed: dict[str, Any] = self._call("DELETE", f"/hops/{hop}/faults/{name}").json()
        except HopError as exc:
            if exc.status_code == 404:
                return None
            raise
        return removed

    def records(self, since: int = 0, limit: int = 10_000) -> tuple[list[HopRecord], int]:
        """Records with ``seq >= since`` (at most ``limit``), and the ``since`` of the next call."""
        data = self._call("GET", "/records", params={"since": since, "limit": limit}).json()
        return [HopRecord.model_validate(r) for r in data["records"]], int(data["next"])

    def all_records(self, since: int = 0) -> list[HopRecord]:
        out: list[HopRecord] = []
        while True:
            page, since = self.records(since)
            out += page
            if not page:
                return out
