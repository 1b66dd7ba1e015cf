"""Install parts of the embedded stack ahead of their first use, each timed:

    python -m stack.install                      # every part
    python -m stack.install kube                 # the Kubernetes control plane alone

Every part is installed on first use anyway (``stack.provision``, ``stack.kube``), into the cache
(``$DRILLS_CACHE``, default ``~/.cache/drills``), keyed by version; a part already there takes
no time. CI runs this before the tests so that no test runs beside an install: a compile beside
a timing test distorts what it measures.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable

from drills.common.errors import ProvisionError
from stack.kube import ensure_kube_binaries
from stack.provision import (
    ensure_alertmanager,
    ensure_engine_python,
    ensure_jaeger,
    ensure_litellm_python,
    ensure_model,
    ensure_nginx,
    ensure_prometheus,
    ensure_rag_python,
    ensure_toxiproxy,
)

__all__ = ["PARTS", "main"]

PARTS: dict[str, tuple[str, Callable[[], object]]] = {
    "toxiproxy": ("Toxiproxy (built from the Go module proxy)", ensure_toxiproxy),
    "engine": ("vLLM for the CPU and torch", ensure_engine_python),
    "model": ("SmolLM2-135M-Instruct, converted", lambda: ensure_model(ensure_engine_python())),
    # After the engine: uv's cache then serves the torch both environments use.
    "rag": ("Triton, the embedding model and Chroma", ensure_rag_python),
    "litellm": ("the LiteLLM proxy", ensure_litellm_python),
    "prometheus": ("Prometheus (Debian's package, unpacked)", ensure_prometheus),
    "nginx": ("nginx, the tests' third-party gateway (Debian's package, unpacked)", ensure_nginx),
    "alertmanager": ("Alertmanager (built from the Go module proxy)", ensure_alertmanager),
    "kube": ("the Kubernetes control plane and KWOK (built from Go)", ensure_kube_binaries),
    "jaeger": ("Jaeger, the tests' OTLP receiver (built from Go)", ensure_jaeger),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stack.install", description=__doc__)
    parser.add_argument("parts", nargs="*", metavar="PART", help=f"any of: {', '.join(PARTS)}")
    args = parser.parse_args(argv)
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part {unknown[0]!r}; expected any of: {', '.join(PARTS)}")
    logging.basicConfig(level=logging.INFO, format="install: %(message)s")
    for name in args.parts or list(PARTS):
        what, install = PARTS[name]
        started = time.monotonic()
        try:
            install()
        except ProvisionError as exc:
            print(f"install: {name}, {what}: failed: {exc}", file=sys.stderr)
            return 1
        print(f"install: {name}, {what}: ready in {time.monotonic() - started:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
