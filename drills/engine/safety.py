"""Safety: what drills may touch, how much at once, and the kill switch.

One file says what any drill on this machine may do (``SafetyPolicy``): the hosts load and fault
APIs may be pointed at, the hops and fault kinds allowed, the blast radius (faults at once, hops
hit, users, durations). ``check_scenario`` measures a scenario against it before anything is
applied and raises ``SafetyViolation`` (exit code 2) naming each excess; nothing has been touched
when it does.

The policy file is ``--safety FILE``, else ``$DRILLS_SAFETY``, else ``drills-safety.yaml`` in the
working directory, else the defaults below (loopback only, modest limits).

The kill switch: every running drill registers itself under ``<state home>/runs``; ``drills
abort`` writes who asked and why beside that entry and sends the run SIGUSR1, which makes it
revert every fault at once and stop with status ``aborted``.

One drill at a time: a run registers with its claims (the stack it drills: its Toxiproxy,
gateway, L7 hop and state directory; and what it faults outside them), and a run whose claims
meet a live run's is refused before anything is touched (``RunConflict``, exit code 2). A
crashed run's claims go with its process (its faults are the ledger's sweep's to revert).
"""

from __future__ import annotations

import fcntl
import fnmatch
import getpass
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from drills.common.errors import (
    ConfigError,
    InputError,
    KillSwitch,
    RunConflict,
    SafetyViolation,
)
from drills.common.redact import redact_url
from drills.common.system import pid_alive, start_time, state_home
from drills.common.units import Duration, format_duration
from drills.common.yamlsrc import YamlDocument, format_path, load_model
from drills.model.faults import KubernetesFault, ToolSaturateFault

__all__ = [
    "FaultWindow",
    "SafetyPolicy",
    "active_runs",
    "check_scenario",
    "fault_windows",
    "kubernetes_scope",
    "load_policy",
    "register_run",
    "request_abort",
]

logger = logging.getLogger(__name__)

LOOPBACK = ["127.0.0.1", "localhost", "::1"]


class SafetyPolicy(BaseModel):
    """Limits checked before any drill touches anything. Patterns are shell globs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allowed_hosts: list[str] = Field(default_factory=lambda: list(LOOPBACK))
    """Hosts a drill may send load to or drive faults on (gateway, Toxiproxy, metrics)."""
    allowed_targets: list[str] = Field(default_factory=lambda: ["*"])
    """Hops (Toxiproxy proxy names) faults may target."""
    protected_targets: list[str] = Field(default_factory=list)
    """Hops never to be touched, whatever ``allowed_targets`` says."""
    allowed_kinds: list[str] = Field(default_factory=lambda: ["*"])
    """Fault kinds allowed (``toxiproxy.*``, ``toxiproxy.latency``, ...)."""
    max_faults_at_once: int = Field(default=4, ge=0)
    max_targets: int = Field(default=4, ge=0)
    """Distinct hops one drill may fault."""
    max_fault_duration: Duration = 600.0
    max_drill_duration: Duration = 3600.0
    fault_grace: Duration = 30.0
    """How long past its scheduled end a fault may stay in force before the run's watchdog
    reverts it, even while its runner lives (a runner stuck in a hung call)."""
    max_users: int = Field(default=32, ge=1)
    """The most requests a load may hold at once: its users, or an open-loop load's
    ``max_in_flight``."""
    max_rate: float = Field(default=100.0, gt=0)
    """Requests per second an open-loop load (``load.rate``) may send."""
    max_pods: int = Field(default=10, ge=0)
    """Pods one Kubernetes fault may delete."""
    max_containers: int = Field(default=10, ge=0)
    """Containers one docker fault may hit."""
    max_tool_concurrency: int = Field(default=256, ge=0)
    """Concurrent calls one ``tool.saturate`` flood may keep in flight."""
    kubernetes_namespaces: list[str] = Field(default_factory=list)
    """If set, Kubernetes namespaces drills may touch (beyond what each scenario allows)."""
    kubernetes_contexts: list[str] = Field(default_factory=list)
    """If set, kubeconfig contexts drills may use (beyond what each scenario allows)."""

    _source: str = PrivateAttr(default="built-in defaults")

    @property
    def source(self) -> str:
        """Where the policy came from (a file, or the built-in defaults)."""
        return self._source


def load_policy(path: Path | None = None) -> SafetyPolicy:
    """The policy from ``path``, ``$DRILLS_SAFETY``, ``./drills-safety.yaml`` or the defaults."""
    env = os.environ.get("DRILLS_SAFETY")
    candidate = path or (Path(env) if env else None)
    if candidate is None and Path("drills-safety.yaml").exists():
        candidate = Path("drills-safety.yaml")
    if candidate is None:
        return SafetyPolicy()
    if not candidate.exists():
        raise ConfigError([f"{candidate}: no such safety policy file"])
    policy = load_model(SafetyPolicy, candidate)
    policy._source = str(candidate)
    return policy


@dataclass(frozen=True)
class FaultWindow:
    """One fault of a scenario with its absolute offsets from the drill's start."""

    phase: int
    index: int
    kind: str
    target: str
    start: float
    end: float
    loc: tuple[str | int, ...]


def fault_windows(scenario: Any) -> list[FaultWindow]:
    """Every fault of ``scenario`` placed on the drill's timeline."""
    windows, offset = [], 0.0
    for i, phase in enumerate(scenario.phases):
        for j, fault in enumerate(phase.inject):
            start = offset + fault.at
            end = start + fault.for_ if fault.for_ is not None else offset + phase.duration
            windows.append(
                FaultWindow(i, j, fault.kind, fault.target, start, end, ("phases", i, "inject", j))
            )
        offset += phase.duration
    return windows


def _most_at_once(windows: list[FaultWindow]) -> int:
    edges = sorted([(w.start, 1) for w in windows] + [(w.end, -1) for w in windows])
    current = peak = 0
    for _, step in edges:  # ends sort before starts at the same instant
        current += step
        peak = max(peak, current)
    return peak


def _matches(value: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(value, p) for p in patterns)


def check_scenario(
    scenario: Any,
    doc: YamlDocument | None,
    policy: SafetyPolicy,
    urls: dict[str, str] | None = None,
) -> None:
    """Raise ``SafetyViolation`` if ``scenario`` (aimed at ``urls``: what it would contact)
    exceeds ``policy``: every rule is read (the hosts, each fault's window, each fault's own
    limits, the drill's size) before anything is applied, and every problem is named."""

    def where(loc: tuple[str | int, ...]) -> str:
        return f"{doc.path}:{doc.line_of(loc)} " if doc else ""

    windows = fault_windows(scenario)
    problems = [
        *_host_problems(urls or {}, policy),
        *_window_problems(windows, policy, where),
        *_fault_problems(scenario, policy, where),
        *_size_problems(scenario, windows, policy, where),
    ]
    if problems:
        raise SafetyViolation(problems)


_Where = Callable[[tuple[str | int, ...]], str]


def _host_problems(urls: dict[str, str], policy: SafetyPolicy) -> list[str]:
    """Every URL the drill would contact is on an allowed host."""
    problems: list[str] = []
    for name, url in (urls or {}).items():
        host = urlsplit(url).hostname or ""
        if not _matches(host, policy.allowed_hosts):
            problems.append(
                f"{name} {_redact_url(url)}: host {host!r} is not allowed; allowed_hosts: "
                f"{', '.join(policy.allowed_hosts)} ({policy.source})"
            )
    return problems


def _window_problems(windows: list[FaultWindow], policy: SafetyPolicy, where: _Where) -> list[str]:
    """Each fault on an allowed target, of an allowed kind, no longer than allowed."""
    problems: list[str] = []
    for w in windows:
        field = format_path(w.loc)
        if not _matches(w.target, policy.allowed_targets) or _matches(
            w.target, policy.protected_targets
        ):
            problems.append(
                f"{where((*w.loc, 'target'))}{field}.target: {w.target!r} is not an allowed "
                f"target; allowed_targets: {', '.join(policy.allowed_targets)}"
                + (
                    f", protected: {', '.join(policy.protected_targets)}"
                    if policy.protected_targets
                    else ""
                )
            )
        if not _matches(w.kind, policy.allowed_kinds):
            problems.append(
                f"{where((*w.loc, 'kind'))}{field}.kind: {w.kind!r} is not an allowed fault "
                f"kind; allowed_kinds: {', '.join(policy.allowed_kinds)}"
            )
        if w.end - w.start > policy.max_fault_duration:
            problems.append(
                f"{where(w.loc)}{field}: lasts {format_duration(w.end - w.start)}; "
                f"max_fault_duration is {format_duration(policy.max_fault_duration)}"
            )
    return problems


def _fault_problems(scenario: Any, policy: SafetyPolicy, where: _Where) -> list[str]:
    """Each fault's own limits: a Docker daemon's host, a tool flood's concurrency, a
    Kubernetes fault's namespace and the contexts the drill allows."""
    problems: list[str] = []
    scope = getattr(scenario, "kubernetes", None)
    for i, phase in enumerate(scenario.phases):
        for j, fault in enumerate(phase.inject):
            at = fault.daemon
            daemon = urlsplit(at).hostname if at and not at.startswith("unix:") else None
            if daemon is not None and not _matches(daemon, policy.allowed_hosts):
                loc = ("phases", i, "inject", j, "host")
                problems.append(
                    f"{where(loc)}{format_path(loc)}: Docker at {_redact_url(at or '')}: host "
                    f"{daemon!r} is not allowed; allowed_hosts: "
                    f"{', '.join(policy.allowed_hosts)} ({policy.source})"
                )
            flood = isinstance(fault, ToolSaturateFault)
            if flood and fault.concurrency > policy.max_tool_concurrency:
                loc = ("phases", i, "inject", j, "concurrency")
                problems.append(
                    f"{where(loc)}{format_path(loc)}: a flood of {fault.concurrency} concurrent "
                    f"calls; max_tool_concurrency is {policy.max_tool_concurrency}"
                )
            if not isinstance(fault, KubernetesFault):
                continue
            loc = ("phases", i, "inject", j, "namespace")
            if policy.kubernetes_namespaces and fault.namespace not in policy.kubernetes_namespaces:
                problems.append(
                    f"{where(loc)}{format_path(loc)}: namespace {fault.namespace!r} is not allowed "
                    f"by the safety policy; kubernetes_namespaces: "
                    f"{', '.join(policy.kubernetes_namespaces)}"
                )
            if (
                scope is not None
                and policy.kubernetes_contexts
                and not set(scope.allowed_contexts) & set(policy.kubernetes_contexts)
            ):
                problems.append(
                    f"{where(('kubernetes', 'allowed_contexts'))}kubernetes.allowed_contexts: "
                    "none of them is allowed by the safety policy; kubernetes_contexts: "
                    f"{', '.join(policy.kubernetes_contexts)}"
                )
    return problems


def _size_problems(
    scenario: Any, windows: list[FaultWindow], policy: SafetyPolicy, where: _Where
) -> list[str]:
    """The drill's size: faults at once, hops hit, users, rate and length."""
    problems: list[str] = []
    at_once = _most_at_once(windows)
    if at_once > policy.max_faults_at_once:
        problems.append(
            f"{where(('phases',))}phases: {at_once} faults would be active at once; "
            f"max_faults_at_once is {policy.max_faults_at_once}"
        )
    targets = sorted({w.target for w in windows})
    if len(targets) > policy.max_targets:
        problems.append(
            f"{where(('phases',))}phases: faults hit {len(targets)} hops ({', '.join(targets)}); "
            f"max_targets is {policy.max_targets}"
        )
    load = scenario.load
    if load.concurrency > policy.max_users:
        # An open-loop load's bound on what it holds at once is its max_in_flight.
        field, what = (
            ("users", "users") if load.users is not None else ("max_in_flight", "in flight")
        )
        problems.append(
            f"{where(('load', field))}load.{field}: {load.concurrency} {what}; max_users is "
            f"{policy.max_users}"
        )
    if load.rate is not None and load.rate > policy.max_rate:
        problems.append(
            f"{where(('load', 'rate'))}load.rate: {load.rate:g} requests/s; max_rate is "
            f"{policy.max_rate:g}"
        )
    total = scenario.duration + scenario.load.warmup
    if total > policy.max_drill_duration:
        problems.append(
            f"{where(('phases',))}phases: the drill lasts {format_duration(total)} with its "
            f"warm-up; max_drill_duration is {format_duration(policy.max_drill_duration)}"
        )
    return problems


def kubernetes_scope(
    scenario: Any, doc: YamlDocument | None, policy: SafetyPolicy
) -> dict[str, Any] | None:
    """The Kubernetes scope injectors get: the kubeconfig (relative to the scenario file), and
    the namespaces and contexts allowed by both the scenario and the policy."""
    scope = getattr(scenario, "kubernetes", None)
    if scope is None:
        return None
    kubeconfig = scope.kubeconfig
    if kubeconfig and doc is not None and not Path(kubeconfig).is_absolute():
        kubeconfig = str(doc.path.parent / kubeconfig)
    contexts = [
        c
        for c in scope.allowed_contexts
        if not policy.kubernetes_contexts or c in policy.kubernetes_contexts
    ]
    namespaces = [
        n
        for n in scope.allowed_namespaces
        if not policy.kubernetes_namespaces or n in policy.kubernetes_namespaces
    ]
    return {
        "kubeconfig": kubeconfig,
        "context": scope.context,
        "allowed_contexts": contexts,
        "allowed_namespaces": namespaces,
    }


def _redact_url(url: str) -> str:

    return redact_url(url)


# -- the kill switch -------------------------------------------------------------------------


def runs_dir() -> Path:
    path = state_home() / "runs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _holding(claims: Sequence[str]) -> list[tuple[dict[str, Any], list[str]]]:
    """The live runs of other processes that hold any of ``claims``, with what they hold."""
    wanted = set(claims)
    found = []
    for run in active_runs():
        if int(run["pid"]) == os.getpid():
            continue  # a game day's drills, a drill's twins: one process, one holder
        shared = sorted(wanted & set(run.get("claims") or []))
        if shared:
            found.append((run, shared))
    return found


def _refusal(holders: list[tuple[dict[str, Any], list[str]]]) -> str:
    lines = []
    for run, shared in holders:
        age = time.time() - float(run.get("started_at") or time.time())
        lines.append(
            f"{run.get('what', 'a run')} (run {run['run_id']}, pid {run['pid']}, started "
            f"{age:.0f}s ago) holds {', '.join(shared)}"
        )
    first = holders[0][0]["run_id"]
    return (
        "another drill is running on what this one would drill (one drill at a time; nothing "
        "was applied):\n  "
        + "\n  ".join(lines)
        + "\n  see it with `drills faults`; wait for it to end, or stop it with "
        f"`drills abort {first}`"
    )


@contextmanager
def register_run(
    run_id: str, what: str, run_dir: Path, claims: Sequence[str] = ()
) -> Iterator[Path]:
    """Make this process findable by ``drills abort`` while the block runs, holding
    ``claims``; SIGUSR1 raises ``KillSwitch``. Yields the path where an abort request would be
    written. Raises ``RunConflict`` (nothing registered) when a live run of another process
    holds any of ``claims``."""
    entry = runs_dir() / f"{run_id}.json"
    request = entry.with_suffix(".abort")
    record = {
        "run_id": run_id,
        "pid": os.getpid(),
        "starttime": start_time(os.getpid()),
        "what": what,
        "run_dir": str(run_dir),
        "started_at": time.time(),
        "claims": sorted(set(claims)),
    }
    # The check and the entry under one lock: two drills started at once cannot both pass.
    with open(runs_dir() / ".claims.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        holders = _holding(claims)
        if holders:
            raise RunConflict(_refusal(holders), holders=[r["run_id"] for r, _ in holders])
        tmp = entry.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(entry)

    def handler(signum: int, frame: object) -> None:
        raise KillSwitch(abort_request(request).get("reason") or "drills abort")

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        yield request
    finally:
        signal.signal(signal.SIGUSR1, previous)
        entry.unlink(missing_ok=True)
        request.unlink(missing_ok=True)


def abort_request(path: Path) -> dict[str, Any]:
    """Who asked to abort, and why (empty when nobody did)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def active_runs() -> list[dict[str, Any]]:
    """Registered runs whose process is alive (stale entries of dead runs are removed)."""
    runs = []
    for entry in sorted(runs_dir().glob("*.json")):
        try:
            data = json.loads(entry.read_text())
        except (OSError, ValueError):
            continue
        pid = int(data.get("pid", 0))
        started = data.get("starttime")
        if pid_alive(pid) and (started is None or start_time(pid) == started):
            runs.append(data)
        else:
            entry.unlink(missing_ok=True)
    return runs


def request_abort(run_id: str | None, reason: str) -> list[dict[str, Any]]:
    """Ask one run (or, with ``run_id=None``, every active run) to revert and stop."""
    runs = [r for r in active_runs() if run_id is None or r["run_id"] == run_id]
    if run_id is not None and not runs:
        known = ", ".join(r["run_id"] for r in active_runs()) or "none"
        raise InputError(f"no active run {run_id!r}; active runs: {known}")
    by = f"{getpass.getuser()}@{socket.gethostname()}"
    for run in runs:
        (runs_dir() / f"{run['run_id']}.abort").write_text(
            json.dumps({"by": by, "reason": reason, "at": time.time()})
        )
        try:
            os.kill(int(run["pid"]), signal.SIGUSR1)
        except ProcessLookupError:
            continue
    return runs
