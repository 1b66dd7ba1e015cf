"""Per-request LLM faults through the harness's L7 hop (``drills.hop``): an HTTP status, a slow
first token, a stall or a cut after N chunks, a malformed chunk, a wedged engine.

Faults are named ``drills-<run id>-<n>`` on the hop, like the Toxiproxy toxics. Evidence is the
fault as the hop lists it after the change; the revert says how many model calls the fault
touched (``hits``), read back from the hop as it removed it. A fault already gone (the hop was
restarted, or an earlier revert removed it) is reverted harmlessly, and says so.
"""

from __future__ import annotations

import time
from typing import Any

from drills.common.errors import HopError, InjectionFailed, RevertError
from drills.common.hop import HopClient
from injectors.base import InjectionContext

__all__ = ["HopInjector", "revert_entry"]

FAULT_PREFIX = "drills-"


class HopInjector:
    def __init__(self, fault: Any, context: InjectionContext, index: int) -> None:
        if context.hop_url is None:
            raise InjectionFailed(
                f"{fault.kind} on {fault.target}: the stack runs no L7 hop (a profile's 'hop:' "
                "section, or 'hop: URL' in the attach section)"
            )
        self.fault = fault
        self.kind: str = fault.kind
        self.target: str = fault.target
        self.url: str = context.hop_url
        self.name = f"{FAULT_PREFIX}{context.run_id}-{index}"
        self.applied = False

    def ledger_entry(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "hop": self.url, "fault": self.name}

    def apply(self) -> dict[str, Any]:
        started = time.time()
        with HopClient(self.url) as client:
            client.add_fault(self.target, self.name, self.fault.rule())
            self.applied = True
            listed = [f for f in client.faults(self.target) if f["name"] == self.name]
        if not listed:
            raise InjectionFailed(f"{self.kind} on {self.target}: not found when read back")
        return {"applied_at": started, "confirmed_at": time.time(), "hop": self.url, **listed[0]}

    def revert(self) -> dict[str, Any]:
        if not self.applied:
            return {"reverted": False, "reason": "never applied"}
        started = time.time()
        outcome = revert_entry(self.ledger_entry())
        self.applied = False
        return {"reverted": True, "started_at": started, "finished_at": time.time(), **outcome}


def revert_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Remove the fault named in a ledger entry (also after a crashed run)."""
    try:
        with HopClient(entry["hop"]) as client:
            removed = client.remove_fault(entry["target"], entry["fault"])
    except HopError as exc:
        raise RevertError(f"{entry['kind']} on {entry['target']}: {exc}") from exc
    if removed is None:
        return {"method": "already gone"}
    return {"method": "removed", "hits": removed.get("hits", 0)}
