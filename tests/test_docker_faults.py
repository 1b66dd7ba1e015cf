"""Container faults against a real Docker engine (started by the tests): kill with a restart
policy, stop, pause, cutting the network; evidence read back from the daemon; reverts, the
sweep after a crash, and a selector that matches nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from drills.common.docker import DockerClient, DockerError
from drills.common.errors import InjectionFailed, InputError, SafetyViolation
from drills.engine.ledger import Ledger
from drills.model.faults import DockerFault
from injectors.base import InjectionContext, build
from tests.conftest import drills_cli, free_port, isolated_env
from tests.docker_env import IMAGE, NETWORK, DockerEnv, SshDocker
from tests.helpers import drill_with_docker_fault

pytestmark = pytest.mark.docker


def fault(kind: str, target: str, env: DockerEnv, **extra: object) -> object:
    spec = DockerFault.model_validate({"kind": kind, "target": target, "host": env.host, **extra})
    return build(spec, InjectionContext("run1", ""), 0)


@pytest.fixture
def pair(docker_env: DockerEnv) -> Iterator[list[str]]:
    """Two replicas of a service (label app=tiny), restarted by Docker when they die, with a
    health check, on a bridge network of their own."""
    names = []
    for i in range(2):
        name = f"tiny-{i}-{int(time.time() * 1000) % 100000}"
        # Through the API: the CLI's --health-cmd needs a shell in the image, and this image
        # is one static binary.
        created = docker_env.client.create(
            name,
            IMAGE,
            env={"PORT": "8080"},
            labels={"app": "tiny", "replica": str(i)},
            healthcheck={
                "test": ["CMD", "/server", "-check"],
                "interval": 500_000_000,
                "start_period": 1_000_000_000,
                "retries": 3,
            },
            host_config={"restart_policy": {"Name": "always"}, "network_mode": NETWORK},
        )
        docker_env.client.start(created)
        names.append(name)
    deadline = time.monotonic() + 60
    while any(
        docker_env.client.inspect(n)["State"].get("Health", {}).get("Status") != "healthy"
        for n in names
    ):
        assert time.monotonic() < deadline, "the test containers never became healthy"
        time.sleep(0.3)
    yield names
    docker_env.docker("rm", "-f", *names)


def test_kill_one_of_a_label_selection_and_watch_docker_restart_it(
    docker_env: DockerEnv,
    pair: list[str],
) -> None:
    injector = fault("docker.kill", "label:app=tiny", docker_env)
    evidence = injector.apply()
    (hit,) = evidence["containers"]  # mode: one
    assert hit["before"]["name"] == pair[0] and hit["before"]["running"]
    after = hit["after"]
    assert not after["running"] or after["started_at"] != hit["before"]["started_at"]
    assert injector.revert()["method"].startswith("none")
    other = docker_env.client.inspect(pair[1])
    assert other["RestartCount"] == 0  # the other replica was not touched
    deadline = time.monotonic() + 60
    while True:
        observed = injector.observe()
        if observed["ready_at"]:
            break
        assert time.monotonic() < deadline, observed
        time.sleep(0.5)
    (back,) = observed["containers"]
    assert back["restart_count"] == 1
    assert evidence["applied_at"] < back["replacement_started_at"] <= observed["ready_at"]


def _tiny(env: DockerEnv, name: str, labels: dict[str, str], restart: str) -> str:
    created = env.client.create(
        name,
        IMAGE,
        env={"PORT": "8080"},
        labels=labels,
        healthcheck={
            "test": ["CMD", "/server", "-check"],
            "interval": 500_000_000,
            "start_period": 1_000_000_000,
            "retries": 3,
        },
        host_config={"restart_policy": {"Name": restart}, "network_mode": NETWORK},
    )
    env.client.start(created)
    return created


def test_a_replacement_with_a_new_id_is_timed_by_its_own_healthy_event(
    docker_env: DockerEnv,
) -> None:
    """An orchestrator (Compose, Nomad, Swarm) replaces a dead container with a new one, a new
    id with the same labels. Its "healthy" is watched live from the fault's start: the daemon
    keeps only its last 256 events, and here that one is pushed out of them before the fault
    is observed."""
    tag = f"{int(time.time() * 1000) % 100000}"
    labels = {"app": f"tiny-re-{tag}"}
    victim = _tiny(docker_env, f"tiny-re-{tag}-a", labels, "no")
    churn = _tiny(docker_env, f"tiny-re-{tag}-churn", {"app": f"churn-{tag}"}, "no")
    names = [f"tiny-re-{tag}-churn", f"tiny-re-{tag}-a"]
    try:
        deadline = time.monotonic() + 60
        while docker_env.client.inspect(victim)["State"].get("Health", {}).get("Status") != (
            "healthy"
        ):
            assert time.monotonic() < deadline, "the victim never became healthy"
            time.sleep(0.3)
        injector = fault("docker.kill", f"label:app={labels['app']}", docker_env)
        applied_at = injector.apply()["applied_at"]
        # The orchestrator's part: the dead container is removed, a new one takes its place.
        docker_env.client.remove(victim)
        names[-1] = f"tiny-re-{tag}-b"
        replacement = _tiny(docker_env, names[-1], labels, "no")
        while docker_env.client.inspect(replacement)["State"].get("Health", {}).get("Status") != (
            "healthy"
        ):
            assert time.monotonic() < deadline, "the replacement never became healthy"
            time.sleep(0.3)
        healthy_seen = time.time()
        # Other containers' events push the replacement's "healthy" out of the daemon's history
        # (a rename is one event).
        api = docker.APIClient(base_url=docker_env.host)
        for i in range(300):
            api.rename(churn, f"tiny-re-{tag}-churn{'' if i % 2 else '-x'}")
        api.close()
        kept = docker_env.client.events(applied_at, time.time(), replacement)
        assert not [e for e in kept if e.get("status") == "health_status: healthy"], kept
        observed = injector.observe()
        (back,) = observed["containers"]
        assert replacement.startswith(back["replacement"])
        assert applied_at < back["replacement_started_at"] <= back["ready_at"] <= healthy_seen
        assert observed["ready_at"] == back["ready_at"]
    finally:
        docker_env.docker("rm", "-f", *names)


def test_pause_and_unpause(docker_env: DockerEnv, pair: list[str]) -> None:
    injector = fault("docker.pause", pair[1], docker_env)
    (hit,) = injector.apply()["containers"]
    assert hit["after"]["paused"] and hit["after"]["status"] == "paused"
    assert injector.revert()["method"] == f"{pair[1]}: unpaused"
    assert not docker_env.client.inspect(pair[1])["State"]["Paused"]
    assert injector.revert()["method"] == "nothing left to undo"  # twice is harmless


def test_stop_and_start_again(docker_env: DockerEnv, pair: list[str]) -> None:
    injector = fault("docker.stop", pair[0], docker_env, grace="1s")
    (hit,) = injector.apply()["containers"]
    assert hit["after"]["running"] is False
    assert injector.revert()["method"] == f"{pair[0]}: started"
    assert docker_env.client.inspect(pair[0])["State"]["Running"]


def test_cut_the_network_and_reconnect(docker_env: DockerEnv, pair: list[str]) -> None:
    injector = fault("docker.disconnect", pair[0], docker_env, network=NETWORK)
    (hit,) = injector.apply()["containers"]
    assert NETWORK in hit["before"]["networks"] and NETWORK not in hit["after"]["networks"]
    assert injector.revert()["method"] == f"{pair[0]}: reconnected to {NETWORK}"
    networks = docker_env.client.inspect(pair[0])["NetworkSettings"]["Networks"]
    assert NETWORK in networks


def test_a_fault_over_the_container_limit_is_refused_untouched(
    docker_env: DockerEnv, pair: list[str]
) -> None:
    spec = DockerFault.model_validate(
        {"kind": "docker.pause", "target": "label:app=tiny", "mode": "all", "host": docker_env.host}
    )
    injector = build(spec, InjectionContext("run1", "", max_containers=1), 0)
    with pytest.raises(SafetyViolation, match=r"would hit 2 containers .* max_containers is 1"):
        injector.apply()
    assert not any(docker_env.client.inspect(n)["State"]["Paused"] for n in pair)


def test_a_selector_that_matches_nothing_fails(docker_env: DockerEnv) -> None:
    with pytest.raises(InjectionFailed, match="matches no running container"):
        fault("docker.kill", "label:app=nothing-here", docker_env).apply()
    with pytest.raises(Exception, match="a label selector is label:KEY=VALUE"):
        DockerFault.model_validate({"kind": "docker.kill", "target": "label:app"})


def test_a_paused_container_left_by_a_crashed_run_is_unpaused_by_the_sweep(
    docker_env: DockerEnv,
    pair: list[str],
    tmp_path: Path,
) -> None:
    injector = fault("docker.pause", pair[0], docker_env)
    injector.apply()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.record("run1-0", injector.ledger_entry())
    data = json.loads(ledger.path.read_text())
    data["run1-0"]["pid"] = dead.pid  # the run that paused it is gone
    ledger.path.write_text(json.dumps(data))
    removed = ledger.sweep()
    assert [r["method"] for r in removed] == [f"{pair[0]}: unpaused"]
    assert not docker_env.client.inspect(pair[0])["State"]["Paused"]


def test_the_daemon_is_found_as_the_docker_cli_finds_it(
    docker_env: DockerEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No host given: ``$DOCKER_HOST``, else ``$DOCKER_CONTEXT``, else the config's current
    context; the API version is the one the daemon offers."""
    server = docker_env.docker("version", "--format", "{{.Server.APIVersion}}")
    assert docker_env.client.api_version == server
    config = tmp_path / "docker-config"
    cli = {**docker_env.env, "DOCKER_CONFIG": str(config)}
    cli.pop("DOCKER_HOST")
    for name, endpoint in (
        ("drills-plain", f"host={docker_env.host}"),
        (
            "drills-tls",
            f"host={docker_env.tls_host},ca={docker_env.cert_path / 'ca.pem'},"
            f"cert={docker_env.cert_path / 'cert.pem'},key={docker_env.cert_path / 'key.pem'}",
        ),
    ):
        subprocess.run(
            ["docker", "context", "create", name, "--docker", endpoint],
            env=cli,
            check=True,
            capture_output=True,
        )
    subprocess.run(
        ["docker", "context", "use", "drills-plain"], env=cli, check=True, capture_output=True
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    with DockerClient() as client:  # config.json's currentContext
        assert client.host == docker_env.host
        client.ping()
    monkeypatch.setenv("DOCKER_CONTEXT", "drills-tls")  # the context's TLS files are used
    with DockerClient() as client:
        assert client.host == docker_env.tls_host
        assert {c["Id"] for c in client.containers()} == {
            c["Id"] for c in docker_env.client.containers()
        }
    monkeypatch.setenv("DOCKER_CONTEXT", "no-such-context")
    with pytest.raises(DockerError, match="no-such-context"):
        DockerClient()


def test_tls_comes_from_the_environment_as_for_the_docker_cli(
    docker_env: DockerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_env.tls_host)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(docker_env.cert_path))
    with DockerClient() as client:
        client.ping()
        assert client.api_version == docker_env.client.api_version
    # Without the client certificate the daemon refuses: one line naming it.
    monkeypatch.delenv("DOCKER_TLS_VERIFY")
    monkeypatch.delenv("DOCKER_CERT_PATH")
    with pytest.raises(DockerError, match=rf"^Docker at {docker_env.tls_host}: "):
        DockerClient().ping()


def test_a_daemon_over_ssh_is_reached_through_the_ssh_client(
    docker_env: DockerEnv, ssh_docker: SshDocker, pair: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``host: ssh://root@127.0.0.1:PORT``: the client runs ``ssh ... docker system
    dial-stdio`` (keys and known hosts from the ssh config), and a fault lands and is undone
    on the daemon behind it."""
    monkeypatch.setenv("PATH", f"{ssh_docker.bin_dir}:{os.environ['PATH']}")
    with DockerClient(ssh_docker.host) as client:
        client.ping()
        assert client.api_version == docker_env.client.api_version
    spec = DockerFault.model_validate(
        {"kind": "docker.pause", "target": pair[0], "host": ssh_docker.host}
    )
    pause = build(spec, InjectionContext("run-ssh", ""), 0)
    assert [c["name"] for c in pause.preflight()["containers"]] == [pair[0]]
    pause.apply()
    assert docker_env.client.inspect(pair[0])["State"]["Paused"]
    pause.revert()
    assert not docker_env.client.inspect(pair[0])["State"]["Paused"]


def test_preflight_reads_what_would_be_hit_and_refuses_what_cannot_be(
    docker_env: DockerEnv, pair: list[str], tmp_path: Path
) -> None:
    seen = fault("docker.pause", "label:app=tiny", docker_env, mode="all").preflight()
    assert seen["host"] == docker_env.host and seen["api_version"]
    assert [c["name"] for c in seen["containers"]] == sorted(pair)
    assert not any(docker_env.client.inspect(n)["State"]["Paused"] for n in pair)  # read only
    with pytest.raises(InputError, match="matches no running container"):
        fault("docker.kill", "label:app=nothing-here", docker_env).preflight()
    nowhere = f"tcp://127.0.0.1:{free_port()}"
    spec = DockerFault.model_validate({"kind": "docker.kill", "target": pair[0], "host": nowhere})
    with pytest.raises(
        InputError, match=rf"^Docker at {nowhere}: cannot connect: .*set DOCKER_HOST or DOCKER_C"
    ):
        build(spec, InjectionContext("run1", ""), 0).preflight()

    # The dry run reads the same, and says so.
    drill = drill_with_docker_fault(tmp_path, docker_env.host, "label:app=tiny")
    plan = subprocess.run(
        drills_cli("run", str(drill), "--dry-run"),
        capture_output=True,
        text=True,
        env=isolated_env(tmp_path),
        timeout=60,
    )
    assert plan.returncode == 0, plan.stderr
    for name in pair:
        assert f"would hit container {name} (" in plan.stdout
    assert f"running) on {docker_env.host} (API {seen['api_version']})" in plan.stdout
