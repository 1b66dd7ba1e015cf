"""One loader for the three entry-point groups through which a package extends drills:
``drills.injectors`` (fault kinds), ``drills.checks`` (check families) and ``drills.gateways``
(gateway adapters). The rules are the same for all three:

- An entry point's name is the name it adds (the fault kind, the check family, the adapter's
  name), and the object it loads must say the same name; the group's ``accept`` checks the rest
  of what the object must be (a fault kind's spec and ``revert_entry``, a ``CheckFamily``, a
  ``GatewayAdapter``).
- A built-in name cannot be taken, and two entry points (of two distributions) cannot share one:
  the clash is an error naming both, raised wherever that name is used.
- An entry point is loaded when its name is first asked for (or when every name is listed, for
  a schema or an error message), once per process. One that is broken is one line naming the
  group, the entry point, its target, the exception and the fix; it breaks only what uses its
  name: a listing leaves it out and keeps its error (``Group.broken``).

Every error is a ``PluginError`` (an ``InputError``: exit code 2, nothing applied).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from drills.common.errors import InputError

__all__ = ["Group", "PluginError", "described"]

T = TypeVar("T")


class PluginError(InputError):
    """A plugin's entry point that cannot be used: names the group, the entry point, its
    target and what to fix."""


def described(entry: EntryPoint) -> str:
    """``group:name (module:attribute, from distribution D)``: how an error names one."""
    dist = getattr(entry, "dist", None)
    source = f", from {dist.name} {dist.version}" if dist is not None else ""
    return f"entry point {entry.group}:{entry.name} ({entry.value}{source})"


@dataclass
class Group(Generic[T]):
    """One entry-point group: its built-in names and how a loaded object is checked."""

    group: str
    what: str
    """What one entry adds, for messages: ``fault kind``, ``check family``, ``gateway adapter``."""
    builtin: Callable[[], Collection[str]]
    """The built-in names (read when first needed, so that a registry can be filled late)."""
    accept: Callable[[EntryPoint, object], T]
    """The loaded object as the group's type; raises ``PluginError`` (use ``refuse``)."""
    _entries: dict[str, EntryPoint] | None = field(default=None, init=False)
    _clashes: dict[str, PluginError] = field(default_factory=dict, init=False)
    _loaded: dict[str, T] = field(default_factory=dict, init=False)
    _broken: dict[str, PluginError] = field(default_factory=dict, init=False)

    def refuse(self, entry: EntryPoint, problem: str) -> PluginError:
        """The error for ``entry``: the group, the entry point, its target, the problem."""
        return PluginError(f"{described(entry)}: {problem}")

    def typed(self, entry: EntryPoint, item: object, expected: type[T], name: str) -> T:
        """``item`` if it is an ``expected`` whose attribute ``name`` is the entry point's
        name; refused otherwise."""
        kind = expected.__qualname__
        if not isinstance(item, expected):
            raise self.refuse(
                entry,
                f"is a {type(item).__name__}, not a {expected.__module__}.{kind}; point the "
                f"entry point at a {kind}(...) object",
            )
        named = getattr(item, name)
        if named != entry.name:
            raise self.refuse(
                entry,
                f"loads the {self.what} {named!r}; an entry point's name must be its "
                f"{self.what}'s name (rename one of them)",
            )
        return item

    def entries(self) -> dict[str, EntryPoint]:
        """The group's entry points by name, read once; a clash leaves its name out of the
        result and keeps its error for whoever asks for that name."""
        if self._entries is None:
            by_name: dict[str, list[EntryPoint]] = {}
            for entry in entry_points(group=self.group):
                by_name.setdefault(entry.name, []).append(entry)
            builtin = set(self.builtin())
            self._entries = {}
            for name, found in sorted(by_name.items()):
                if len(found) > 1:
                    both = " and ".join(described(e) for e in found)
                    self._clashes[name] = PluginError(
                        f"two entry points add the {self.what} {name!r}: {both}; uninstall one "
                        "or rename its entry point"
                    )
                elif name in builtin:
                    self._clashes[name] = self.refuse(
                        found[0],
                        f"takes the name of the built-in {self.what} {name!r}; rename the entry "
                        "point and the object's name (a plugin cannot replace a built-in)",
                    )
                else:
                    self._entries[name] = found[0]
        return self._entries

    def names(self) -> list[str]:
        """The names the group's entry points add, without loading them."""
        return sorted(self.entries())

    def clash(self, name: str) -> PluginError | None:
        """The error of a name that two entry points, or a built-in and one, both claim."""
        self.entries()
        return self._clashes.get(name)

    def load(self, name: str) -> T | None:
        """The object of the entry point called ``name``; ``None`` if there is none;
        ``PluginError`` if it clashes or cannot be loaded or is not what the group holds."""
        clash = self.clash(name)
        if clash is not None:
            raise clash
        if name in self._loaded:
            return self._loaded[name]
        if name in self._broken:
            raise self._broken[name]
        entry = self.entries().get(name)
        if entry is None:
            return None
        try:
            try:
                item = entry.load()
            except Exception as exc:
                raise self.refuse(
                    entry,
                    f"could not be loaded: {type(exc).__name__}: {exc}; fix the target "
                    "(module:attribute) or reinstall the package",
                ) from None
            accepted = self.accept(entry, item)
        except PluginError as exc:
            self._broken[name] = exc
            raise
        self._loaded[name] = accepted
        return accepted

    def load_all(self) -> dict[str, T]:
        """Every entry point that loads, by name; the broken ones are left out and kept
        (``broken``)."""
        for name in self.names():
            with contextlib.suppress(PluginError):
                self.load(name)
        return dict(self._loaded)

    def broken(self) -> list[PluginError]:
        """Why each entry point of the group that cannot be used cannot be (after
        ``load_all``, or the loads that were asked for): clashes and failed loads."""
        self.entries()
        return [*self._clashes.values(), *self._broken.values()]

    def reset(self) -> None:
        """Read the entry points again (tests; a package installed in this process)."""
        self._entries = None
        self._clashes.clear()
        self._loaded.clear()
        self._broken.clear()
