"""Gateway adapters: what the harness reads from a gateway, as data. Built-in ones for ours,
LiteLLM and Envoy; overrides from the attach section; bad adapters refused with file, line and
what is allowed; the liveness probe as the adapter describes it, against a real HTTP server
that answers as LiteLLM does; breaker checks read each adapter's own signal and say it is the
gateway's claim."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from drills.checks import Evaluation, evaluate
from drills.common.errors import StackError
from drills.engine.options import RunOptions, StackEndpoints, check_health, resolve_stack
from drills.model.expect import Check
from drills.model.gateways import BUILTIN, merged
from drills.model.journal import Probe
from drills.model.scenario import Attach, Scenario, load_scenario
from tests.helpers import latency_fault_window, made_up_scenario, problems, serving

T0 = 1_800_000_000.0
ROOT = Path(__file__).resolve().parent.parent


def test_builtin_adapters_and_an_unknown_one() -> None:
    assert set(BUILTIN) >= {"drills", "litellm", "envoy"}
    assert merged("litellm").health.path == "/health/liveliness"
    with pytest.raises(ValueError, match="unknown gateway adapter 'kong'; expected one of: "):
        merged("kong")


def test_an_override_changes_only_what_it_names() -> None:
    over = merged({"use": "litellm", "health": {"path": "/health/readiness", "timeout": "2s"}})
    assert (over.health.path, over.health.timeout) == ("/health/readiness", 2.0)
    assert over.upstream == BUILTIN["litellm"].upstream
    assert over.breaker_opened == BUILTIN["litellm"].breaker_opened


def attached(tmp_path: Path, adapter: str) -> Path:
    text = (ROOT / "scenarios" / "inference-latency.yaml").read_text()
    # Its twin is a stack profile, which a drill that attaches cannot have: left out here.
    text = text[: text.index("\ntwins:")] + text[text.index("\nabort_when:") :]
    text = text.replace(
        "stack: sound",
        "stack:\n  attach:\n    gateway: http://127.0.0.1:4000\n    toxiproxy: "
        f"http://127.0.0.1:8474\n    adapter: {adapter}",
    )
    path = tmp_path / "scenarios" / "drill.yaml"
    path.parent.mkdir()
    path.write_text(text)
    for folder in ("prompts", "runbooks"):
        (path.parent / folder).symlink_to(ROOT / "scenarios" / folder)
    return path


def test_the_attach_section_of_the_readme_validates(tmp_path: Path) -> None:
    scenario, _ = load_scenario(attached(tmp_path, "litellm"))
    assert not isinstance(scenario.stack, str)
    assert scenario.stack.gateway_adapter().name == "litellm"


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ("kong", "unknown gateway adapter 'kong'; expected one of: drills, litellm, envoy"),
        (
            "{use: litellm, upstream: {header: x-litellm-model-id, map: {abc: ''}}}",
            "map: 'abc' maps to no hop",
        ),
        ("{use: envoy, health: {path: ready}}", "should match pattern '^/'"),
        ("{use: litellm, colour: red}", "colour"),
    ],
)
def test_a_bad_adapter_is_refused_where_it_is_written(
    tmp_path: Path, adapter: str, message: str
) -> None:
    path = attached(tmp_path, adapter)
    [problem] = problems(load_scenario, path)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "adapter:" in t)
    assert problem.startswith(f"{path}:{line} stack"), problem
    assert message in problem


class LiteLLMLike(BaseHTTPRequestHandler):
    """Answers as LiteLLM proxy does: ``/health`` needs the key, ``/health/liveliness`` not."""

    def do_GET(self) -> None:
        known = {"/health/liveliness": 200, "/version": 200, "/health": 401}
        status = known.get(self.path, 404)
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b'"I\'m alive!"')

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def litellm_like() -> Iterator[str]:
    with serving(LiteLLMLike) as url:
        yield url


def test_the_liveness_probe_is_the_adapters(litellm_like: str) -> None:
    check_health(StackEndpoints(litellm_like, litellm_like, {}, adapter=merged("litellm")))
    with pytest.raises(StackError, match=r"/health is not healthy: HTTP 401; expected 200"):
        check_health(StackEndpoints(litellm_like, litellm_like, {}, adapter=merged("drills")))


def test_a_health_path_the_gateway_does_not_have_is_bad_input(
    litellm_like: str, tmp_path: Path
) -> None:
    from drills.common.errors import ConfigError

    wrong = "{use: litellm, health: {path: /healthz}}"
    scenario, doc = load_scenario(attached(tmp_path, wrong))
    assert not isinstance(scenario.stack, str)
    adapter = scenario.stack.gateway_adapter()
    with pytest.raises(ConfigError) as info:
        check_health(StackEndpoints(litellm_like, litellm_like, {}, adapter=adapter), doc)
    [problem] = info.value.problems
    assert problem.startswith(f"{doc.path}:")
    assert "stack.attach.adapter.health.path: the gateway at" in problem
    assert "has no '/healthz' (HTTP 404; adapter 'litellm')" in problem
    assert info.value.exit_code == 2


def scenario() -> Scenario:
    latency = {"kind": "toxiproxy.latency", "target": "vllm-0", "latency": "3s"}
    made: Scenario = made_up_scenario(latency)
    return made


def probe(at: float, name: str, value: float, **labels: str) -> Probe:
    return Probe.model_validate(
        {
            "time": T0 + at,
            "source": "gateway",
            "samples": [{"name": name, "labels": labels, "value": value}],
        }
    )


def evaluation(adapter: str, probes: list[Probe]) -> Evaluation:
    fault, phases = latency_fault_window(T0)
    ev = Evaluation(scenario(), [], phases, (T0, T0 + 20), [fault], probes)
    ev.adapter = merged(
        adapter
        if adapter != "litellm"
        else {"use": "litellm", "breaker_opened": {"map": {"dep-a": "vllm-0"}}}
    )
    return ev


def test_litellm_cooldown_read_from_its_deployment_state() -> None:
    state = "litellm_deployment_state"
    probes = [probe(t, state, 0.0, model_id="dep-a") for t in (9, 11, 13)]
    probes += [probe(15, state, 2.0, model_id="dep-a"), probe(17, state, 2.0, model_id="dep-a")]
    probes += [probe(15, state, 2.0, model_id="dep-b")]  # another deployment's cooldown
    ev = evaluation("litellm", probes)
    [opened] = evaluate(ev, [Check(check="breaker_opened_within", target="vllm-0", below="8s")])
    assert opened.passed and opened.observed == pytest.approx(5.0)
    assert "the gateway's claim: litellm_deployment_state (litellm adapter)" in opened.reason


def test_envoy_ejections_counted_as_openings() -> None:
    gauge = "envoy_cluster_outlier_detection_ejections_active"
    values = [0, 1, 1, 0, 1, 0]
    probes = [
        probe(10 + i, gauge, float(v), envoy_cluster_name="vllm-0") for i, v in enumerate(values)
    ]
    ev = evaluation("envoy", probes)
    ev.adapter = merged({"use": "envoy", "breaker_opens": None})
    [opens] = evaluate(ev, [Check(check="breaker_opens", target="vllm-0", during="fault", above=1)])
    assert opens.observed == 2 and opens.passed


def test_a_gateway_that_never_says_its_breaker_opened_fails_the_check() -> None:
    ev = evaluation("drills", [probe(12, "drills_gateway_up", 1.0)])
    [opened] = evaluate(ev, [Check(check="breaker_opened_within", target="vllm-0", below="8s")])
    assert not opened.passed and "never opened" in opened.reason


def test_a_gateway_that_publishes_no_metrics_is_not_scraped_and_makes_no_claim() -> None:
    quiet = merged({"use": "drills", "metrics_path": "none"})
    assert quiet.metrics_path is None
    scenario, _ = load_scenario(ROOT / "scenarios" / "inference-latency.yaml")
    endpoints = resolve_stack(
        scenario,
        RunOptions(
            out_dir=Path("runs"),
            attach=Attach(
                gateway="http://127.0.0.1:9",
                toxiproxy="http://127.0.0.1:9",
                adapter={"use": "drills", "metrics_path": "none"},
            ),
        ),
    )
    assert "gateway" not in endpoints.metrics and "toxiproxy" in endpoints.metrics
    ev = evaluation("drills", [])
    ev.adapter = quiet
    [opened] = evaluate(ev, [Check(check="breaker_opened_within", target="vllm-0", below="8s")])
    assert not opened.passed and opened.observed is None
    assert "its adapter (drills) says it publishes no metrics" in opened.reason, opened.reason


@pytest.mark.parametrize(
    ("value", "served"),
    [
        ("dep-a", "vllm-0"),
        ("10.0.0.9:8000", "10.0.0.9:8000"),  # not in the map: kept as it is
        ("dep-a, dep-b", "vllm-1"),  # retried: the last one answered
        ("10.0.0.9:8000, dep-a : dep-b", "vllm-1"),  # nginx: an internal redirect's group
        ("", None),
        (None, None),
    ],
)
def test_an_upstream_header_naming_several_counts_for_the_last(
    value: str | None, served: str | None
) -> None:
    header = merged(
        {
            "use": "litellm",
            "upstream": {"header": "x-up", "map": {"dep-a": "vllm-0", "dep-b": "vllm-1"}},
        }
    ).upstream
    assert header is not None and header.hop_of(value) == served


def test_an_adapter_map_naming_a_hop_the_stack_does_not_have_is_refused(tmp_path: Path) -> None:
    from drills.common.errors import ConfigError
    from drills.model.scenario import check_adapter_hops

    path = attached(
        tmp_path, "{use: litellm, upstream: {header: x-litellm-model-id, map: {dep-a: vllm-9}}}"
    )
    scenario, doc = load_scenario(path)
    assert not isinstance(scenario.stack, str)
    with pytest.raises(ConfigError) as info:
        check_adapter_hops(scenario.stack.gateway_adapter(), doc, ["backup", "vllm-0", "vllm-1"])
    [problem] = info.value.problems
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "adapter:" in t)
    assert problem == (
        f"{path}:{line} stack.attach.adapter.upstream.map.dep-a: the stack has no hop 'vllm-9'; "
        "expected one of: backup, vllm-0, vllm-1"
    )


def test_gateway_alone_takes_the_rest_from_the_scenarios_attach_section(tmp_path: Path) -> None:
    """``--gateway`` alone: the scenario's attach section gives Toxiproxy and the adapter (a
    dry run, so nothing is contacted); a scenario without one needs ``--toxiproxy`` too."""
    import json
    import subprocess

    from tests.conftest import drills_cli, isolated_env

    env = isolated_env(tmp_path)
    path = attached(tmp_path, "litellm")
    result = subprocess.run(
        drills_cli("run", str(path), "--gateway", "http://127.0.0.1:4999", "--dry-run", "--json"),
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    stack = json.loads(result.stdout)["stack"]
    assert stack["attach"] == {
        "gateway": "http://127.0.0.1:4999",
        "toxiproxy": "http://127.0.0.1:8474",
    }, stack
    profile = ROOT / "scenarios" / "inference-latency.yaml"
    refused = subprocess.run(
        drills_cli("run", str(profile), "--gateway", "http://127.0.0.1:4999", "--dry-run"),
        capture_output=True,
        text=True,
        env=env,
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    said = refused.stderr
    assert "drill inference-latency injects through Toxiproxy (phases[1].inject[0] " in said
    assert "and the stack it attaches to names none: give --toxiproxy URL or " in said
    # A drill without Toxiproxy faults attaches without one (its faults are at the L7 hop).
    hop_only = ROOT / "scenarios" / "litellm" / "stream-cut.yaml"
    planned = subprocess.run(
        drills_cli(
            "run", str(hop_only), "--gateway", "http://127.0.0.1:4999", "--dry-run", "--json"
        ),
        capture_output=True,
        text=True,
        env=env,
    )
    assert planned.returncode == 0, planned.stderr
    assert "toxiproxy" not in json.loads(planned.stdout)["stack"]["attach"]
    alone = subprocess.run(
        drills_cli("run", str(path), "--toxiproxy", "http://127.0.0.1:8474", "--dry-run"),
        capture_output=True,
        text=True,
        env=env,
    )
    assert alone.returncode == 2 and "--toxiproxy without --gateway" in alone.stderr
