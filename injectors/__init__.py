"""Fault injectors, one module per fault family, each satisfying ``injectors.base.Injector``.

``build(fault, context, index)`` returns the injector for a scenario fault, chosen by its
``kind`` through the one registry in ``injectors.base`` (``BUILTIN``); third-party families
register through the ``drills.injectors`` entry-point group (a factory taking
``(fault, context, index)``).
"""

from __future__ import annotations

from injectors.base import (
    BUILTIN,
    InjectionContext,
    Injector,
    Observer,
    Preflight,
    Prepares,
    Recovers,
    build,
    known_kinds,
    register,
)

__all__ = [
    "BUILTIN",
    "InjectionContext",
    "Injector",
    "Observer",
    "Preflight",
    "Prepares",
    "Recovers",
    "build",
    "known_kinds",
    "register",
]
