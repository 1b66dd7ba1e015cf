"""The one extension point of fault injection.

An injector applies one fault and takes it away again. Its contract:

- ``apply()`` changes the target and returns *evidence read back from it* that the fault is in
  place (a drill never trusts that a call it made had its effect); it raises if the fault did
  not land, and a selector that matches nothing is such a failure.
- ``revert()`` restores the target and returns what it did. Reverting twice, or reverting what
  was never applied, is harmless.
- ``ledger_entry()`` describes the applied fault well enough for ``sweep`` in a later process to
  revert it after this one crashed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

from drills.common.errors import InputError

__all__ = ["REGISTRY", "InjectionContext", "Injector", "Observer", "build", "revert_entry"]


@dataclass(frozen=True)
class InjectionContext:
    run_id: str
    toxiproxy_url: str
    toxiproxy: Any = None
    """A ``ToxiproxyClient`` shared by the run's injectors (kept-alive connection: faults land
    within milliseconds of their scheduled time); one is made per call if absent."""
    state_dir: Path | None = None
    """The embedded stack's state directory (process faults find their targets there)."""
    kubernetes: dict[str, Any] | None = None
    """Kubernetes faults: ``kubeconfig`` (absolute), ``context``, and the namespaces and
    contexts allowed by both the scenario and the safety policy."""
    max_pods: int = 10
    """Kubernetes faults: the most pods one fault may delete (the safety policy's)."""
    max_containers: int = 10
    """Docker faults: the most containers one fault may hit (the safety policy's)."""


class Injector(Protocol):
    kind: str
    target: str

    def apply(self) -> dict[str, Any]: ...

    def revert(self) -> dict[str, Any]: ...

    def ledger_entry(self) -> dict[str, Any]: ...


class Observer(Protocol):
    """Optional: an injector that can say, after the run, how the target recovered (the
    replacement of a killed process, when it was ready again)."""

    def observe(self) -> dict[str, Any]: ...


Factory = Callable[[Any, InjectionContext, int], Injector]
REGISTRY: dict[str, Factory] = {}


def _load_entry_points() -> None:
    for entry in entry_points(group="drills.injectors"):
        REGISTRY.setdefault(entry.name, entry.load())


_BUILTIN_FAMILIES = ("docker", "gpu", "kubernetes", "process", "tool", "toxiproxy")
_LOADED = False


def _registered() -> None:
    """Import every built-in family and the entry points, once. (Not keyed on an empty
    registry: importing one family's module directly registers only that family.)"""
    global _LOADED
    if _LOADED:
        return
    from importlib import import_module

    for family in _BUILTIN_FAMILIES:
        import_module(f"injectors.{family}")
    _load_entry_points()
    _LOADED = True


def revert_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Revert a fault from its ledger entry (written by a run that may have crashed), with the
    module of its fault family."""
    from importlib import import_module

    family = str(entry["kind"]).split(".", 1)[0]
    try:
        module = import_module(f"injectors.{family}")
    except ImportError:
        raise InputError(f"no injector family {family!r} to revert {entry['kind']!r}") from None
    outcome: dict[str, Any] = module.revert_entry(entry)
    return outcome


def build(fault: Any, context: InjectionContext, index: int) -> Injector:
    """The injector for ``fault`` (a scenario fault model), keyed by its ``kind``."""
    _registered()
    family = fault.kind.split(".", 1)[0]
    factory = REGISTRY.get(fault.kind) or REGISTRY.get(family)
    if factory is None:
        raise InputError(
            f"no injector for fault kind {fault.kind!r}; known: {', '.join(sorted(REGISTRY))}"
        )
    return factory(fault, context, index)
