"""LiteLLM proxy (PyPI ``litellm[proxy]``, pinned with hashes) in front of the embedded stack's
model hops: the second real system under test, and the worked example of "Drill your own stack".

The proxy is not part of the embedded stack; it is a gateway a team runs, started here only so
that the harness can be proven on it. Its config is one of the policies beside this file
(``sound.yaml``, ``unsound.yaml``) plus a ``model_list`` with one deployment per primary hop,
each called through the harness's L7 hop when the stack runs one (``model_info.id`` is the hop's
name, so ``x-litellm-model-id`` names the hop that served a request)::

    python -m stack.litellm --policy sound --port 4000      # in front of `drills stack up`
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import yaml

from drills.common.errors import StackError
from stack.config import StackConfig, load_stack_config
from stack.provision import ensure_litellm_python
from stack.state import default_state_dir

__all__ = ["POLICIES", "litellm_config", "running", "start", "wait_ready", "with_model_list"]

FILES = Path(__file__).parent
POLICIES = ("sound", "default", "unsound")
Policy = Literal["sound", "default", "unsound"]


def litellm_config(config: StackConfig, policy: Policy) -> dict[str, Any]:
    """LiteLLM's config for ``config``'s primary hops under ``policy``."""
    base: dict[str, Any] = yaml.safe_load((FILES / f"{policy}.yaml").read_text())
    return with_model_list(config, base)


def with_model_list(config: StackConfig, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` (a LiteLLM config without deployments) with one deployment per primary hop
    of ``config``, each through the harness's L7 hop when the stack runs one."""
    base = dict(base)
    host = config.host
    base["model_list"] = [
        {
            "model_name": config.engine.served_name,
            "litellm_params": {
                "model": f"hosted_vllm/{u.served_name}",
                "api_base": f"http://{host}:{u.call_port}/v1",
                "api_key": "none",
            },
            "model_info": {"id": u.name},
        }
        for u in config.upstreams
        if u.role == "primary"
    ]
    return base


def start(
    config_file: Path, port: int, log: Path, host: str = "127.0.0.1"
) -> subprocess.Popen[bytes]:
    """Start the proxy (one worker) in its own process group; its output goes to ``log``."""
    python = ensure_litellm_python()
    env = {
        **os.environ,
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "DISABLE_SCHEMA_UPDATE": "True",
        "NO_DOCS": "True",
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                str(python.parent / "litellm"),
                "--config",
                str(config_file),
                "--host",
                host,
                "--port",
                str(port),
                "--num_workers",
                "1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 180.0) -> None:
    """Until LiteLLM's liveness probe answers (its import alone takes many seconds here)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StackError(f"LiteLLM proxy exited with {process.returncode} before it was ready")
        try:
            if httpx.get(f"{url}/health/liveliness", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise StackError(f"LiteLLM proxy at {url} was not ready within {timeout:.0f}s")


@contextlib.contextmanager
def running(config_file: Path, workdir: Path, host: str = "127.0.0.1") -> Iterator[str]:
    """LiteLLM proxy with ``config_file`` on a free port of ``host``, its log in ``workdir``;
    yield its URL once it is ready; stop its process group on the way out."""
    workdir.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        port = int(sock.getsockname()[1])
    process = start(config_file, port, workdir / "litellm.log", host)
    url = f"http://{host}:{port}"
    try:
        wait_ready(url, process)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m stack.litellm", description=__doc__)
    parser.add_argument("--stack-config", help="the stack's config (default: the running one)")
    parser.add_argument("--policy", choices=POLICIES, default="sound")
    parser.add_argument("--port", type=int, default=4000)
    args = parser.parse_args()

    state = default_state_dir()
    config = load_stack_config(args.stack_config or state / "stack.yaml")
    if _taken(config.host, args.port):
        raise SystemExit(f"port {args.port} on {config.host} is in use: stop what holds it first")
    path = state / f"litellm-{args.policy}.yaml"
    path.write_text(yaml.safe_dump(litellm_config(config, args.policy), sort_keys=False))
    process = start(path, args.port, state / "litellm.log", config.host)
    url = f"http://{config.host}:{args.port}"
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops it as Ctrl-C does
    try:
        wait_ready(url, process)
        print(f"LiteLLM proxy ({args.policy}) at {url}; config {path}; Ctrl-C stops it", flush=True)
        process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


def _taken(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        return sock.connect_ex((host, port)) == 0


if __name__ == "__main__":
    main()
