"""The Kubernetes control plane's cold build (etcd, kube-apiserver, -controller-manager,
-scheduler, kubectl, KWOK), as a new machine's CI pays it: empty Go build and module caches.

Two recipes, one after the other in one run, each in folders of its own:

- ``per-tool`` (the reference, the recipe before 2026-12-05): a wrapper module for
  Kubernetes with one ``go build`` per binary, then etcd in a module of its own, then
  ``go install`` of KWOK at its own pinned versions;
- ``one-module`` (``stack.kube.ensure_kube_binaries`` now): one wrapper module requiring
  Kubernetes, etcd and KWOK, so that the libraries they share are compiled once at one
  version, and one ``go build`` for all seven.

Prints each recipe's wall time and the Go build cache's size after it. Both download their
modules (as a new machine does); run it on a quiet machine (it takes both cores for minutes):

    .venv/bin/python bench/kube_build.py               # both recipes
    .venv/bin/python bench/kube_build.py --only one-module
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stack import kube

ROOT = Path(__file__).resolve().parent.parent


def _env(base: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DRILLS_CACHE": str(base / "drills"),
        "GOCACHE": str(base / "gocache"),
        "GOMODCACHE": str(base / "gomod"),
        "CGO_ENABLED": "0",
        "GOFLAGS": "-mod=mod",
        "GOTOOLCHAIN": "local",
    }


def _go(env: dict[str, str], *args: str, cwd: Path | None = None) -> None:
    subprocess.run(["go", *args], env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)  # fmt: skip


def per_tool(base: Path) -> None:
    """The reference: the recipe as it was, tool by tool."""
    env = _env(base)
    out = base / "bin"
    work = base / "work"
    (work / "kubernetes").mkdir(parents=True)
    replaces, godebug = kube._kubernetes_replaces("go", env)
    (work / "kubernetes" / "go.mod").write_text(
        "module drills.local/kubebuild\n\ngo 1.26\n\n"
        + (f"{godebug}\n\n" if godebug else "")
        + f"require k8s.io/kubernetes {kube.KUBERNETES_VERSION}\n\n"
        + "\n".join(replaces)
        + "\n"
    )
    names = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
    (work / "kubernetes" / "tools.go").write_text(
        "//go:build tools\n\npackage tools\n\nimport (\n"
        + "".join(f'\t_ "k8s.io/kubernetes/cmd/{n}"\n' for n in names)
        + ")\n"
    )
    _go(env, "mod", "tidy", cwd=work / "kubernetes")
    stamp = kube._version_stamp()
    for name in names:
        _go(env, "build", "-trimpath", "-ldflags", f"-s -w {stamp}", "-o", str(out / name),
            f"k8s.io/kubernetes/cmd/{name}", cwd=work / "kubernetes")  # fmt: skip
    (work / "etcd").mkdir()
    (work / "etcd" / "go.mod").write_text(
        "module drills.local/etcdbuild\n\ngo 1.26\n\n"
        f"require go.etcd.io/etcd/server/v3 {kube.ETCD_VERSION}\n"
    )
    (work / "etcd" / "tools.go").write_text(
        '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n'
    )
    _go(env, "mod", "tidy", cwd=work / "etcd")
    _go(env, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "etcd"),
        "go.etcd.io/etcd/server/v3", cwd=work / "etcd")  # fmt: skip
    _go({**env, "GOBIN": str(out)}, "install", "-trimpath", "-ldflags", "-s -w",
        f"sigs.k8s.io/kwok/cmd/kwokctl@{kube.KWOK_VERSION}",
        f"sigs.k8s.io/kwok/cmd/kwok@{kube.KWOK_VERSION}")  # fmt: skip
    missing = [b for b in kube.BINARIES if not (out / b).exists()]
    assert not missing, missing


def one_module(base: Path) -> None:
    """The recipe now, in a child process so that its caches are the empty ones."""
    subprocess.run(
        [sys.executable, "-c", "import stack.kube as k; k.ensure_kube_binaries()"],
        env={**_env(base), "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        check=True,
    )


def _size(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**30


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["per-tool", "one-module"])
    args = parser.parse_args()
    recipes = {"per-tool": per_tool, "one-module": one_module}
    for name, build in recipes.items():
        if args.only and name != args.only:
            continue
        base = Path(tempfile.mkdtemp(prefix=f"kube-build-{name}-"))
        try:
            started = time.monotonic()
            build(base)
            took = time.monotonic() - started
            print(f"{name:>10}: {took:6.0f} s, Go build cache {_size(base / 'gocache'):.1f} GiB",
                  flush=True)  # fmt: skip
        finally:
            # The module cache is read-only on purpose; go clean removes it.
            subprocess.run(["go", "clean", "-modcache"], env=_env(base), check=False)
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
