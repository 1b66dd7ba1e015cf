"""Malformed, hostile and huge scenario files: a clean located error (exit code 2), never a
traceback or a hang, and nothing applied."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drills.common.errors import ConfigError
from drills.model.scenario import load_scenario
from tests.conftest import RunningStack, drills_cli, isolated_env

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "scenarios" / "inference-latency.yaml"
VALID = yaml.safe_load(SHIPPED.read_text())

BILLION_LAUGHS = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "drill: x",
        "title: y",
        "load: {users: 1, prompts: *i}",
        "phases: [{name: a, duration: 1s}]",
        "expect: [{check: error_rate, below: 1}]",
    ]
)

HOSTILE = {
    "billion-laughs": (BILLION_LAUGHS, "expands to more than 100000 values"),
    "deep": ("drill: " + "[" * 5000 + "]" * 5000, "nested"),
    "recursive-alias": ("a: &a [*a]\n", "refers to itself"),
    "python-tag": ("drill: !!python/object/apply:os.system ['true']\n", "invalid YAML"),
    "binary": ("\x00\x01\x02drill", "invalid YAML"),
    "not-a-mapping": ("- 1\n- 2\n", "Input should be"),
    "duplicate-key": ("drill: a\ndrill: b\n", "duplicate key 'drill'"),
    "tab-indent": ("drill: a\n\tphases: []\n", "invalid YAML"),
    "empty": ("", "Input should be"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_files_get_clean_errors(name: str, tmp_path: Path) -> None:
    text, expected = HOSTILE[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    message = str(info.value)
    assert str(path) in message and expected in message, message


def test_huge_and_non_utf8_files(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_text("title: '" + "x" * (2 * 1024 * 1024) + "'\n")
    with pytest.raises(ConfigError, match="at most 1048576 bytes"):
        load_scenario(huge)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("title: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_scenario(latin)


# Values a hand (or a bad template) might put anywhere in a scenario.
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["1s", "-5s", "0ms", "2h", "1e9s", "abc", "toxiproxy.latency", "vllm-0"]),
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(data: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out += _paths(value, (*prefix, index))
    return out


PATHS = [p for p in _paths(VALID) if p]


def _replace(data: object, path: tuple, value: object) -> object:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(data, dict):
        return {**data, head: _replace(data[head], rest, value)}
    assert isinstance(data, list)
    return [_replace(v, rest, value) if i == head else v for i, v in enumerate(data)]


def _check(path: Path, data: object) -> None:
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    try:
        load_scenario(path)
    except ConfigError as exc:
        assert exc.problems, "an error must say what is wrong"
        for problem in exc.problems:
            assert problem.startswith(f"{path}"), problem


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.sampled_from(PATHS), values)
def test_any_single_corruption_of_a_valid_scenario_is_a_clean_error_or_valid(
    tmp_path: Path, where: tuple, value: object
) -> None:
    _check(tmp_path / "mutated.yaml", _replace(VALID, where, value))


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values)
def test_arbitrary_documents_are_clean_errors(tmp_path: Path, data: object) -> None:
    _check(tmp_path / "random.yaml", data)


@pytest.mark.stack
def test_cli_refuses_a_hostile_file_with_exit_2_and_applies_nothing(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    # Valid up to a fault whose second half is malformed: nothing of the first may be applied.
    bad.write_text(
        SHIPPED.read_text().replace("latency: 3s}", "latency: 3 seconds}", 1) + "\nextra: &x [*x]\n"
    )
    for text in (bad.read_text(), BILLION_LAUGHS):
        bad.write_text(text)
        result = subprocess.run(
            drills_cli(
                "run",
                str(bad),
                *stack.attach_args(),
                "--out",
                str(tmp_path / "runs"),
            ),
            capture_output=True,
            text=True,
            env=isolated_env(tmp_path),
            timeout=60,
        )
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr and f"{bad}:" in result.stderr
        assert stack.toxics() == []
        assert not (tmp_path / "runs").exists()
    bad.write_text(SHIPPED.read_text().replace("latency: 3s}", "latency: 3 seconds}", 1))
    located = subprocess.run(
        drills_cli("validate", str(bad)), capture_output=True, text=True, timeout=60
    )
    assert located.returncode == 2
    assert "phases[1].inject[0].latency" in located.stderr and "3 seconds" in located.stderr
