"""Objects that third-party packages add through entry points (``drills.checks``,
``drills.gateways``), each checked to be what its group holds."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TypeVar

from drills.common.errors import InputError

__all__ = ["load_plugins"]

T = TypeVar("T")


def load_plugins(group: str, expected: type[T]) -> list[T]:
    """The objects the ``group`` entry points name; one that fails to load or is not an
    ``expected`` is bad input, named with its entry point (exit code 2)."""
    found = []
    for entry in entry_points(group=group):
        try:
            item = entry.load()
        except Exception as exc:
            raise InputError(
                f"entry point {group}:{entry.name} ({entry.value}) could not be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        if not isinstance(item, expected):
            raise InputError(
                f"entry point {group}:{entry.name} ({entry.value}) is a {type(item).__name__}, "
                f"not a {expected.__module__}.{expected.__qualname__}"
            )
        found.append(item)
    return found
