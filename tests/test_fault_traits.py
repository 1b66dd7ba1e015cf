"""Each fault family describes itself (``FaultSpec``'s traits): what it kills, what a phase may
wait for, where it acts, the hardware and orchestrator it needs, how its target is found. The
runner, validation, the dry run and the safety policy ask the family, not a kind's name; a
plugin family that declares nothing keeps the behaviour a plugin always had."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest

from drills.common.errors import ConfigError
from drills.model.check_families import BUILTIN as BUILTIN_CHECKS
from drills.model.check_families import family_of as family_of_check
from drills.model.check_families import parts_of, reads
from drills.model.faults import (
    BUILTIN_FAULTS,
    DockerFault,
    FaultSpec,
    family_of,
    kills,
    kinds_of,
    replaced_kinds,
    waits_for_replacement,
)
from drills.model.scenario import load_scenario
from injectors.base import known_kinds

BUILTIN_KINDS = [k for m in BUILTIN_FAULTS for k in kinds_of(m)]


def test_every_builtin_kind_has_one_family_and_an_injector() -> None:
    assert len(BUILTIN_KINDS) == len(set(BUILTIN_KINDS))
    for kind in BUILTIN_KINDS:
        family = family_of(kind)
        assert family is not None and kind in kinds_of(family)
    assert set(BUILTIN_KINDS) <= set(known_kinds())


def test_the_kills_are_the_faults_that_take_a_target_away() -> None:
    assert sorted(k for k in BUILTIN_KINDS if kills(k)) == [
        "docker.kill",
        "docker.stop",
        "kubernetes.delete_pod",
        "process.kill",
    ]
    assert not kills("no.such_kind")


def test_a_phase_waits_only_for_kinds_whose_injector_can_tell() -> None:
    assert replaced_kinds() == (
        "docker.kill",
        "docker.restart",
        "kubernetes.delete_pod",
        "process.kill",
    )
    for kind in BUILTIN_KINDS:
        assert waits_for_replacement(kind) == (kind in replaced_kinds()), kind
    # docker.stop takes the container away and nothing brings it back by itself.
    assert kills("docker.stop") and not waits_for_replacement("docker.stop")


@pytest.mark.parametrize(
    ("trait", "families"),
    [
        ("on_toxiproxy", {"toxiproxy"}),
        ("on_hop", {"hop"}),
        ("on_stack_process", {"process"}),
    ],
)
def test_where_each_family_acts(trait: str, families: set[str]) -> None:
    acting = {k.split(".")[0] for k in BUILTIN_KINDS if getattr(family_of(k), trait)}
    assert acting == families


def test_hardware_and_orchestrators() -> None:
    assert {k for k in BUILTIN_KINDS if family_of(k).hardware} == {"gpu.memory_pressure"}  # type: ignore[union-attr]
    orchestrated = {k.split(".")[0]: family_of(k).orchestrator for k in BUILTIN_KINDS}  # type: ignore[union-attr]
    assert orchestrated["docker"] == "Docker" and orchestrated["kubernetes"] == "Kubernetes"
    assert {v for k, v in orchestrated.items() if k not in ("docker", "kubernetes")} == {None}


def test_every_builtin_family_says_how_its_target_is_found() -> None:
    for kind in BUILTIN_KINDS:
        family = family_of(kind)
        assert family is not None
        if not family.on_toxiproxy:  # the dry run reads Toxiproxy's hops itself
            assert family.resolves != FaultSpec.resolves, kind


def test_the_docker_daemon_is_the_familys_own_field() -> None:
    remote = DockerFault.model_validate(
        {"kind": "docker.kill", "target": "vllm-0", "host": "ssh://ops@gpu-host"}
    )
    assert remote.daemon == "ssh://ops@gpu-host"
    assert DockerFault.model_validate({"kind": "docker.kill", "target": "x"}).daemon is None


class CpuHogFault(FaultSpec):
    """A plugin's family that declares no trait."""

    kind: Literal["cpuhog.burn"]


def test_a_plugin_family_that_declares_nothing_keeps_a_plugins_behaviour() -> None:
    fault = CpuHogFault.model_validate({"kind": "cpuhog.burn", "target": "host"})
    assert not fault.on_toxiproxy and not fault.on_hop and not fault.on_stack_process
    assert fault.hardware is None and fault.orchestrator is None and fault.daemon is None
    assert fault.resolves == "at run time" and fault.kills == frozenset()
    # A phase may wait for it: its injector says at run time whether it can tell (Recovers).
    assert fault.replaced is None
    assert waits_for_replacement("cpuhog.burn")  # not registered: no family, nothing assumed


TINY = Path(__file__).resolve().parent / "scenarios" / "tiny.yaml"


def with_checks(tmp_path: Path, checks: list[str], faults: list[str] | None = None) -> Path:
    """tests/scenarios/tiny.yaml with ``checks`` (YAML flow mappings) in place of its own, and
    ``faults`` in place of its fault phase's."""
    text = TINY.read_text().replace("../../scenarios/", str(TINY.parents[2] / "scenarios") + "/")
    head, _, _ = text.partition("expect:\n")
    if faults is not None:
        old = "      - {kind: toxiproxy.latency, target: vllm-0, latency: 200ms}\n"
        head = head.replace(old, "".join(f"      - {f}\n" for f in faults))
    path = tmp_path / "drill.yaml"
    path.write_text(head + "expect:\n" + "".join(f"  - {c}\n" for c in checks))
    return path


@pytest.mark.parametrize(
    ("check", "faults", "message"),
    [
        (
            "{check: breaker_opened_within, target: vllm-1, below: 10s}",
            None,
            "expect[0].target: no fault of the drill targets it; expected one of: vllm-0",
        ),
        (
            "{check: replacement_ready_within, target: vllm-0, below: 60s}",
            None,
            "expect[0].target: no kill fault of the drill targets it; expected one of: "
            "(no kill faults)",
        ),
        (
            "{check: replacement_ready_within, target: vllm-1, below: 60s}",
            ["{kind: process.kill, target: vllm-0}"],
            "expect[0].target: no kill fault of the drill targets it; expected one of: vllm-0",
        ),
    ],
)
def test_a_check_family_says_what_its_target_needs(
    tmp_path: Path, check: str, faults: list[str] | None, message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_scenario(with_checks(tmp_path, [check], faults))
    assert any(message in p for p in refused.value.problems), refused.value.problems


def test_a_breaker_may_be_named_apart_from_a_kill_faults_selector(tmp_path: Path) -> None:
    path = with_checks(
        tmp_path,
        ["{check: breaker_opened_within, target: vllm-1, below: 10s}"],
        ["{kind: docker.kill, target: 'label:drills.replica=vllm-1'}"],
    )
    scenario, _ = load_scenario(path)
    assert family_of_check("breaker_opened_within").target_rule == "faulted_hop"  # type: ignore[union-attr]
    assert scenario.expect[0].target == "vllm-1"


def test_the_target_rules_of_the_builtin_families() -> None:
    rules = {f.family: f.target_rule for f in BUILTIN_CHECKS if f.target_rule}
    assert rules == {
        "breaker_opened_within": "faulted_hop",
        "replacement_ready_within": "killed",
        "recovered_within": "any_fault",
        # Timed from a fault's application or a load spike's start (drills.checks.onset).
        "alert_fired": "onset",
        "alert_paged": "onset",
        "alert_resolved_within": "onset",
    }


def test_what_each_check_family_reads_and_the_parts_it_needs() -> None:
    read = {what: sorted(f.family for f in BUILTIN_CHECKS if what in f.reads) for what in (
        "monitoring", "engine_metrics", "agent_tasks", "recall_probe")}  # fmt: skip
    assert read == {
        "monitoring": sorted(
            [
                "promql",
                "alert_fired",
                "alert_paged",
                "alert_resolved_within",
                "alert_quiet",
                "alert_runbook",
            ]
        ),
        "engine_metrics": ["engine", "engine_kv_cache"],
        "agent_tasks": sorted(
            ["tasks_unfinished", "tasks_resumed", "tasks_duplicate_effects", "tasks_answer_changed"]
        ),
        "recall_probe": ["retrieval_recall"],
    }
    assert reads("engine.requests.abort", "engine_metrics") and not reads("e2e.p99", "monitoring")
    assert sorted(f.family for f in BUILTIN_CHECKS if "rag" in f.parts) == [
        "missing_context_share",
        "retrieval_recall",
        "tool_timeouts",
    ]
    assert parts_of("no_such_check") == frozenset()
