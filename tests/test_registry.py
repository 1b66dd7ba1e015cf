"""The injector registry: one table of built-in kinds, each resolving to a factory that
satisfies the Protocol and to a family that can revert a ledger entry; an unknown kind is
refused by name."""

from __future__ import annotations

import importlib

import pytest

from drills.common.errors import InputError
from drills.model.scenario import BUILTIN_FAULTS
from injectors.base import BUILTIN, Injector, factory_for, known_kinds


def test_every_builtin_kind_has_a_factory_and_a_ledger_reverter() -> None:
    for kind, where in BUILTIN.items():
        factory = factory_for(kind)
        assert callable(factory), kind
        module = importlib.import_module(where.partition(":")[0])
        assert callable(module.revert_entry), kind


def test_the_scenario_knows_exactly_the_registered_kinds() -> None:
    # The scenario's fault union and the registry name the same kinds: none is injectable
    # without validating, none validates without an injector.
    kinds = set()
    for model in BUILTIN_FAULTS:
        kinds.update(model.model_fields["kind"].annotation.__args__)
    assert kinds == set(BUILTIN)
    assert set(BUILTIN) <= set(known_kinds())


def test_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(InputError, match="no injector for fault kind 'gpu_oom'; known: docker"):
        factory_for("gpu_oom")


def test_injector_protocol_is_checked_at_runtime() -> None:
    class Half:
        kind = "x.y"
        target = "t"

        def apply(self) -> dict:
            return {}

    assert not isinstance(Half(), Injector)


def test_every_builtin_check_family_has_its_evaluator() -> None:
    from drills.model.check_families import BUILTIN as CHECK_FAMILIES
    from drills.model.check_families import family_of

    for family in CHECK_FAMILIES:
        assert isinstance(family.evaluator, str)
        module, _, name = family.evaluator.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), family.family
    assert family_of("ttft.p99").family == "latency"  # type: ignore[union-attr]
    assert family_of("e2e.p42") is None
    assert family_of("error_rate").limits == (0.0, 1.0)  # type: ignore[union-attr]
