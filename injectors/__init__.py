"""Fault injectors, one module per fault family, each satisfying ``injectors.base.Injector``.

``build(fault, context)`` returns the injector for a scenario fault, chosen by its ``kind``
through ``REGISTRY``; third-party families register through the ``drills.injectors``
entry-point group (a callable taking ``(fault, context)``).
"""

from __future__ import annotations

from injectors.base import REGISTRY, InjectionContext, Injector, build

__all__ = ["REGISTRY", "InjectionContext", "Injector", "build"]
