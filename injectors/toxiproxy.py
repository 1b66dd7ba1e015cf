"""Network faults through Toxiproxy: every toxic it has, plus cutting a hop entirely.

Toxics are named ``drills-<run id>-<n>`` so that what a crashed run left behind can be told
apart from anyone else's. Evidence is the proxy as Toxiproxy reports it after the change; the
revert of a toxic falls back to recreating the proxy when Toxiproxy's own removal hangs (see
``drills.common.toxiproxy``).

A cut is refused, not dropped, through the harness's L7 hop: before it disables a proxy, the
injector tells each hop in front of it (``hop_url``) to close its listener until the proxy
accepts again, so that a gateway sees the refusal it would see without the hop.

Cuts compose. Two ``toxiproxy.down`` faults of one process on one proxy (windows that overlap,
or meet at a phase boundary) hold it down together: the proxy stays down until the last of them
is reverted, which restores what was there before the first; each one's ledger entry carries
that state too, so a sweep after a crash restores it whatever order it reverts them in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from drills.common.errors import HopError, InputError, RevertError, ToxiproxyError
from drills.common.hop import HopClient
from drills.common.toxiproxy import Proxy, Toxic, ToxiproxyClient
from injectors.base import InjectionContext
from injectors.specs.toxiproxy import DownFault

__all__ = ["ToxiproxyInjector", "revert_entry"]

logger = logging.getLogger(__name__)

TOXIC_PREFIX = "drills-"


@dataclass
class _Cut:
    """The ``down`` faults holding one proxy down now, and whether it was enabled before the
    first of them."""

    enabled: bool
    holders: set[str] = field(default_factory=set)


_CUTS: dict[tuple[str, str], _Cut] = {}
"""(Toxiproxy URL, proxy) -> the cut held on it by faults of this process."""
_CUTS_LOCK = threading.Lock()  # faults due at one instant are applied in parallel threads


class ToxiproxyInjector:
    def __init__(self, fault: Any, context: InjectionContext, index: int) -> None:
        self.fault = fault
        self.kind: str = fault.kind
        self.target: str = fault.target
        if context.toxiproxy_url is None:
            raise InputError(f"{fault.kind} on {fault.target}: the stack names no Toxiproxy")
        self.url: str = context.toxiproxy_url
        self.shared: ToxiproxyClient | None = context.toxiproxy
        self.toxic_name = f"{TOXIC_PREFIX}{context.run_id}-{index}"
        self.snapshot: Proxy | None = None
        self.applied = False
        self.hop_url = context.hop_url
        self.hops_refusing: list[str] = []

    @property
    def is_down(self) -> bool:
        return isinstance(self.fault, DownFault)

    def ledger_entry(self) -> dict[str, Any]:
        snap = self.snapshot
        return {
            "kind": self.kind,
            "target": self.target,
            "toxiproxy": self.url,
            "toxic": None if self.is_down else self.toxic_name,
            "snapshot": None
            if snap is None
            else {
                "name": snap.name,
                "listen": snap.listen,
                "upstream": snap.upstream,
                "enabled": snap.enabled,
                "toxics": [t.as_json() for t in snap.toxics],
            },
        }

    @contextmanager
    def _client(self) -> Iterator[ToxiproxyClient]:
        if self.shared is not None:
            yield self.shared
        else:
            with ToxiproxyClient(self.url) as client:
                yield client

    def apply(self) -> dict[str, Any]:
        with self._client() as client:
            try:
                before = client.proxy(self.target)
            except ToxiproxyError as exc:
                if not exc.not_found:
                    raise
                raise ToxiproxyError(
                    f"Toxiproxy at {self.url} has no proxy {self.target!r}; it has: "
                    f"{', '.join(sorted(client.proxies())) or 'none'}"
                ) from None
            # The proxy as it must be once this fault is gone (other faults' toxics kept).
            self.snapshot = replace(
                before, toxics=tuple(t for t in before.toxics if t.name != self.toxic_name)
            )
            started = time.time()
            if self.is_down:
                with _CUTS_LOCK:
                    cut = _CUTS.get(self._key)
                    if cut is None or not cut.holders:
                        cut = _Cut(before.enabled)
                    # Restored by the last of the cuts: what was there before the first.
                    self.snapshot = replace(self.snapshot, enabled=cut.enabled)
                    self.hops_refusing = _announce_cut(self.hop_url, before.listen)
                    client.set_enabled(self.target, False)
                    cut.holders.add(self.toxic_name)
                    _CUTS[self._key] = cut
            else:
                client.add_toxic(
                    self.target,
                    Toxic(
                        self.toxic_name,
                        self.kind.split(".", 1)[1],
                        self.fault.stream,
                        self.fault.toxicity,
                        self.fault.toxic_attributes(),
                    ),
                )
            self.applied = True
            after = client.proxy(self.target)
        landed = (
            (not after.enabled)
            if self.is_down
            else any(t.name == self.toxic_name for t in after.toxics)
        )
        if not landed:
            raise ToxiproxyError(f"{self.kind} on {self.target}: not found when read back")
        return {
            "applied_at": started,
            "confirmed_at": time.time(),
            "proxy": self.target,
            "listen": after.listen,
            "upstream": after.upstream,
            "enabled": after.enabled,
            "toxics": [t.as_json() for t in after.toxics],
            **({"hops_refusing": self.hops_refusing} if self.is_down else {}),
        }

    @property
    def _key(self) -> tuple[str, str]:
        return (self.url, self.target)

    def revert(self) -> dict[str, Any]:
        if not self.applied:
            return {"reverted": False, "reason": "never applied"}
        started = time.time()
        if self.is_down:
            with _CUTS_LOCK:
                cut = _CUTS.get(self._key)
                if cut is not None:
                    cut.holders.discard(self.toxic_name)
                    others = sorted(cut.holders)
                    if others:  # another fault still holds the proxy down: leave it so
                        self.applied = False
                        return {
                            "reverted": True,
                            "started_at": started,
                            "finished_at": time.time(),
                            "method": "still held",
                            "held_by": others,
                        }
                outcome = revert_entry(self.ledger_entry(), self.shared)
                _CUTS.pop(self._key, None)
            if self.hops_refusing:
                outcome["hops_listening"] = _hops_listening(self.hop_url, self.hops_refusing)
        else:
            outcome = revert_entry(self.ledger_entry(), self.shared)
        self.applied = False
        return {"reverted": True, "started_at": started, "finished_at": time.time(), **outcome}


def revert_entry(entry: dict[str, Any], shared: ToxiproxyClient | None = None) -> dict[str, Any]:
    """Revert a fault from its ledger entry (also used to clean up after a crashed run)."""
    snap = entry.get("snapshot")
    snapshot = None
    if snap is not None:
        snapshot = Proxy(
            snap["name"],
            snap["listen"],
            snap["upstream"],
            snap["enabled"],
            tuple(Toxic.from_json(t) for t in snap["toxics"]),
        )
    try:
        with ToxiproxyClient(entry["toxiproxy"]) if shared is None else _borrowed(shared) as client:
            if entry.get("toxic") is None:
                client.set_enabled(entry["target"], True if snapshot is None else snapshot.enabled)
                return {"method": "enabled"}
            method = client.remove_toxic(entry["target"], entry["toxic"], snapshot=snapshot)
            return {"method": method}
    except ToxiproxyError as exc:
        raise RevertError(f"{entry['kind']} on {entry['target']}: {exc}") from exc


@contextmanager
def _borrowed(client: ToxiproxyClient) -> Iterator[ToxiproxyClient]:
    yield client  # not closed: it belongs to the run


def _announce_cut(hop_url: str | None, listen: str) -> list[str]:
    """Tell the hops in front of the proxy listening on ``listen`` that it is about to refuse
    connections; the hops told. A hop that cannot be told is logged, not fatal: the cut still
    lands (its gateway sees dropped connections through that hop instead of refusals)."""
    if hop_url is None:
        return []
    try:
        with HopClient(hop_url) as hop:
            names = hop.fronting(listen)
            for name in names:
                hop.refuse(name)
    except HopError as exc:
        logger.warning("the cut of %s is not announced to the L7 hop: %s", listen, exc)
        return []
    return names


def _hops_listening(hop_url: str | None, names: list[str], wait_s: float = 2.0) -> bool:
    """Whether the hops listen again within ``wait_s`` of the proxy's revert (each reopens on
    its own once the proxy accepts, checking every 50 ms)."""
    if hop_url is None:
        return True
    deadline = time.monotonic() + wait_s
    try:
        with HopClient(hop_url) as hop:
            while any(hop.refusing(name) for name in names):
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
    except HopError as exc:
        logger.warning("the L7 hop's listeners after a cut: %s", exc)
        return False
    return True
