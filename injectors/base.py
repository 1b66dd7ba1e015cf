"""The one extension point of fault injection: the ``Injector`` protocol and its registry.

An injector applies one fault and takes it away again. The runner builds one per scenario fault
(``build``), from the factory registered for the fault's ``kind``, and drives it like this::

    preflight()      optional (``Preflight``): read what the fault would hit; touch nothing
    ledger_entry()   written to the ledger before apply, and again after it
    apply()          at the fault's offset
    revert()         at the end of its window, and on every way out of the run
    observe()        optional (``Observer``): after the run, how the target recovered
    replaced_at()    optional (``Recovers``): during the run, whether the target is back

The contract, for built-in and third-party injectors alike:

``apply() -> Evidence``
    Changes the target and returns *evidence read back from it* that the fault is in place (a
    drill never trusts that a call it made had its effect). It raises ``InjectionFailed`` if the
    fault did not land; a selector that matches nothing is such a failure.
``revert() -> RevertOutcome``
    Restores the target and says what it did. Idempotent: reverting twice, or reverting what was
    never applied, is harmless and says so. It raises ``RevertError`` when the fault could not be
    removed; the runner records any exception a revert raises, goes on with the other reverts,
    writes the journal, and keeps the ledger entry for the next sweep.
``ledger_entry() -> dict``
    JSON that lets ``revert_entry`` in a later process revert the fault after this one crashed;
    it has at least ``kind`` and ``target``.
``preflight() -> dict`` (``Preflight``)
    What the fault would hit, read without changing anything; raises ``InputError`` (or
    ``SafetyViolation``) to refuse the drill before any fault is applied.
``observe() -> dict`` (``Observer``)
    After the run: the killed target's replacement, when it was ready (``ready_at``), ...
``replaced_at() -> float | None`` (``Recovers``)
    During the run, cheaply and as often as once a second: when every target the fault hit had
    a replacement ready (epoch seconds), ``None`` until then. A phase with ``until: replaced``
    ends at that moment instead of at its full duration.

Evidence keys the runner reads (``Evidence``): ``applied_at`` (epoch seconds when the fault
was seen in place); in a revert outcome, ``finished_at`` and ``method`` (what was done, for a
person). Everything else in them is the family's own and lands in the journal as is.

The registry: ``BUILTIN`` names every built-in kind once, as ``module:attribute``, imported
when first used. Third-party packages add kinds through the entry-point group
``drills.injectors`` (name: the kind, value: the factory), loaded by the one plugin loader
(``drills.common.plugins``); ``register`` adds one at run time (tests, notebooks). A factory
is called as ``factory(fault, context, index)``. A plugin's factory must have ``spec`` (the
pydantic model of its fault, whose ``kind`` is the entry point's name) and ``revert_entry(entry)``
(on the factory or in its module: the sweep and the watchdog revert a crashed run's fault with
it); one without either is refused when its kind is first used, with the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, Protocol, TypedDict, get_args, runtime_checkable

from drills.common.errors import InputError
from drills.common.plugins import Group, PluginError

__all__ = [
    "BUILTIN",
    "Evidence",
    "Factory",
    "InjectionContext",
    "Injector",
    "Observer",
    "Preflight",
    "Prepares",
    "Recovers",
    "RevertOutcome",
    "build",
    "factory_for",
    "known_kinds",
    "plugin_problem",
    "plugin_specs",
    "register",
    "revert_entry",
]


class Evidence(TypedDict, total=False):
    """What ``apply`` read back. Only ``applied_at`` is read by the runner."""

    applied_at: float


class RevertOutcome(TypedDict, total=False):
    """What ``revert`` did. ``finished_at`` and ``method`` are read by the runner."""

    finished_at: float
    method: str


@dataclass(frozen=True)
class InjectionContext:
    run_id: str
    toxiproxy_url: str | None
    """Toxiproxy's API; ``None``: the stack names none (the drill has no Toxiproxy fault)."""
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
    hop_url: str | None = None
    """The control API of the harness's L7 hop (``hop.*`` faults); ``None``: the stack runs none."""
    component_states: Mapping[str, Path] = field(default_factory=dict)
    """Components another supervisor runs, by name: that supervisor's state directory (a
    profile's gateway beside a running stack, ``stack.beside``)."""


@runtime_checkable
class Injector(Protocol):
    """One fault on one target (module docstring: the contract)."""

    kind: str
    target: str

    def apply(self) -> dict[str, Any]: ...

    def revert(self) -> dict[str, Any]: ...

    def ledger_entry(self) -> dict[str, Any]: ...


@runtime_checkable
class Preflight(Protocol):
    """An injector that can say what it would hit before anything is applied."""

    def preflight(self) -> dict[str, Any]: ...


@runtime_checkable
class Prepares(Protocol):
    """An injector whose fault takes long to set up (a flood's hundreds of sessions): it
    gets ready before the timeline starts, changing nothing the drill judges, so that the
    fault lands whole at its scheduled time instead of building up through its window.
    ``release`` undoes ``prepare`` when the fault is never applied; it never raises."""

    def prepare(self) -> dict[str, Any]: ...

    def release(self) -> None: ...


@runtime_checkable
class Observer(Protocol):
    """An injector that can say, after the run, how the target recovered (the replacement of
    a killed process, when it was ready again)."""

    def observe(self) -> dict[str, Any]: ...


@runtime_checkable
class Recovers(Protocol):
    """An injector that can say during the run when its target was back: every killed target
    replaced and ready (``None`` until then). Read about once a second by a phase with
    ``until: replaced``; it must not disturb what ``observe`` reads later."""

    def replaced_at(self) -> float | None: ...


Factory = Callable[[Any, InjectionContext, int], Injector]

_TOXICS = ("latency", "down", "timeout", "bandwidth", "reset_peer", "slow_close", "slicer")
BUILTIN: dict[str, str] = {
    **{f"toxiproxy.{t}": "injectors.toxiproxy:ToxiproxyInjector" for t in _TOXICS},
    "toxiproxy.limit_data": "injectors.toxiproxy:ToxiproxyInjector",
    "process.kill": "injectors.process:ProcessInjector",
    "process.freeze": "injectors.process:ProcessInjector",
    **{
        f"docker.{k}": "injectors.docker:DockerInjector"
        for k in ("kill", "stop", "restart", "pause", "disconnect")
    },
    **{
        f"kubernetes.{k}": "injectors.kubernetes:KubernetesInjector"
        for k in ("delete_pod", "cordon", "drain", "scale")
    },
    "gpu.memory_pressure": "injectors.gpu:MemoryPressure",
    "tool.saturate": "injectors.tool:ToolSaturate",
    **{
        f"hop.{k}": "injectors.hop:HopInjector"
        for k in ("status", "first_token_delay", "stall", "cut", "malformed", "wedge")
    },
}
"""Every built-in fault kind and the factory that injects it, in one place."""

_EXTRA: dict[str, Factory] = {}


def register(kind: str, factory: Factory) -> None:
    """Add (or replace) the factory for ``kind`` in this process; a built-in kind is refused."""
    if kind in BUILTIN:
        raise ValueError(f"{kind!r} is a built-in fault kind; give yours another name")
    _EXTRA[kind] = factory


def _reverter(factory: Any) -> Any:
    """The ``revert_entry`` of a factory, or of the module it comes from."""
    module = getattr(factory, "__module__", None)
    found = getattr(import_module(module), "revert_entry", None) if module else None
    return getattr(factory, "revert_entry", None) or found


def _accept(entry: EntryPoint, factory: object) -> Factory:
    if not callable(factory):
        raise PLUGINS.refuse(
            entry, f"is a {type(factory).__name__}, not a factory (a class or a function)"
        )
    spec = getattr(factory, "spec", None)
    fields = getattr(spec, "model_fields", {})
    if "kind" not in fields:
        raise PLUGINS.refuse(
            entry,
            "has no `spec`: give the factory `spec = YourFault`, a drills.plugin.FaultSpec "
            f"subclass with `kind: Literal[{entry.name!r}]`",
        )
    kinds = get_args(fields["kind"].annotation)
    if entry.name not in kinds:
        said = ", ".join(map(repr, kinds)) or "?"
        raise PLUGINS.refuse(
            entry,
            f"its spec {getattr(spec, '__name__', spec)} is of kind {said}; an entry point's "
            "name must be its fault's kind (rename one of them)",
        )
    if not callable(_reverter(factory)):
        raise PLUGINS.refuse(
            entry,
            "has no `revert_entry(entry) -> dict`: without it a fault left by a killed run "
            "cannot be reverted by the watchdog or the next run; define it on the factory or "
            "in its module",
        )
    return factory


PLUGINS: Group[Factory] = Group("drills.injectors", "fault kind", lambda: BUILTIN, _accept)
"""The ``drills.injectors`` entry points (``drills.common.plugins``: one loader, one set of
rules for every group)."""


def known_kinds() -> list[str]:
    """Every fault kind that can be injected: built in, registered, and from entry points
    (broken ones included: using one says why it is broken)."""
    return sorted({*BUILTIN, *_EXTRA, *PLUGINS.names()})


def plugin_problem(kind: str) -> PluginError | None:
    """Why the plugin fault kind ``kind`` cannot be used, if it cannot."""
    try:
        if kind not in BUILTIN and kind not in _EXTRA:
            PLUGINS.load(kind)
        clash = PLUGINS.clash(kind)
    except PluginError as exc:
        return exc
    return clash


def factory_for(kind: str) -> Factory:
    """The factory registered for ``kind``; ``InputError`` naming the known kinds if none, a
    ``PluginError`` if its plugin cannot be used."""
    clash = PLUGINS.clash(kind)
    if clash is not None:
        raise clash
    if kind in _EXTRA:
        return _EXTRA[kind]
    if kind in BUILTIN:
        module, _, attribute = BUILTIN[kind].partition(":")
        factory: Factory = getattr(import_module(module), attribute)
        return factory
    plugin = PLUGINS.load(kind)
    if plugin is None:
        raise InputError(f"no injector for fault kind {kind!r}; known: {', '.join(known_kinds())}")
    return plugin


def plugin_specs() -> list[Any]:
    """The fault models (``spec``) of the injectors registered here or by entry point (those
    that load); the built-in families' models are the scenario's own
    (``drills.model.faults.BUILTIN_FAULTS``)."""
    factories = [*_EXTRA.values(), *PLUGINS.load_all().values()]
    return [s for s in (getattr(f, "spec", None) for f in factories) if s is not None]


def revert_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """Revert a fault from its ledger entry (written by a run that may have crashed), with the
    ``revert_entry`` of its factory's module (or of the factory itself)."""
    factory = factory_for(str(entry["kind"]))
    reverter = _reverter(factory)
    if reverter is None:
        raise InputError(
            f"the injector of {entry['kind']!r} ({factory.__module__}) cannot revert a ledger "
            "entry: it defines no revert_entry"
        )
    outcome: dict[str, Any] = reverter(entry)
    return outcome


def build(fault: Any, context: InjectionContext, index: int) -> Injector:
    """The injector for ``fault`` (a scenario fault model), keyed by its ``kind``."""
    injector = factory_for(fault.kind)(fault, context, index)
    if not isinstance(injector, Injector):
        raise InputError(
            f"the factory for {fault.kind!r} returned {type(injector).__name__}, which does not "
            "satisfy injectors.base.Injector (kind, target, apply, revert, ledger_entry)"
        )
    return injector
