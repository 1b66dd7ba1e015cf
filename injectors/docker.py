"""Container faults through the Docker Engine API: kill, stop, restart, pause, cut off the
network; containers chosen by name or by labels.

Evidence is each hit container as the daemon reports it afterwards (not running, paused, no
longer on the network). After the run ``observe`` reports how each came back: restarted by its
restart policy (a new start time and restart count) or replaced by another container matching
the same selector (a new id), and when it was running and, if it has a health check, healthy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from datetime import datetime
from typing import Any

from drills.common.docker import DockerClient, DockerError
from drills.common.errors import InjectionFailed, InputError, RevertError, SafetyViolation
from injectors.base import InjectionContext

__all__ = ["DockerInjector", "revert_entry"]


def _epoch(stamp: str | None) -> float | None:
    """Docker's RFC 3339 time (nanoseconds, ``Z``) as epoch seconds; ``None`` for the zero time."""
    if not stamp or stamp.startswith("0001-"):
        return None
    head, _, frac = stamp.rstrip("Z").partition(".")
    base = datetime.fromisoformat(head + "+00:00").timestamp()
    return base + (float("0." + frac[:9]) if frac else 0.0)


def _brief(info: dict[str, Any]) -> dict[str, Any]:
    state = info.get("State", {})
    return {
        "id": info["Id"][:12],
        "name": info.get("Name", "").lstrip("/"),
        "status": state.get("Status"),
        "running": state.get("Running"),
        "paused": state.get("Paused"),
        "pid": state.get("Pid"),
        "started_at": _epoch(state.get("StartedAt")),
        "restart_count": info.get("RestartCount", 0),
        "health": (state.get("Health") or {}).get("Status"),
        "networks": sorted((info.get("NetworkSettings") or {}).get("Networks") or {}),
    }


class DockerInjector:
    def __init__(self, fault: Any, context: InjectionContext, index: int) -> None:
        self.fault = fault
        self.kind: str = fault.kind
        self.target: str = fault.target
        self.host: str | None = fault.host
        self.max_containers = context.max_containers
        self.victims: list[dict[str, Any]] = []
        self.applied_at: float | None = None
        self.healthy: dict[str, list[float]] = {}
        """``health_status: healthy`` times per container id (the victims and their
        replacements), watched live from the fault's start (``_watch_health``)."""
        self._watches: list[tuple[DockerClient, Any, threading.Thread]] = []

    def ledger_entry(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "host": self.host,
            "victims": self.victims,
        }

    def _select(self, docker: DockerClient) -> list[dict[str, Any]]:
        name, labels = self.fault.selector
        found = docker.containers(name=name, labels=labels)
        running = [c for c in found if c.get("State") == "running"]
        if not running:
            states = ", ".join(f"{c['Names'][0].lstrip('/')} ({c['State']})" for c in found)
            raise InjectionFailed(
                f"{self.kind}: the selector {self.target!r} matches no running container"
                + (f" (matched, not running: {states})" if states else "")
            )
        chosen = running[:1] if self.fault.mode == "one" else running
        if len(chosen) > self.max_containers:
            raise SafetyViolation(
                [
                    f"{self.kind}: would hit {len(chosen)} containers of {self.target!r}; the "
                    f"safety policy's max_containers is {self.max_containers}"
                ]
            )
        return chosen

    def preflight(self) -> dict[str, Any]:
        """The daemon and the containers the fault would hit, read before anything is applied.
        A daemon that cannot be reached, or a selector that matches no running container, is
        bad input: the drill is refused untouched."""
        try:
            with DockerClient(self.host) as docker:
                chosen = self._select(docker)
                return {
                    "host": docker.host,
                    "api_version": docker.api_version,
                    "containers": [_brief(docker.inspect(c["Id"])) for c in chosen],
                }
        except DockerError as exc:
            if exc.status_code is not None:
                raise
            raise InputError(
                f"{exc}; give the fault a 'host' of a running daemon, or set DOCKER_HOST or "
                "DOCKER_CONTEXT"
            ) from None
        except InjectionFailed as exc:
            raise InputError(str(exc)) from None

    def apply(self) -> dict[str, Any]:
        with DockerClient(self.host) as docker:
            chosen = self._select(docker)
            self.applied_at = time.time()
            if self.kind in ("docker.kill", "docker.stop", "docker.restart"):
                self._watch_health()
            hit = []
            for container in chosen:
                info = docker.inspect(container["Id"])
                before = _brief(info)
                networks = (info.get("NetworkSettings") or {}).get("Networks") or {}
                cut = [self.fault.network] if self.fault.network else sorted(networks)
                self.victims.append(
                    {
                        "id": info["Id"],
                        "name": before["name"],
                        "started_at": before["started_at"],
                        "restart_count": before["restart_count"],
                        "networks": {n: networks.get(n) for n in cut},
                    }
                )
                self._act(docker, info["Id"], cut)
                hit.append({"before": before, "after": self._landed(docker, info["Id"], before)})
        return {"applied_at": self.applied_at, "containers": hit}

    def _watch_health(self) -> None:
        """Record the health events of the selector's containers live from now on: the
        victims, and a replacement with a new id (same name or labels). Asking the daemon for
        them after the run is not enough: it keeps only its last 256 events, and a health check
        every second (three exec events each) pushed a replacement's "healthy" out of that
        history before the drill ended (measured in CI: gone by 3 s, 256 events kept)."""
        assert self.applied_at is not None
        name, labels = self.fault.selector
        client = DockerClient(self.host)
        try:
            stream = client.watch_events(self.applied_at, "health_status", name=name, labels=labels)
        except DockerError:
            client.close()
            return  # observe() still asks the daemon's history

        def read() -> None:
            with contextlib.suppress(Exception):  # the stream ends when observe() closes it
                for event in stream:
                    if event.get("status", event.get("Action", "")) == "health_status: healthy":
                        cid = event.get("id") or event["Actor"]["ID"]
                        at = event.get("timeNano", event["time"] * 1e9) / 1e9
                        self.healthy.setdefault(cid, []).append(at)

        thread = threading.Thread(target=read, name=f"docker-health-{self.target}", daemon=True)
        thread.start()
        self._watches.append((client, stream, thread))

    def _stop_watches(self) -> None:
        for client, stream, thread in self._watches:
            with contextlib.suppress(Exception):
                stream.close()
            thread.join(timeout=5)
            client.close()
        self._watches = []

    def _act(self, docker: DockerClient, cid: str, networks: list[str]) -> None:
        if self.kind == "docker.kill":
            self.victims[-1]["method"] = self._kill(docker, cid)
        elif self.kind == "docker.stop":
            docker.stop(cid, self.fault.grace)
        elif self.kind == "docker.restart":
            docker.restart(cid, self.fault.grace)
        elif self.kind == "docker.pause":
            docker.pause(cid)
        else:
            if not networks:
                raise InjectionFailed(f"{self.kind}: {cid[:12]} is on no network to cut")
            for network in networks:
                docker.disconnect(network, cid)

    def _kill(self, docker: DockerClient, cid: str) -> str:
        """Kill the container's main process the way a crash or the OOM killer does: a signal
        from outside. (Docker counts a kill through its API as a manual stop, after which
        restart policies do not apply: a drill of "the engine died" would then measure
        nothing.) Through the API only when the daemon is remote."""
        pid = int(docker.inspect(cid)["State"].get("Pid") or 0)
        local = docker.host.startswith("unix://") and pid > 0 and os.path.exists(f"/proc/{pid}")
        if local:
            os.kill(pid, signal.Signals[self.fault.signal])
            return f"{self.fault.signal} to the container's main process (pid {pid})"
        docker.kill(cid, self.fault.signal)
        return f"{self.fault.signal} through the Docker API (a manual stop for restart policies)"

    def _landed(self, docker: DockerClient, cid: str, before: dict[str, Any]) -> dict[str, Any]:
        """The container as the daemon reports it once the fault is in place."""
        deadline = time.monotonic() + 10
        while True:
            now = _brief(docker.inspect(cid))
            if self.kind == "docker.pause":
                done = bool(now["paused"])
            elif self.kind == "docker.disconnect":
                done = not set(self.victims[-1]["networks"]) & set(now["networks"])
            elif self.kind == "docker.restart":
                done = bool(now["running"]) and now["started_at"] != before["started_at"]
            else:
                # Stopped, or already brought back by its restart policy (a new start).
                done = not now["running"] or now["started_at"] != before["started_at"]
            if done:
                return now
            if time.monotonic() > deadline:
                raise InjectionFailed(f"{self.kind} on {before['name']}: did not land; now {now}")
            time.sleep(0.05)

    def revert(self) -> dict[str, Any]:
        return {**revert_entry(self.ledger_entry()), "finished_at": time.time()}

    def _healthy_at(self, docker: DockerClient, back: dict[str, Any]) -> float | None:
        """When the container that came back (the victim restarted in place, or a
        replacement) was first healthy: from the live watch, else from the daemon's event
        history (a watch that could not be opened)."""
        assert self.applied_at is not None
        since = back["started_at"] or self.applied_at
        for cid, times in self.healthy.items():
            watched = [t for t in times if t >= since - 1]
            if cid.startswith(back["id"]) and watched:
                return min(watched)
        events = docker.events(self.applied_at, time.time(), back["id"])
        healthy = [
            e.get("timeNano", e["time"] * 1e9) / 1e9
            for e in events
            if e.get("status", e.get("Action", "")) == "health_status: healthy"
        ]
        return float(healthy[0]) if healthy else None

    def replaced_at(self) -> float | None:
        """During the run, from the live health watch alone (no call to the daemon): when
        every killed container was healthy again, restarted in place (its own id) or replaced
        (another container of the selection). ``None`` until then, and always for a container
        without a health check or when the watch could not be opened: the phase then runs its
        full duration."""
        if self.applied_at is None or not self._watches or not self.victims:
            return None
        since = self.applied_at
        seen: dict[str, float] = {}
        for cid, times in list(self.healthy.items()):
            after = [t for t in times if t >= since]
            if after:
                seen[cid] = min(after)
        readies: list[float] = []
        others = sorted(
            t for cid, t in seen.items() if not any(cid.startswith(v["id"]) for v in self.victims)
        )
        for victim in self.victims:
            own = [t for cid, t in seen.items() if cid.startswith(victim["id"])]
            if own:
                readies.append(min(own))
            elif others:
                readies.append(others.pop(0))
            else:
                return None
        return max(readies)

    def observe(self) -> dict[str, Any]:
        """How each hit container came back: restarted in place, or replaced by a new one."""
        if self.applied_at is None:
            return {}
        # A last moment for a "healthy" the watch has not read yet, then the watch stops.
        time.sleep(0.2)
        self._stop_watches()
        out = []
        with DockerClient(self.host) as docker:
            for victim in self.victims:
                try:
                    now = _brief(docker.inspect(victim["id"]))
                except DockerError:
                    now = None
                back: dict[str, Any] | None = None
                if now and now["running"] and (now["started_at"] or 0) > self.applied_at:
                    back = now
                if back is None:
                    name, labels = self.fault.selector
                    for c in docker.containers(name=name, labels=labels):
                        if c["Id"] != victim["id"] and c["Created"] >= self.applied_at - 1:
                            info = _brief(docker.inspect(c["Id"]))
                            if info["running"]:
                                back = info
                if back is None:
                    out.append({"victim": victim["name"], "replacement": None, "ready_at": None})
                    continue
                ready = back["started_at"]
                if back["health"] is not None:
                    ready = self._healthy_at(docker, back)
                out.append(
                    {
                        "victim": victim["name"],
                        "replacement": back["id"],
                        "replacement_started_at": back["started_at"],
                        "restart_count": back["restart_count"],
                        "ready_at": ready,
                    }
                )
        readies = [o["ready_at"] for o in out]
        return {
            "containers": out,
            "ready_at": max(readies) if readies and None not in readies else None,
        }


def revert_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Undo a container fault from its ledger entry; harmless when there is nothing to undo."""
    kind = entry["kind"]
    victims = entry.get("victims") or []
    if kind in ("docker.kill", "docker.restart") or not victims:
        return {"method": "none (restarting it is the orchestrator's job)"}
    done = []
    try:
        with DockerClient(entry.get("host")) as docker:
            for victim in victims:
                try:
                    info = _brief(docker.inspect(victim["id"]))
                except DockerError:
                    done.append(f"{victim['name']}: gone")
                    continue
                if kind == "docker.pause" and info["paused"]:
                    docker.unpause(victim["id"])
                    done.append(f"{victim['name']}: unpaused")
                elif kind == "docker.stop" and not info["running"]:
                    docker.start(victim["id"])
                    done.append(f"{victim['name']}: started")
                elif kind == "docker.disconnect":
                    for network, endpoint in victim["networks"].items():
                        if network not in info["networks"]:
                            docker.connect(network, victim["id"], endpoint)
                            done.append(f"{victim['name']}: reconnected to {network}")
    except DockerError as exc:
        raise RevertError(f"{kind} on {entry['target']}: {exc}") from None
    return {"method": "; ".join(done) or "nothing left to undo"}
