"""Process faults on the embedded stack: kill a component (node loss, OOM kill) or freeze it
(the hung worker), chosen by name from the supervisor's state.

Evidence is read back from the kernel, not assumed: the killed process is gone (its pid no
longer names a live process), a frozen one is in state ``T``. After the run, ``observe`` reads
the supervisor's event log for the replacement (its pid, when it started, when it was healthy
again), which is what the recovery checks measure.

Every pid is checked against its start time before a signal is sent, so a pid reused by an
unrelated process is never touched (by a revert, or by a sweep after a crash).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from drills.common.errors import InjectionFailed, RevertError
from drills.common.system import group_members
from injectors.base import InjectionContext
from stack.state import read_events, read_state

__all__ = ["ProcessInjector", "revert_entry"]


def _stat(pid: int) -> tuple[str, int] | None:
    """``(state, start time in clock ticks)`` of ``pid``, or ``None`` when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[19])


def _same(pid: int, started: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z" and stat[1] == started


class ProcessInjector:
    def __init__(self, fault: Any, context: InjectionContext, index: int) -> None:
        self.fault = fault
        self.kind: str = fault.kind
        self.target: str = fault.target
        self.state_dir: Path | None = context.component_states.get(fault.target, context.state_dir)
        self.victim: dict[str, Any] | None = None
        self.applied_at: float | None = None
        self.thawed = False

    # -- the target ----------------------------------------------------------------------------

    def _component(self) -> dict[str, Any]:

        if self.state_dir is None:
            raise InjectionFailed(
                f"{self.kind} on {self.target!r}: no embedded stack state to find it in "
                "(process faults drive the stack `drills stack up` started; pass --state-dir)"
            )
        state = read_state(self.state_dir)
        if state is None:
            raise InjectionFailed(
                f"{self.kind} on {self.target!r}: no running stack in {self.state_dir}"
            )
        components = state.components
        if self.target not in components:
            raise InjectionFailed(
                f"{self.kind}: the selector {self.target!r} matches no component; the stack has "
                f"{', '.join(sorted(components))}"
            )
        component = components[self.target]
        if component.get("runtime") == "docker":
            raise InjectionFailed(
                f"{self.kind}: {self.target!r} runs in a container; use docker.kill with target "
                f"label:drills.replica={self.target}"
            )
        pid = component.get("pid")
        if not pid or _stat(int(pid)) is None:
            raise InjectionFailed(
                f"{self.kind}: {self.target!r} has no running process to hit (status "
                f"{component.get('status')!r})"
            )
        return component

    def ledger_entry(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "victim": self.victim}

    # -- the fault -----------------------------------------------------------------------------

    def apply(self) -> dict[str, Any]:
        component = self._component()
        pid, pgid = int(component["pid"]), int(component["pgid"])
        stat = _stat(pid)
        assert stat is not None
        members = group_members(pgid)
        self.victim = {"pid": pid, "pgid": pgid, "starttime": stat[1], "members": members}
        self.applied_at = time.time()
        if self.kind == "process.freeze":
            os.killpg(pgid, signal.SIGSTOP)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                states = {m: (_stat(m) or ("gone", 0))[0] for m in members}
                if all(s in ("T", "t", "gone") for s in states.values()):
                    break
                time.sleep(0.01)
            else:
                raise InjectionFailed(f"{self.target} did not stop: states {states}")
            return {
                "applied_at": self.applied_at,
                "pid": pid,
                "pgid": pgid,
                "members": members,
                "states": states,
            }
        sig = signal.Signals[self.fault.signal]
        os.killpg(pgid, sig)
        deadline = time.monotonic() + (self.fault.grace if sig == signal.SIGTERM else 5.0)
        escalated = False
        while _same(pid, stat[1]):
            if time.monotonic() >= deadline:
                if escalated:
                    raise InjectionFailed(f"{self.target} (pid {pid}) survived SIGKILL")
                os.killpg(pgid, signal.SIGKILL)
                escalated = True
                deadline = time.monotonic() + 5.0
            time.sleep(0.01)
        return {
            "applied_at": self.applied_at,
            "pid": pid,
            "pgid": pgid,
            "members": members,
            "signal": sig.name,
            "escalated_to_sigkill": escalated,
            "gone_at": time.time(),
        }

    def revert(self) -> dict[str, Any]:
        if self.kind == "process.kill":
            # Nothing to undo: replacing the process is the stack's job, and what the drill is
            # there to watch (see ``observe``).
            return {"method": "none (the supervisor replaces it)", "finished_at": time.time()}
        outcome = revert_entry(self.ledger_entry())
        self.thawed = True
        return {**outcome, "finished_at": time.time()}

    def observe(self) -> dict[str, Any]:
        """The replacement of a killed (or the recovery of a frozen) component, from the
        supervisor's events after the fault was applied."""

        if self.state_dir is None or self.applied_at is None or self.victim is None:
            return {}
        events = [
            e
            for e in read_events(self.state_dir, component=self.target)
            if e.time >= self.applied_at
        ]
        started = next(
            (e for e in events if e.event == "started" and e.pid != self.victim["pid"]), None
        )
        healthy = next(
            (
                e
                for e in events
                if e.event == "healthy" and (started is None or e.time >= started.time)
            ),
            None,
        )
        if self.kind == "process.kill" and started is None:
            healthy = None
        return {
            "replacement_pid": started.pid if started else None,
            "replacement_started_at": started.time if started else None,
            "ready_at": healthy.time if healthy else None,
            "exits": [e.reason for e in events if e.event == "exited"],
        }

    def replaced_at(self) -> float | None:
        """A killed component: when its replacement (a new pid) was healthy, from the
        supervisor's events so far; a frozen one is never replaced (``None``)."""
        if self.kind != "process.kill":
            return None
        ready = self.observe().get("ready_at")
        return float(ready) if ready is not None else None


def revert_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Thaw a frozen process group; harmless when it is gone, thawed, or its pid was reused."""
    victim = entry.get("victim")
    if entry["kind"] != "process.freeze" or not victim:
        return {"method": "nothing to revert"}
    pid, pgid, started = int(victim["pid"]), int(victim["pgid"]), int(victim["starttime"])
    if not _same(pid, started):
        return {"method": "gone (nothing to thaw)"}
    try:
        os.killpg(pgid, signal.SIGCONT)
    except ProcessLookupError:
        return {"method": "gone (nothing to thaw)"}
    except PermissionError as exc:
        raise RevertError(f"cannot thaw {entry['target']} (pgid {pgid}): {exc}") from None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stat = _stat(pid)
        if stat is None or stat[0] not in ("T", "t"):
            return {"method": "thawed (SIGCONT)", "state": stat[0] if stat else "gone"}
        time.sleep(0.01)
    raise RevertError(f"{entry['target']} (pid {pid}) is still stopped after SIGCONT")
