"""Third-party plugins: a package that declares a fault family (``drills.injectors``) and a
check family (``drills.checks``) through entry points, installed with pip into a temporary
folder, is found by drills in a fresh process. Its fault validates with file:line errors and
appears in the published schema exactly like a built-in one, and a drill runs with its fault and
its check against the real stack."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RunningStack, drills_cli, isolated_env

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "tests" / "fixtures" / "drills_demo_plugin"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo plugin installed by pip (entry points and all) into a folder of its own."""
    site = tmp_path_factory.mktemp("plugin-site")
    source = tmp_path_factory.mktemp("plugin-source") / "drills_demo_plugin"
    shutil.copytree(PLUGIN, source)  # pip builds in the source tree: keep the checkout clean
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(site),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert list(site.glob("drills_demo_plugin-*.dist-info/entry_points.txt"))
    return site


def with_plugin(site: Path, tmp_path: Path) -> dict[str, str]:
    return isolated_env(tmp_path, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))


def drill(tmp_path: Path, extra: str = "") -> tuple[Path, Path]:
    marker = tmp_path / "marker.txt"
    text = (PLUGIN / "demo.yaml").read_text().replace("MARKER_PATH", str(marker))
    text = text.replace("path: " + str(marker) + "}", "path: " + str(marker) + extra + "}")
    path = tmp_path / "demo.yaml"
    path.write_text(text)
    return path, marker


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        drills_cli(*args), env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_a_plugin_fault_and_check_validate_like_built_in_ones(
    plugin_site: Path, tmp_path: Path
) -> None:
    path, _ = drill(tmp_path)
    ok = run(["validate", str(path)], with_plugin(plugin_site, tmp_path))
    assert ok.returncode == 0, ok.stderr
    # A field the plugin's model does not have: file, line, field path, what is allowed.
    bad, _ = drill(tmp_path, ", colour: red")
    refused = run(["validate", str(bad)], with_plugin(plugin_site, tmp_path))
    assert refused.returncode == 2
    line = next(i for i, t in enumerate(bad.read_text().splitlines(), 1) if "colour" in t)
    assert f"{bad}:{line} phases[1].inject[0].colour: unknown field" in refused.stderr


def test_without_the_plugin_its_kind_and_check_are_unknown(tmp_path: Path) -> None:
    path, _ = drill(tmp_path)
    refused = run(["validate", str(path)], isolated_env(tmp_path))
    assert refused.returncode == 2
    assert "phases[1].inject[0]" in refused.stderr and "'demo.marker'" in refused.stderr
    assert "unknown check 'marker_held'" in refused.stderr


def test_a_plugin_gateway_adapter_is_known_by_name(plugin_site: Path, tmp_path: Path) -> None:
    path, _ = drill(tmp_path)
    text = path.read_text().replace(
        "stack: sound",
        "stack: {attach: {gateway: 'http://127.0.0.1:9', toxiproxy: 'http://127.0.0.1:9', "
        "adapter: demo-gateway}}",
    )
    path.write_text(text)
    ok = run(["validate", str(path)], with_plugin(plugin_site, tmp_path))
    assert ok.returncode == 0, ok.stderr
    refused = run(["validate", str(path)], isolated_env(tmp_path))
    assert refused.returncode == 2
    assert "stack.attach.adapter: unknown gateway adapter 'demo-gateway'" in refused.stderr


def test_the_published_scenario_schema_has_the_plugin_fault(
    plugin_site: Path, tmp_path: Path
) -> None:
    out = run(["schema", "scenario"], with_plugin(plugin_site, tmp_path))
    assert out.returncode == 0, out.stderr
    schema = json.loads(out.stdout)
    assert schema["$defs"]["MarkerFault"]["properties"]["kind"]["const"] == "demo.marker"
    mapping = schema["$defs"]["Phase"]["properties"]["inject"]["items"]["discriminator"]
    assert "demo.marker" in mapping["mapping"] and "toxiproxy.latency" in mapping["mapping"]


@pytest.mark.stack
def test_a_drill_runs_with_the_plugin_fault_and_check(
    plugin_site: Path, stack: RunningStack, tmp_path: Path
) -> None:
    path, marker = drill(tmp_path)
    out = run(
        [
            "run",
            str(path),
            *stack.attach_args(),
            "--out",
            str(tmp_path / "runs"),
        ],
        with_plugin(plugin_site, tmp_path),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    journal = json.loads(next((tmp_path / "runs").glob("*/journal.json")).read_text())
    [fault] = journal["faults"]
    assert fault["kind"] == "demo.marker" and fault["evidence"]["marker"] == str(marker)
    assert fault["rollback"]["method"] == "marker removed"
    assert not marker.exists()  # reverted for real
    held = next(c for c in journal["checks"] if c["check"] == "marker_held")
    assert held["passed"] and 3.5 < held["observed"] < 6, held
