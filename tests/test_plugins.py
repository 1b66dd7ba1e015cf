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
BROKEN = ROOT / "tests" / "fixtures" / "drills_broken_plugin"


def install(package: Path, site: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """``package`` installed by pip (entry points and all) into ``site``."""
    source = tmp_path_factory.mktemp("plugin-source") / package.name
    shutil.copytree(package, source)  # pip builds in the source tree: keep the checkout clean
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
    assert list(site.glob(f"{package.name}-*.dist-info/entry_points.txt"))


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo plugin installed into a folder of its own."""
    site = tmp_path_factory.mktemp("plugin-site")
    install(PLUGIN, site, tmp_path_factory)
    return site


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo plugin and, beside it, a package of broken plugins (one mistake each)."""
    site = tmp_path_factory.mktemp("broken-site")
    install(PLUGIN, site, tmp_path_factory)
    install(BROKEN, site, tmp_path_factory)
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
    # The plugin check's own fields (its params model), validated at the check's line.
    bad.write_text(path.read_text().replace("judge: longest", "judge: median"))
    refused = run(["validate", str(bad)], with_plugin(plugin_site, tmp_path))
    assert refused.returncode == 2, refused.stderr
    line = next(i for i, t in enumerate(bad.read_text().splitlines(), 1) if "median" in t)
    assert (
        f"{bad}:{line} expect[0]: check 'marker_held': params.judge: Input should be "
        "'longest' or 'shortest' (got 'median')"
    ) in refused.stderr, refused.stderr
    # A built-in family has no params of its own.
    bad.write_text(path.read_text().replace("below: 0.5}", "below: 0.5, params: {x: 1}}"))
    refused = run(["validate", str(bad)], with_plugin(plugin_site, tmp_path))
    assert refused.returncode == 2, refused.stderr
    assert "check 'error_rate' takes no 'params': its family 'rate' has no fields of its own" in (
        refused.stderr
    )


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
    # Check names and adapters are enumerated, the plugin's beside the built-in ones, so that
    # an editor completes them (name patterns expanded: ttft.p99 is one of the names).
    [names] = schema["$defs"]["Check"]["properties"]["check"]["anyOf"]
    assert {"marker_held", "error_rate", "ttft.p99", "engine.requests.abort"} <= set(names["enum"])
    # ... and the plugin check's own fields, for an editor to check and complete.
    [rule] = [
        r
        for r in schema["$defs"]["Check"]["allOf"]
        if r["if"]["properties"]["check"] == {"enum": ["marker_held"]}
    ]
    judge = rule["then"]["properties"]["params"]["properties"]["judge"]
    assert judge["enum"] == ["longest", "shortest"], judge
    adapters = schema["$defs"]["Attach"]["properties"]["adapter"]["anyOf"][0]["enum"]
    assert adapters == ["demo-gateway", "drills", "envoy", "litellm"]


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


def test_broken_plugins_break_only_the_drills_that_use_them(
    broken_site: Path, tmp_path: Path
) -> None:
    """A broken package installed beside a working one: the built-in drills, the working
    plugin's drill and the published schema are untouched."""
    env = with_plugin(broken_site, tmp_path)
    shipped = run(["validate", str(ROOT / "scenarios" / "gpu-pod-loss.yaml")], env)
    assert shipped.returncode == 0, shipped.stderr
    path, _ = drill(tmp_path)
    demo = run(["validate", str(path)], env)
    assert demo.returncode == 0, demo.stderr
    schema = run(["schema", "scenario"], env)
    assert schema.returncode == 0, schema.stderr
    assert '"demo.marker"' in schema.stdout and '"broken.typo"' not in schema.stdout


ENTRY = "entry point drills.{group}:{name} ({target}, from drills-broken-plugin 0.1.0)"
MISTAKES = {
    "a typo in the target": (
        "fault: {kind: broken.typo, target: t}",
        ENTRY.format(
            group="injectors", name="broken.typo", target="drills_broken_plugin:MarkerInjectr"
        )
        + ": could not be loaded: AttributeError: ",
    ),
    "a module that is not installed": (
        "fault: {kind: broken.nomodule, target: t}",
        "drills.injectors:broken.nomodule (drills_broken_plugin_gone:Injector, from "
        "drills-broken-plugin 0.1.0): could not be loaded: ModuleNotFoundError: ",
    ),
    "an injector without spec": (
        "fault: {kind: broken.nospec, target: t}",
        "drills.injectors:broken.nospec (drills_broken_plugin:NoSpec, from drills-broken-plugin "
        "0.1.0): has no `spec`: give the factory `spec = YourFault`",
    ),
    "an entry point named unlike its spec's kind": (
        "fault: {kind: broken.misnamed, target: t}",
        "drills.injectors:broken.misnamed (drills_broken_plugin:Misnamed, from drills-broken-"
        "plugin 0.1.0): its spec OtherFault is of kind 'broken.other'; an entry point's name "
        "must be its fault's kind",
    ),
    "an injector without revert_entry": (
        "fault: {kind: broken.norevert, target: t}",
        "drills.injectors:broken.norevert (drills_broken_plugin:NoRevert, from drills-broken-"
        "plugin 0.1.0): has no `revert_entry(entry) -> dict`: without it a fault left by a "
        "killed run cannot be reverted",
    ),
    "a fault kind that is built in": (
        "fault: {kind: toxiproxy.slicer, target: vllm-0}",
        "drills.injectors:toxiproxy.slicer (drills_broken_plugin:NoRevert, from drills-broken-"
        "plugin 0.1.0): takes the name of the built-in fault kind 'toxiproxy.slicer'",
    ),
    "a check family that is not one": (
        "check: {check: not_a_family, below: 1}",
        "drills.checks:not_a_family (drills_broken_plugin:NOT_A_FAMILY, from drills-broken-"
        "plugin 0.1.0): is a dict, not a drills.model.check_families.CheckFamily",
    ),
    "a check that a built-in family has": (
        "check: {check: fallback_rate, below: 0.5}",
        "drills.checks:claims_fallback_rate (drills_broken_plugin:CLAIMS_FALLBACK_RATE, from "
        "drills-broken-plugin 0.1.0): adds the check 'fallback_rate', which is the built-in "
        "family 'rate''s",
    ),
    "an adapter that is built in": (
        "adapter: envoy",
        "drills.gateways:envoy (drills_broken_plugin:OUR_ENVOY, from drills-broken-plugin "
        "0.1.0): takes the name of the built-in gateway adapter 'envoy'",
    ),
    "an entry point named unlike its adapter": (
        "adapter: misnamed-gw",
        "drills.gateways:misnamed-gw (drills_broken_plugin:OUR_ENVOY, from drills-broken-plugin "
        "0.1.0): loads the gateway adapter 'our-envoy'; an entry point's name must be its gateway",
    ),
}


def with_mistake(tmp_path: Path, use: str) -> Path:
    """The demo drill made to use one broken name: a fault, a check or an adapter."""
    path, marker = drill(tmp_path)
    what, _, value = use.partition(": ")
    text = path.read_text()
    if what == "fault":
        text = text.replace(f"{{kind: demo.marker, target: marker, path: {marker}}}", value)
    elif what == "check":
        text = text.replace("{check: error_rate, below: 0.5}", value)
    else:
        text = text.replace(
            "stack: sound",
            "stack: {attach: {gateway: 'http://127.0.0.1:9', toxiproxy: 'http://127.0.0.1:9', "
            f"adapter: {value}}}}}",
        )
    assert text != path.read_text(), use
    path.write_text(text)
    return path


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_plugin_mistake_is_one_line_naming_its_entry_point_and_the_fix(
    broken_site: Path, tmp_path: Path, mistake: str
) -> None:
    use, said = MISTAKES[mistake]
    path = with_mistake(tmp_path, use)
    refused = run(["validate", str(path)], with_plugin(broken_site, tmp_path))
    assert refused.returncode == 2, refused.stderr
    assert said in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    # Where the drill uses it: file:line of the fault, check or adapter.
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if use[-12:] in t)
    assert f"{path}:{line} " in refused.stderr, refused.stderr


def test_a_drill_with_a_broken_fault_kind_is_refused_before_anything_runs(
    broken_site: Path, tmp_path: Path
) -> None:
    path = with_mistake(tmp_path, "fault: {kind: broken.norevert, target: t}")
    out = run(
        [
            "run",
            str(path),
            "--gateway",
            "http://127.0.0.1:9",
            "--toxiproxy",
            "http://127.0.0.1:9",
            "--out",
            str(tmp_path / "runs"),
        ],
        with_plugin(broken_site, tmp_path),
    )
    assert out.returncode == 2 and "has no `revert_entry(" in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/journal.json"))
