"""A real Kubernetes control plane on this machine, for the Kubernetes injector's tests and for
trying manifests: etcd, kube-apiserver, kube-controller-manager and kube-scheduler built from
their Go modules, run by KWOK's ``kwokctl`` (binary runtime), with KWOK playing the nodes
(GPU nodes carry ``nvidia.com/gpu``) and their kubelets.

``ensure_kube_binaries()`` builds everything once into the cache (``~/.cache/drills/kube/<key>``,
keyed by the versions below and the recipe; minutes cold on 2 cores, seconds afterwards).
``KwokCluster`` creates a cluster in a work folder of its own and deletes it again.

Kubernetes' own module cannot be ``go install``-ed (its staging modules are ``v0.0.0`` with
``replace`` directives that only apply in its own main module), so a throwaway wrapper module
repeats those replaces at the matching published versions.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

import yaml

from drills.common.errors import ProvisionError, StackError
from stack.provision import MARKER, _find_go, _fresh, _locked, _run, cache_root, go_mod_of

__all__ = [
    "ETCD_VERSION",
    "KUBERNETES_VERSION",
    "KWOK_VERSION",
    "KubeBinaries",
    "KwokCluster",
    "ensure_kube_binaries",
]

logger = logging.getLogger(__name__)

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
STAGES = Path(__file__).resolve().parent / "deploy" / "kwok" / "stages.yaml"
# Each binary and its main package.
MAIN_PACKAGES = {
    "etcd": "go.etcd.io/etcd/server/v3",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "kwok": "sigs.k8s.io/kwok/cmd/kwok",
    "kwokctl": "sigs.k8s.io/kwok/cmd/kwokctl",
}
BINARIES = tuple(MAIN_PACKAGES)
# The build recipe's revision: a new one builds anew (2: one module and one build for all).
RECIPE = 2


class KubeBinaries:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir

    def __getitem__(self, name: str) -> Path:
        return self.bindir / name


def _key() -> str:
    return f"k8s-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}-kwok-{KWOK_VERSION}-r{RECIPE}"


def _go_env(gopath_cache: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CGO_ENABLED": "0",
        "GOFLAGS": "-mod=mod",
        # Builds of this size need the module and build caches of the user, not a fresh one.
        "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "local"),
        "GOCACHE": os.environ.get("GOCACHE", str(gopath_cache / "gocache")),
    }


def _kubernetes_replaces(go: str, env: dict[str, str]) -> tuple[list[str], str | None]:
    """``replace`` lines for every staging module of k8s.io/kubernetes, and its godebug line."""
    gomod = go_mod_of(go, env, "k8s.io/kubernetes", KUBERNETES_VERSION)
    staging_version = "v0" + KUBERNETES_VERSION[2:]  # v1.36.3 -> v0.36.3
    replaces, godebug = [], None
    for line in gomod.splitlines():
        words = line.strip().split()
        if len(words) >= 2 and words[0].startswith("k8s.io/") and words[1] == "v0.0.0":
            replaces.append(f"replace {words[0]} => {words[0]} {staging_version}")
        if line.startswith("godebug"):
            godebug = line
    if not replaces:
        raise ProvisionError("k8s.io/kubernetes's go.mod lists no staging modules; format changed?")
    return sorted(set(replaces)), godebug


def kube_binaries_built() -> bool:
    """Whether ``ensure_kube_binaries`` would return at once (the build is in the cache)."""
    return (cache_root() / "kube" / _key() / MARKER).exists()


def ensure_kube_binaries() -> KubeBinaries:
    """Build (once) and return the control plane's binaries."""
    # Long on purpose: the build recipe in one place, step by step (wrapper module, replaces,
    # stamps, one build): a reader checks it against the comments top to bottom.
    bindir = cache_root() / "kube" / _key()
    if (bindir / MARKER).exists():
        return KubeBinaries(bindir)
    go = _find_go()
    if go is None:
        raise ProvisionError(
            "Go is needed to build the Kubernetes control plane (https://go.dev/dl)"
        )
    with _locked("kube"):
        if (bindir / MARKER).exists():
            return KubeBinaries(bindir)
        _fresh(bindir)
        bindir.mkdir(parents=True)
        log = cache_root() / "logs" / f"{_key()}.log"
        env = _go_env(cache_root() / "kube")
        work = bindir / "work"
        work.mkdir(parents=True)

        # One wrapper module for all seven binaries, with Kubernetes' staging replaces. etcd and
        # KWOK are required beside Kubernetes so that one module graph holds all three: the
        # libraries they share (k8s.io/api, client-go, apiserver, grpc, etcd's client, otel)
        # are compiled once, at one version, instead of once per tool at the version each pins
        # (KWOK pins k8s.io/* v0.36.1, Kubernetes' etcd client is older than the etcd server).
        replaces, godebug = _kubernetes_replaces(go, env)
        (work / "go.mod").write_text(
            "module drills.local/kubebuild\n\ngo 1.26\n\n"
            + (f"{godebug}\n\n" if godebug else "")
            + "require (\n"
            + f"\tk8s.io/kubernetes {KUBERNETES_VERSION}\n"
            + f"\tgo.etcd.io/etcd/server/v3 {ETCD_VERSION}\n"
            + f"\tsigs.k8s.io/kwok {KWOK_VERSION}\n"
            + ")\n\n"
            + "\n".join(replaces)
            + "\n"
        )
        (work / "tools.go").write_text(
            "//go:build tools\n\npackage tools\n\nimport (\n"
            + "".join(f'\t_ "{package}"\n' for package in MAIN_PACKAGES.values())
            + ")\n"
        )
        _run([go, "mod", "tidy"], what="resolving the modules", log=log, env=env, cwd=work)
        # One `go build` for all of them: the links of the big binaries overlap the compiles of
        # the others instead of leaving a core idle one after another.
        out = work / "bin"
        out.mkdir()
        _run(
            [
                *(go, "build", "-trimpath", "-ldflags", f"-s -w {_version_stamp()}"),
                *("-o", f"{out}{os.sep}", *MAIN_PACKAGES.values()),
            ],
            what=(
                f"building Kubernetes {KUBERNETES_VERSION}, etcd {ETCD_VERSION} and KWOK "
                f"{KWOK_VERSION} (first time only, minutes)"
            ),
            log=log,
            env=env,
            cwd=work,
        )
        for name, package in MAIN_PACKAGES.items():
            built = out / _go_binary_name(package)
            if built.exists():
                built.rename(bindir / name)
        shutil.rmtree(work)
        missing = [b for b in BINARIES if not (bindir / b).exists()]
        if missing:
            raise ProvisionError(
                f"the Kubernetes build produced no {', '.join(missing)}; see {log}"
            )
        (bindir / MARKER).write_text(_key() + "\n")
    return KubeBinaries(bindir)


def _version_stamp() -> str:
    """The version stamps Kubernetes' own build sets (kwokctl and kubectl read them)."""
    minor = KUBERNETES_VERSION[1:].split(".")[1]
    return " ".join(
        f"-X {pkg}.gitVersion={KUBERNETES_VERSION} -X {pkg}.gitMajor=1 -X {pkg}.gitMinor={minor}"
        for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
    )


def _go_binary_name(package: str) -> str:
    """The file name ``go build -o DIR/`` gives a main package: its last path element, or the
    one before a major-version suffix (``go.etcd.io/etcd/server/v3`` -> ``server``)."""
    parts = package.split("/")
    if len(parts) > 1 and parts[-1][0] == "v" and parts[-1][1:].isdigit():
        return parts[-2]
    return parts[-1]


class KwokCluster:
    """One KWOK cluster (real control plane, simulated nodes) in ``workdir``."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        binaries: KubeBinaries,
        *,
        ready_delay: float = 0.0,
        tokens: dict[str, tuple[str, list[str]]] | None = None,
    ) -> None:
        """``ready_delay``: seconds a pod stays Running but not Ready (a model loading; a
        pod's ``pod-ready.stage.kwok.x-k8s.io/delay`` annotation overrides it). ``tokens``:
        bearer token -> (user, groups) the API server accepts besides its admin certificate
        (``--token-auth-file``), as EKS's authenticator maps an exec plugin's token to a user."""
        self.name = name
        self.workdir = workdir
        self.binaries = binaries
        self.ready_delay = ready_delay
        self.tokens = dict(tokens or {})

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "clusters" / self.name / "kubeconfig.yaml"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KWOK_WORKDIR": str(self.workdir),
            "PATH": f"{self.binaries.bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def _config(self) -> Path:
        b = self.binaries
        path = self.workdir / "kwokctl.yaml"
        options = {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            "kubeApiserverBinary": str(b["kube-apiserver"]),
            "kubeControllerManagerBinary": str(b["kube-controller-manager"]),
            "kubeSchedulerBinary": str(b["kube-scheduler"]),
            "kwokControllerBinary": str(b["kwok"]),
            "etcdBinary": str(b["etcd"]),
            "kubectlBinary": str(b["kubectl"]),
            "kubeVersion": KUBERNETES_VERSION,
        }
        config: dict[str, object] = {
            "kind": "KwokctlConfiguration",
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "options": options,
        }
        if self.tokens:
            tokens = self.workdir / "tokens.csv"
            tokens.write_text(
                "".join(
                    f'{token},{user},{user},"{",".join(groups)}"\n'
                    for token, (user, groups) in self.tokens.items()
                )
            )
            tokens.chmod(0o600)
            config["componentsPatches"] = [
                {
                    "name": "kube-apiserver",
                    "extraArgs": [{"key": "token-auth-file", "value": str(tokens)}],
                }
            ]
        path.write_text(yaml.safe_dump_all([config, *self._stages()], sort_keys=False))
        return path

    def _stages(self) -> list[dict[str, object]]:
        """KWOK's default stages, with a pod's readiness ``ready_delay`` after it starts
        running (stack/deploy/kwok/stages.yaml says why)."""
        stages = list(yaml.safe_load_all(STAGES.read_text()))
        for stage in stages:
            if stage["metadata"]["name"] == "pod-ready":
                stage["spec"]["delay"]["durationMilliseconds"] = int(self.ready_delay * 1000)
        return stages

    def create(self, timeout: float = 180) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.workdir / "kwokctl.log"
        _run(
            [
                str(self.binaries["kwokctl"]),
                "create",
                "cluster",
                "--name",
                self.name,
                "--config",
                str(self._config()),
                "--kubeconfig",
                str(self._user_kubeconfig),
                "--wait",
                f"{int(timeout)}s",
            ],
            what=f"starting the KWOK cluster {self.name}",
            log=log,
            env=self._env(),
        )
        deadline = time.monotonic() + timeout
        while not self.kubeconfig.exists():
            if time.monotonic() > deadline:
                raise StackError(f"KWOK cluster {self.name} wrote no kubeconfig; see {log}")
            time.sleep(0.5)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        result = subprocess.run(
            [str(self.binaries["kubectl"]), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            input=input,
            check=False,
            timeout=120,
        )
        if result.returncode != 0:
            raise StackError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    @property
    def _user_kubeconfig(self) -> Path:
        """Where kwokctl may merge its context: this cluster's own folder, never the user's
        ~/.kube/config."""
        return self.workdir / "kubeconfig-merged.yaml"

    def delete(self) -> None:
        """Stop every component of the cluster and remove its files; raise if that fails (a
        control plane left running would hold ports and CPU)."""
        result = subprocess.run(
            [
                str(self.binaries["kwokctl"]),
                "delete",
                "cluster",
                "--name",
                self.name,
                "--kubeconfig",
                str(self._user_kubeconfig),
            ],
            capture_output=True,
            text=True,
            env=self._env(),
            check=False,
            timeout=120,
        )
        if result.returncode != 0:
            raise StackError(
                f"kwokctl delete cluster {self.name} failed: {result.stderr.strip()[-500:]}"
            )
