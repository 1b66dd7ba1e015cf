"""Another profile's gateway beside a running stack: the twin of a drill without a second
start-up.

A drill's twin (``Scenario.twins``) is often the same engines behind a gateway configured
unsoundly (``unsound``: no breakers, no fallback; ``unsound-single``: one replica, no fallback).
Bringing that profile up would stop the running stack and start every engine again (about a
minute each on a CPU). When the twin's profile differs from the running stack only in its
gateway and in which of the stack's upstreams it routes to, its gateway is started here instead,
as its own process on a free port, in front of the running stack's hops: what the client sees is
what that profile's stack would show it. ``refusal`` says when that does not hold.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from drills.common.errors import StackError
from drills.common.ports import free_port
from stack.config import StackConfig, load_stack_config, profile_path

__all__ = ["gateway_beside", "refusal"]

READY_TIMEOUT = 30.0
STOP_GRACE = 15.0
"""Seconds the supervisor gets to stop (it gives the gateway 10 of them)."""


def refusal(running: StackConfig, twin: StackConfig) -> str | None:
    """Why ``twin``'s gateway cannot stand in for ``twin``'s whole stack beside ``running``
    (``None``: it can)."""
    if (twin.engine.model, twin.engine.served_name) != (
        running.engine.model,
        running.engine.served_name,
    ):
        return f"it serves another model ({twin.engine.model}) than the running stack"
    names = {r.name: r for r in running.replicas}
    for replica in twin.replicas:
        if replica.name not in names:
            return f"it has a replica {replica.name!r} the running stack does not"
    if twin.backup is not None and (
        running.backup is None
        or (running.backup.name, running.backup.served_name)
        != (twin.backup.name, twin.backup.served_name)
    ):
        return f"its backup model {twin.backup.name!r} is not the running stack's"
    if twin.canary is not None and (
        running.canary is None
        or (running.canary.name, running.canary.engine) != (twin.canary.name, twin.canary.engine)
    ):
        return f"its canary hop {twin.canary.name!r} is not the running stack's"
    return None


def _config(running_file: Path, twin_file: Path, twin: StackConfig, port: int) -> dict[str, Any]:
    """The running stack's config with the twin's gateway (on ``port``) and only the
    upstreams the twin has. The RAG hops are the running stack's: it was started with the
    parts the drill needs (``drills.engine.parts``)."""
    data: dict[str, Any] = yaml.safe_load(running_file.read_text())
    theirs: dict[str, Any] = yaml.safe_load(twin_file.read_text())
    keep = {r.name for r in twin.replicas}
    data["name"] = twin.name
    data["gateway"] = {**theirs["gateway"], "port": port}
    data["gateway"].pop("bind", None)
    data["replicas"] = [r for r in data["replicas"] if r["name"] in keep]
    if twin.backup is None:
        data.pop("backup", None)
    if twin.canary is None:
        data.pop("canary", None)
    return data


@contextlib.contextmanager
def gateway_beside(running_file: Path, twin_profile: str, workdir: Path) -> Iterator[str]:
    """Run ``twin_profile``'s gateway in front of the hops of the stack whose config is
    ``running_file``; yield its URL; stop it (its process group) on the way out."""
    running = load_stack_config(running_file)
    twin_file = profile_path(twin_profile)
    twin = load_stack_config(twin_file)
    why = refusal(running, twin)
    if why is not None:
        raise StackError(f"profile {twin.name!r} cannot run beside {running.name!r}: {why}")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port(running.host)
    config = workdir / "stack.yaml"
    config.write_text(yaml.safe_dump(_config(running_file, twin_file, twin, port), sort_keys=False))
    load_stack_config(config)  # what the gateway will read is valid, or this says where not
    url = f"http://{running.host}:{port}"
    # Under a supervisor of its own (``--only-gateway``), as the stack's gateway is under the
    # stack's: a drill that kills it sees it restarted, with the events in workdir. It stops
    # with this process (``--with-parent``: its parent-death signal), even when this one is
    # killed with SIGKILL and never reaches ``_stop``.
    argv = [sys.executable, "-m", "stack.supervisor", "--config", str(config)]
    argv += ["--state-dir", str(workdir), "--only-gateway", "--with-parent", str(os.getpid())]
    with (workdir / "supervisor.log").open("ab") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_ready(url, process, workdir)
        yield url
    finally:
        _stop(process)


def _wait_ready(url: str, process: subprocess.Popen[bytes], workdir: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StackError(
                f"the twin's gateway's supervisor exited with {process.returncode}: "
                + _tail(workdir)
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise StackError(
        f"the twin's gateway at {url} was not ready within {READY_TIMEOUT:.0f}s: " + _tail(workdir)
    )


def _tail(workdir: Path) -> str:
    logs = [workdir / "logs" / "gateway.log", workdir / "supervisor.log"]
    return " | ".join(log.read_text(errors="replace")[-1500:] for log in logs if log.exists())


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to its process group (the supervisor stops the gateway), SIGKILL after the
    grace period (the gateway then gets its parent-death signal)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_GRACE)
