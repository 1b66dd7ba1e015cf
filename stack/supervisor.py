"""The stack's supervisor: starts every component, watches it, restarts it when it dies.

Run detached by ``drills stack up`` as ``python -m stack.supervisor --config FILE --state-dir DIR``.
Restarts follow a Kubernetes Deployment's CrashLoopBackOff: the delay starts at
``supervisor.initial_delay``, doubles on each restart up to ``max_delay``, and resets once the
component has been healthy for ``reset_after``. Every event is appended to ``events.jsonl`` and
the current picture is kept in ``state.json`` (see ``stack.state``).

Each component runs in its own process group so that stopping it also stops what it spawned
(vLLM runs its engine core in a child process). SIGTERM or SIGINT stops everything: SIGTERM to
each group, SIGKILL after a grace period.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx

from stack.components import ComponentSpec, component_specs, gateway_spec
from stack.config import StackConfig, load_stack_config
from stack.rag.clients import TritonEmbedder, make_store
from stack.rag.corpus import load_corpus, seed
from stack.state import write_json

__all__ = ["Supervisor"]

logger = logging.getLogger(__name__)

STOP_GRACE = 10.0
POLL_INTERVAL = 0.5
EXIT_GRACE = 1.0  # seconds a process whose health check failed gets to be reaped


@dataclass
class Running:
    spec: ComponentSpec
    process: subprocess.Popen[bytes] | None = None
    status: str = "pending"
    restarts: int = 0
    backoff_step: int = 0
    restart_at: float | None = None
    started_at: float | None = None
    healthy_since: float | None = None
    last_exit: str | None = None
    failures: list[str] = field(default_factory=list)
    warmup: threading.Thread | None = None
    container_id: str | None = None
    container_pid: int = 0
    """For containers: the pid of the container's main process when last seen (0: not running)."""

    @property
    def pid(self) -> int | None:
        if self.spec.container is not None:
            return self.container_pid or None
        proc = self.process
        return proc.pid if proc and proc.poll() is None else None


def _pdeathsig() -> None:
    """In the child: get SIGTERM if the supervisor dies, so no engine outlives it."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Supervisor:
    def __init__(
        self, config: StackConfig, config_path: Path, state_dir: Path, only_gateway: bool = False
    ) -> None:
        self.config = config
        self.config_path = config_path
        self.state_dir = state_dir
        # The config's gateway alone, in front of hops another supervisor runs (another
        # profile's gateway beside a running stack, ``stack.beside``).
        self.only_gateway = only_gateway
        self.logs = state_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.components: dict[str, Running] = {}
        self._stopping = False
        self._http = httpx.Client(timeout=1.0)
        self.started_at = time.time()

    # -- records ---------------------------------------------------------------------------

    def _event(
        self, run: Running, event: str, reason: str = "", delay: float | None = None
    ) -> None:
        record = {
            "time": time.time(),
            "component": run.spec.name,
            "event": event,
            "pid": run.pid
            if run.spec.container is not None
            else (run.process.pid if run.process else None),
            "reason": reason,
            "restart_count": run.restarts,
            "delay": delay,
        }
        with open(self.state_dir / "events.jsonl", "a") as out:
            out.write(json.dumps(record) + "\n")
        logger.info("%s %s %s", run.spec.name, event, reason)

    def _write_state(self) -> None:
        components = {}
        for name, run in self.components.items():
            proc = run.process
            components[name] = {
                "kind": run.spec.kind,
                "status": run.status,
                "pid": run.pid,
                "pgid": proc.pid if proc and proc.poll() is None else None,
                "container": run.container_id,
                "docker_host": (run.spec.container or {}).get("host"),
                "runtime": "docker" if run.spec.container is not None else "process",
                "endpoint": run.spec.endpoint,
                "health_url": run.spec.health_url,
                "proxy": run.spec.proxy,
                "metrics_url": run.spec.metrics_url,
                "restarts": run.restarts,
                "last_exit": run.last_exit,
                "started_at": run.started_at,
                "healthy_since": run.healthy_since,
                "log": str(self.logs / f"{name}.log"),
                "argv": run.spec.argv,
            }
        write_json(
            self.state_dir / "state.json",
            {
                "stack": self.config.name,
                "config": str(self.config_path),
                "supervisor_pid": os.getpid(),
                "started_at": self.started_at,
                "stopping": self._stopping,
                "components": components,
            },
        )

    # -- process control -------------------------------------------------------------------

    def _start(self, run: Running) -> None:
        if run.spec.container is not None:
            self._start_container(run)
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(self.logs / f"{run.spec.name}.log", "ab") as log:
            log.write(f"\n=== {stamp} starting: {' '.join(run.spec.argv)}\n".encode())
            log.flush()
            run.process = subprocess.Popen(
                run.spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **run.spec.env},
                start_new_session=True,
                preexec_fn=_pdeathsig,
            )
        run.status = "starting"
        run.started_at = time.time()
        run.healthy_since = None
        run.restart_at = None
        self._event(run, "started")

    def _start_container(self, run: Running) -> None:
        """Create and start the container; from then on Docker restarts it, not us."""
        # Imported here: the Docker SDK only for a stack that runs containers.
        from stack.containers import start_engine_container

        spec = run.spec
        assert spec.container is not None
        run.container_id = start_engine_container(
            spec.container, spec.argv, spec.env, self.logs / f"{spec.name}.log"
        )
        run.status = "starting"
        run.started_at = time.time()
        run.healthy_since = None
        self._watch_container(run)

    def _watch_container(self, run: Running) -> bool:
        """Follow the container's main process: a new pid is a (re)start by Docker, a lost one
        an exit; returns whether anything changed."""
        # Imported here: the Docker SDK only for a stack that runs containers.
        from drills.common.docker import DockerClient, DockerError

        assert run.spec.container is not None and run.container_id is not None
        try:
            with DockerClient(run.spec.container["host"]) as docker:
                info = docker.inspect(run.container_id)
        except DockerError as exc:
            logger.warning("%s: cannot inspect its container: %s", run.spec.name, exc)
            return False
        state = info.get("State", {})
        pid = int(state.get("Pid") or 0) if state.get("Running") else 0
        if pid == run.container_pid:
            return False
        old = run.container_pid
        if old:
            if state.get("Running"):
                # Docker restarted it between two looks: the old run's exit code is gone.
                reason = f"replaced by Docker (restart {info.get('RestartCount')})"
            else:
                reason = f"exit code {state.get('ExitCode')}"
            if state.get("OOMKilled"):
                reason += " (OOM killed)"
            run.last_exit = reason
            run.container_pid = 0
            run.restarts = int(info.get("RestartCount", run.restarts))
            run.healthy_since = None
            run.status = "restarting"
            self._event(run, "exited", reason)
        if pid:
            run.container_pid = pid
            run.status = "starting"
            run.started_at = time.time()
            run.healthy_since = None
            self._event(run, "started")
        return True

    def _stop(self, run: Running) -> None:
        if run.spec.container is not None:
            # Imported here: the Docker SDK only for a stack that runs containers.
            from stack.containers import remove_container

            if run.container_id:
                remove_container(run.spec.container["host"], run.container_id)
                run.container_id = None
            run.status = "stopped"
            run.container_pid = 0
            self._event(run, "stopped", "container removed")
            return
        proc = run.process
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                # A frozen (SIGSTOPped) component cannot act on SIGTERM until it runs again.
                os.killpg(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + STOP_GRACE
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        # The group may outlive its leader (vLLM's engine core): always sweep it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        run.status = "stopped"
        self._event(run, "stopped", f"exit {proc.returncode}")

    def _healthy(self, spec: ComponentSpec) -> bool:
        try:
            return self._http.get(spec.health_url).status_code == 200
        except httpx.HTTPError:
            return False

    def _tick(self) -> bool:
        """One round of watching; returns whether anything changed."""
        changed = False
        now = time.time()
        policy = self.config.supervisor
        for run in self.components.values():
            proc = run.process
            if run.spec.container is not None:
                changed = self._watch_container(run) or changed
                if not run.container_pid:
                    continue
                changed = self._check_health(run, now) or changed
                continue
            if run.status == "restarting":
                if run.restart_at is not None and now >= run.restart_at:
                    self._start(run)
                    changed = True
                continue
            if proc is None:
                continue
            code = proc.poll()
            if code is not None:
                reason = (
                    f"exited with code {code}"
                    if code >= 0
                    else f"killed by signal {signal.Signals(-code).name}"
                )
                run.last_exit = reason
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # leftovers of the dead group
                delay = min(policy.max_delay, policy.initial_delay * (2**run.backoff_step))
                run.backoff_step += 1
                run.restarts += 1
                run.status = "restarting"
                run.restart_at = now + delay
                run.healthy_since = None
                self._event(run, "exited", reason)
                self._event(run, "restart_scheduled", reason, delay=delay)
                changed = True
                continue
            changed = self._check_health(run, now) or changed
        return changed

    def _check_health(self, run: Running, now: float) -> bool:
        """Health, warm-up and backoff reset of a running component; whether anything changed."""
        changed = False
        policy = self.config.supervisor
        if run.warmup is not None:
            if run.warmup.is_alive():
                return changed
            run.warmup = None
            self._event(run, "warmed_up")
        healthy = self._healthy(run.spec)
        if not healthy and run.process is not None and self._exiting(run.process):
            # It died between the exit check and the health check, or is dying: the next
            # round records the exit (and its restart), not a health failure of a process
            # that is gone.
            return changed
        if healthy and run.status == "starting" and self._needs_warmup(run):
            # Ready means warm: a fresh engine's first requests are several times slower
            # than later ones, and a drill must not mistake that for the fault it injects.
            run.status = "warming"
            run.warmup = threading.Thread(target=self._warm, args=(run,), daemon=True)
            run.warmup.start()
            changed = True
            return changed
        if healthy and run.status != "healthy":
            run.status = "healthy"
            run.healthy_since = now
            self._event(run, "healthy")
            changed = True
        elif not healthy and run.status == "healthy":
            run.status = "unhealthy"
            self._event(run, "unhealthy", "health check failed")
            changed = True
        if (
            run.status == "healthy"
            and run.backoff_step
            and run.healthy_since is not None
            and now - run.healthy_since >= policy.reset_after
        ):
            run.backoff_step = 0
        return changed

    @staticmethod
    def _exiting(proc: subprocess.Popen[bytes]) -> bool:
        """Whether a process whose health check just failed is exiting. A killed process
        closes its sockets (the check sees a refused or reset connection) a moment before
        it can be reaped, so one that is not reaped at once gets a short grace."""
        try:
            proc.wait(timeout=EXIT_GRACE)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _needs_warmup(self, run: Running) -> bool:
        if run.spec.kind == "vectordb":
            return True  # seeded before it counts as healthy
        if run.spec.kind == "embedder":
            # With the user's Qdrant there is no vector DB component: seed it from here.
            return self.config.rag is not None and self.config.rag.vector_db.kind == "qdrant"
        return run.spec.kind == "engine" and self.config.engine.warmup_requests > 0

    def _seed(self, run: Running) -> None:
        """Seed the vector DB with the corpus (an upsert: a restart re-seeds harmlessly),
        once the embedder answers."""
        rag = self.config.rag
        assert rag is not None
        host = self.config.host
        triton = f"http://{host}:{rag.embedder.port}"
        deadline = time.monotonic() + self.config.engine.startup_timeout
        while time.monotonic() < deadline and not self._stopping:
            try:
                if self._http.get(f"{triton}/v2/health/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1.0)

        async def go() -> int:
            async with httpx.AsyncClient() as http:
                store = make_store(
                    rag.vector_db.kind,
                    f"http://{host}:{rag.vector_db.port}",
                    rag.vector_db.collection,
                    http,
                    api_key=rag.vector_db.api_key,
                )
                return await seed(
                    load_corpus(rag.corpus), TritonEmbedder(triton, http), store, timeout=60.0
                )

        while not self._stopping:
            try:
                count = asyncio.run(go())
            except Exception as exc:
                logger.warning("seeding the vector DB failed: %s", exc)
                if time.monotonic() > deadline:
                    self._event(run, "seed_failed", str(exc)[:300])
                    return
                time.sleep(2.0)
                continue
            logger.info("seeded the vector DB with %d sections", count)
            self._event(run, "seeded", f"{count} sections")
            return

    def _warm(self, run: Running) -> None:
        if run.spec.kind in ("vectordb", "embedder"):
            self._seed(run)
            return
        """Send ``engine.warmup_requests`` short completions, two at a time, to the engine."""
        body = {
            "model": self.config.engine.served_name,
            "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
            "max_tokens": 16,
        }
        url = f"{run.spec.endpoint}/v1/chat/completions"

        def one() -> None:
            try:
                httpx.post(url, json=body, timeout=60)
            except httpx.HTTPError as exc:
                logger.warning("%s warm-up request failed: %s", run.spec.name, exc)

        for _ in range(0, self.config.engine.warmup_requests, 2):
            pair = [threading.Thread(target=one) for _ in range(2)]
            for thread in pair:
                thread.start()
            for thread in pair:
                thread.join()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        specs = (
            [gateway_spec(self.config, self.config_path, self.state_dir)]
            if self.only_gateway
            else component_specs(self.config, self.config_path, self.state_dir)
        )
        self.components = {s.name: Running(s) for s in specs}
        self._write_state()
        try:
            for run in self.components.values():
                if self._stopping:
                    break
                self._start(run)
            self._write_state()
            last_write = time.monotonic()
            while not self._stopping:
                changed = self._tick()
                if changed or time.monotonic() - last_write > 5:
                    self._write_state()
                    last_write = time.monotonic()
                time.sleep(POLL_INTERVAL)
        finally:
            self._stopping = True
            self._write_state()
            # The gateway first, engines next, Toxiproxy last: the reverse of the start order.
            for run in reversed(list(self.components.values())):
                self._stop(run)
            self._write_state()
            self._http.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m stack.supervisor")
    parser.add_argument("--config", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument(
        "--only-gateway",
        action="store_true",
        help="run the gateway alone, in front of hops another supervisor runs",
    )
    parser.add_argument(
        "--with-parent",
        type=int,
        metavar="PID",
        help="stop (SIGTERM) when the process PID that started this one dies: a twin's "
        "gateway run beside a stack must not outlive the drill that runs it",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.with_parent is not None:
        _pdeathsig()
        if os.getppid() != args.with_parent:  # it died before the signal was asked for
            raise SystemExit(f"the process that started this one ({args.with_parent}) is gone")
    state_dir = Path(args.state_dir)
    config_path = Path(args.config)
    Supervisor(load_stack_config(config_path), config_path, state_dir, args.only_gateway).run()


if __name__ == "__main__":
    main()
