"""The GPU pod loss drill, Docker variant: replica vllm-0 of a stack runs in a real container
(on the Docker engine the tests start), its main process is killed under load, Docker's restart
policy brings it back, and the gateway carries the traffic meanwhile. Then its twin, through
``drills run --twin`` on the same stack: a gateway with one replica and no fallback text,
beside it, on which the drill must fail."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from drills.engine.options import RunOptions
from drills.engine.runner import Runner
from drills.model.scenario import Attach, load_scenario
from stack import control
from stack.config import load_stack_config
from tests.conftest import drills_cli, isolated_env, relocated_profile
from tests.docker_env import DockerEnv
from tests.helpers import assert_ended_at_replacement, drill_account, twin_account

pytestmark = [pytest.mark.docker, pytest.mark.stack]

ROOT = Path(__file__).resolve().parent.parent
DRILL = ROOT / "tests" / "scenarios" / "short-pod-loss-docker.yaml"


@pytest.fixture(scope="module")
def docker_stack(
    docker_env: DockerEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Path]]:
    """The sound-docker stack, shared by the drill and its twin (one start-up)."""
    tmp_path = tmp_path_factory.mktemp("docker-stack")
    previous = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = docker_env.host  # the supervisor inherits it
    config = relocated_profile("sound-docker", tmp_path / "sound-docker.yaml")
    state = tmp_path / "state"
    try:
        status = control.up(config, state)
        assert status.healthy, status.as_json()
        yield config, state
    finally:
        control.down(state)
        if previous is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = previous


def test_pod_loss_drill_docker_variant(
    docker_env: DockerEnv, docker_stack: tuple[Path, Path], tmp_path: Path
) -> None:
    config_path, state = docker_stack
    config = load_stack_config(config_path)
    engine = next(c for c in control.status(state).components if c.name == "vllm-0")
    assert engine.container, "vllm-0 should run in a container"
    container = docker_env.client.inspect(engine.container)
    assert (
        container["State"]["Running"]
        and container["HostConfig"]["RestartPolicy"]["Name"] == "always"
    )

    scenario, doc = load_scenario(DRILL)
    host = config.host
    options = RunOptions(
        out_dir=tmp_path / "runs",
        ledger=tmp_path / "ledger.json",
        attach=Attach(
            gateway=f"http://{host}:{config.gateway.port}",
            toxiproxy=f"http://{host}:{config.toxiproxy.api_port}",
        ),
        state_dir=state,
        stack_config=str(config_path),
    )
    journal = Runner(scenario, doc, options).run().model_dump(mode="json")
    assert journal["verdict"] == "passed", drill_account(journal)
    (kill,) = journal["faults"]
    (hit,) = kill["evidence"]["containers"]
    assert hit["before"]["name"].startswith("drills-sound-docker-vllm-0-")
    (back,) = kill["after"]["containers"]
    assert back["restart_count"] == 1 and back["replacement"].startswith(container["Id"][:12])
    assert kill["applied_at"] < back["replacement_started_at"] < back["ready_at"]
    # until: replaced: the fault phase ended once Docker's health events showed it healthy.
    assert_ended_at_replacement(journal, kill["after"]["ready_at"])
    # The supervisor saw Docker replace it, and recorded it like any restart.
    assert docker_env.client.inspect(container["Id"])["RestartCount"] == 1


def test_pod_loss_docker_twin_fails_as_declared(
    docker_env: DockerEnv, docker_stack: tuple[Path, Path], tmp_path: Path
) -> None:
    """`drills run --twin` on the running Docker stack: unsound-single's gateway beside it
    routes to vllm-0 alone, so the container's loss is an outage the drill must catch."""
    config_path, state = docker_stack
    result = subprocess.run(
        drills_cli(
            "run",
            str(DRILL),
            "--twin",
            "--profile",
            str(config_path),
            "--state-dir",
            str(state),
            "--out",
            str(tmp_path / "runs"),
            "--stop-stack",
        ),
        capture_output=True,
        text=True,
        timeout=600,
        env=isolated_env(tmp_path, DOCKER_HOST=docker_env.host),
    )
    (path,) = sorted((tmp_path / "runs").glob("*/journal.json"))
    journal = json.loads(path.read_text())
    twin = journal["twin"]
    assert result.returncode == 0 and twin["held"], (
        f"rc={result.returncode}\n{twin_account(journal)}\n{result.stdout[-2000:]}"
    )
    assert "beside" in twin["stack"], twin["stack"]
    assert sorted(twin["failed"]) == sorted(twin["must_fail"])
    # The twin's kill was real: Docker restarted the container a second time.
    (kill,) = journal["faults"]
    (back,) = kill["after"]["containers"]
    assert back["restart_count"] >= 1 and back["ready_at"]
    assert_ended_at_replacement(journal, kill["after"]["ready_at"])
    # --stop-stack: the drill's own stack, which the twin's gateway ran beside, is stopped
    # after the twin (it was left up), and nothing of it is left.
    assert "stack 'sound-docker': stopped (--stop-stack)" in result.stderr, result.stderr[-2000:]
    assert not control.status(state).running
    assert docker_env.client.containers(labels={"drills.stack": "sound-docker"}) == []
