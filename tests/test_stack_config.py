"""Stack configs: the shipped profiles load; bad ones are refused with file, line, field, value
and what is allowed; the CLI maps them to exit code 2 and starts nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from drills.common.errors import ConfigError
from stack.config import load_stack_config
from tests.helpers import problems

PROFILES = Path(__file__).resolve().parent.parent / "stack" / "profiles"
SOUND = (PROFILES / "sound.yaml").read_text()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stack.yaml"
    path.write_text(text)
    return path


def line_of(text: str, needle: str) -> int:
    """The first line that starts (indentation aside) with ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.strip().startswith(needle))


def test_shipped_profiles_load() -> None:
    sound = load_stack_config("sound")
    assert [(u.name, u.role) for u in sound.upstreams] == [
        ("vllm-0", "primary"),
        ("vllm-1", "primary"),
        ("backup", "backup"),
        ("canary", "canary"),
    ]
    # The canary's hop is there for the canary profiles' gateways; sound's routes nothing to it.
    assert sound.gateway.canary is None
    assert sound.gateway.timeouts.first_token == 2.0
    unsound = load_stack_config("unsound")
    assert unsound.gateway.retries.max_attempts is None
    assert unsound.gateway.breaker is None and unsound.gateway.fallback.text is None


def test_unknown_field_names_file_line_and_allowed_fields(tmp_path: Path) -> None:
    text = SOUND.replace("    first_token: 2s", "    first_tokn: 2s")
    path = write(tmp_path, text)
    [problem] = problems(load_stack_config, path)
    assert problem.startswith(f"{path}:{line_of(text, 'first_tokn')} gateway.timeouts.first_tokn:")
    assert "unknown field; allowed: connect, first_token, model_call, queue, request" in problem
    assert "(got '2s')" in problem


def test_duration_without_unit_is_refused(tmp_path: Path) -> None:
    text = SOUND.replace("    model_call: 10s", "    model_call: 10")
    path = write(tmp_path, text)
    [problem] = problems(load_stack_config, path)
    assert f":{line_of(text, 'model_call: 10')} gateway.timeouts.model_call:" in problem
    assert "a duration needs a unit" in problem and "(got 10)" in problem


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    # The first reset_timeout is the model breakers' (the RAG and agent paths have their own).
    text = SOUND.replace("max_queue: 16", "max_queue: -1").replace(
        "reset_timeout: 5s", "reset_timeout: soon", 1
    )
    found = problems(load_stack_config, write(tmp_path, text))
    assert len(found) == 2
    assert any("gateway.admission.max_queue" in p and "-1" in p for p in found)
    assert any("gateway.breaker.reset_timeout" in p and "'soon'" in p for p in found)


def test_clashing_ports_and_unknown_backup_engine(tmp_path: Path) -> None:
    text = SOUND.replace("proxy_port: 18210", "proxy_port: 18200").replace(
        "engine: vllm-1  ", "engine: vllm-9  "
    )
    path = write(tmp_path, text)
    found = problems(load_stack_config, path)
    assert any(
        p.startswith(f"{path}:{line_of(text, 'proxy_port: 18200')} backup.proxy_port:")
        and "already used by replicas.0.proxy_port" in p
        for p in found
    ), found
    assert any(
        "backup.engine: no replica of that name; expected one of: vllm-0, vllm-1" in p
        and "'vllm-9'" in p
        for p in found
    ), found


def test_malformed_yaml_and_duplicate_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "name: x\nreplicas: [\n")
    [problem] = problems(load_stack_config, path)
    assert problem.startswith(f"{path}:") and "invalid YAML" in problem
    path = write(tmp_path, SOUND + "name: again\n")
    [problem] = problems(load_stack_config, path)
    assert "duplicate key 'name'" in problem


def test_unknown_profile_lists_the_shipped_ones() -> None:
    with pytest.raises(ConfigError) as info:
        load_stack_config("nosuch")
    assert (
        "shipped profiles: canary, canary-long, engine-queueing, sound, sound-docker, "
        "unbounded-waits, unsound, unsound-agent, unsound-single" in str(info.value)
    )


def test_cli_refuses_bad_config_with_exit_2_and_starts_nothing(tmp_path: Path) -> None:
    text = SOUND.replace("  max_num_seqs: 4", "  max_num_seqs: many")
    path = write(tmp_path, text)
    state_dir = tmp_path / "state"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "drills.cli",
            "stack",
            "up",
            "--profile",
            str(path),
            "--state-dir",
            str(state_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert f"{path}:{line_of(text, 'max_num_seqs')} engine.max_num_seqs:" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (state_dir / "state.json").exists()


def test_cli_usage_error_is_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "drills.cli", "stack", "sideways"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "invalid choice: 'sideways'" in result.stderr


def test_rag_section_problems_are_located(tmp_path: Path) -> None:
    text = SOUND.replace("proxy_port: 18310}", "proxy_port: 18080}").replace(
        "probe: [search_kb]", "probe: [search_kb, drop_tables]"
    )
    found = problems(load_stack_config, write(tmp_path, text))
    assert any(
        "rag.embedder.proxy_port" in p and "port 18080 is already used by gateway.port" in p
        for p in found
    ), found
    assert any(
        "rag.tools.agents.probe" in p and "unknown tool" in p and "drop_tables" in p for p in found
    ), found


def test_tritons_sockets_fit_a_unix_socket_path_whatever_the_state_folder(tmp_path: Path) -> None:
    from stack.components import SUN_PATH_MAX, triton_workspace

    short = Path("/tmp/s")
    assert triton_workspace(short) == short / "triton-workspace"
    deep = tmp_path / ("a-long-folder-name-" * 6) / "state"
    workspace = triton_workspace(deep)
    assert workspace != deep / "triton-workspace"
    assert len(str(workspace / "minilm_0_0-server.sock")) <= SUN_PATH_MAX
    assert triton_workspace(deep) == workspace  # the same folder on every restart


def test_installs_side_by_side_say_a_failure_at_once_and_raise_it_at_the_end(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import threading
    import time

    from drills.common.errors import ProvisionError
    from stack.control import _side_by_side

    ended: list[float] = []
    said: list[str] = []
    release = threading.Event()

    def fails() -> None:
        raise ProvisionError("building Toxiproxy failed")

    def slow() -> None:
        release.wait(10)  # until the failure has been said
        ended.append(time.monotonic())

    def watch_stderr() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not said:
            said.extend(line for line in capsys.readouterr().err.splitlines() if "failed" in line)
            time.sleep(0.05)
        release.set()

    watcher = threading.Thread(target=watch_stderr)
    watcher.start()
    with pytest.raises(ProvisionError, match="building Toxiproxy failed"):
        _side_by_side([fails, slow])
    watcher.join()
    assert ended, "the slow install was waited for"
    assert said == [
        "drills: an install failed: building Toxiproxy failed; waiting for the others to end"
    ]


def test_an_install_beside_the_stack_that_is_not_known_is_refused_before_any() -> None:
    from stack.config import load_stack_config, profile_path
    from stack.control import ALSO, _install

    assert set(ALSO) == {"monitoring"}
    with pytest.raises(
        ValueError, match=r"unknown install\(s\) \['grafana'\]; known: \['monitoring'\]"
    ):
        _install(load_stack_config(profile_path("sound")), ("grafana",))
