"""A drill starts only the parts of its stack profile it needs: the retrieval and agent part
(Triton, the vector DB, the tool server) for a drill that uses it, for no other. Read from the
scenario alone, before anything starts; the stack started that way is tested in
test_stack_lifecycle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.engine.options import RunOptions, parts_for_all
from drills.engine.parts import needed_parts
from drills.model.scenario import Scenario, load_scenario
from stack.config import load_stack_config, parts_of, without_parts

ROOT = Path(__file__).resolve().parent.parent
SOUND = load_stack_config("sound")
LATENCY = yaml.safe_load((ROOT / "scenarios" / "inference-latency.yaml").read_text())


def scenario(**changes: Any) -> Scenario:
    """The latency drill with ``changes`` (top-level keys; ``load`` is merged)."""
    data = {**LATENCY, **{k: v for k, v in changes.items() if k != "load"}}
    data["load"] = {**LATENCY["load"], **changes.get("load", {})}
    return Scenario.model_validate(data)


@pytest.mark.parametrize(
    ("name", "needs_rag"),
    [
        ("inference-latency.yaml", False),
        ("gpu-pod-loss.yaml", False),
        ("vector-db-outage.yaml", True),
        ("tool-saturation.yaml", True),
    ],
)
def test_the_shipped_drills_need_what_they_touch(name: str, needs_rag: bool) -> None:
    loaded, _ = load_scenario(ROOT / "scenarios" / name)
    needed = needed_parts([loaded], SOUND)
    assert ("rag" in needed) is needs_rag, needed
    if needs_rag:
        assert needed["rag"].startswith(f"drill {loaded.drill}: ")


FAULT = {"kind": "toxiproxy.latency", "at": "0s", "for": "5s", "latency": "1s"}


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"load": {"endpoint": "rag"}}, "load.endpoint is 'rag'"),
        ({"load": {"endpoint": "agent"}}, "load.endpoint is 'agent'"),
        ({"retrieval_probe": True}, "retrieval_probe is on"),
        (
            {
                "phases": [
                    {"name": "f", "duration": "10s", "inject": [{**FAULT, "target": "triton"}]}
                ]
            },
            "phases[0].inject[0] (toxiproxy.latency) targets triton",
        ),
        (
            {
                "phases": [
                    {
                        "name": "f",
                        "duration": "10s",
                        "inject": [{"kind": "process.kill", "target": "vectordb"}],
                    }
                ]
            },
            "phases[0].inject[0] (process.kill) targets vectordb",
        ),
        (
            {
                "phases": [
                    {
                        "name": "f",
                        "duration": "10s",
                        "inject": [{"kind": "tool.saturate", "target": "search_kb"}],
                    }
                ]
            },
            "phases[0].inject[0] floods tool search_kb on the stack's tool server",
        ),
        (
            {"expect": [{"check": "prometheus", "source": "tools", "metric": "m", "below": 1}]},
            "expect[0].source is tools",
        ),
        (
            {"expect": [{"check": "tool_timeouts", "below": 1}]},
            "expect[0] is a tool_timeouts check",
        ),
        (
            {
                "expect": [
                    {"check": "retry_amplification", "target": "tools:search_kb", "below": 1.2}
                ]
            },
            "expect[0].target is tools:search_kb",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_use_of_the_retrieval_part_is_named(changes: dict[str, Any], why: str) -> None:
    assert needed_parts([scenario(**changes)], SOUND) == {"rag": f"drill inference-latency: {why}"}


def test_a_tool_flood_of_another_server_and_a_chat_drill_need_nothing() -> None:
    flood = {"kind": "tool.saturate", "target": "search_kb", "url": "http://127.0.0.1:9/mcp"}
    elsewhere = scenario(phases=[{"name": "f", "duration": "10s", "inject": [flood]}])
    assert needed_parts([elsewhere], SOUND) == {}
    assert needed_parts([scenario()], SOUND) == {}
    # Retries counted at the model hops are the engines' part.
    models = [{"check": "retry_amplification", "target": "models", "below": 1.2}]
    assert needed_parts([scenario(expect=models)], SOUND) == {}
    # A profile without the part: nothing to start, whatever the drill does.
    single = load_stack_config("unsound-single")
    assert needed_parts([scenario(load={"endpoint": "rag"})], single) == {}


def test_a_day_or_a_gate_starts_what_any_of_its_drills_needs() -> None:
    chat, rag = scenario(), scenario(load={"endpoint": "rag"})
    assert parts_for_all([chat], RunOptions(out_dir=Path("runs"))) == frozenset()
    assert parts_for_all([chat, rag], RunOptions(out_dir=Path("runs"))) == {"rag"}
    asked = RunOptions(out_dir=Path("runs"), with_parts=frozenset({"rag"}))
    assert parts_for_all([chat], asked) == {"rag"}


def test_the_config_started_without_a_part_is_the_profile_less_that_section(
    tmp_path: Path,
) -> None:
    source = ROOT / "stack" / "profiles" / "sound.yaml"
    assert without_parts(source, frozenset()) == source.read_text()
    trimmed = tmp_path / "stack.yaml"
    trimmed.write_text(without_parts(source, frozenset({"rag"})))
    config = load_stack_config(trimmed)
    assert parts_of(config) == frozenset() and parts_of(SOUND) == {"rag"}
    assert config.model_dump(exclude={"rag"}) == SOUND.model_dump(exclude={"rag"})
    assert trimmed.read_text().startswith(f"# {source}, started without rag")


DRY_RUN = [sys.executable, "-m", "drills.cli", "run", "scenarios/inference-latency.yaml"]


def test_dry_run_says_what_is_started_and_why() -> None:
    def plan(*args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "drills.cli", "run", *args, "--dry-run"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        return result.stdout

    assert "    without rag (not needed;" in plan("scenarios/inference-latency.yaml")
    assert "    with rag: asked for" in plan("scenarios/inference-latency.yaml", "--with", "rag")
    assert "    with rag: drill vector-db-outage: load.endpoint is 'rag'" in plan(
        "scenarios/vector-db-outage.yaml"
    )
    wrong = subprocess.run(
        [*DRY_RUN, "--with", "triton", "--dry-run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert wrong.returncode == 2
    assert "--with: invalid choice: 'triton' (choose from 'rag')" in wrong.stderr
