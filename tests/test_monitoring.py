"""Did the team's monitoring see it: the alert checks against a real Prometheus that scrapes
the session stack and evaluates the stack's own alert rules (``stack/monitoring/rules.yml``),
and a real Alertmanager that routes what fires to the harness's pager (Debian's binaries,
unpacked into the cache; ``stack.monitoring`` starts them). A drill attached with
``--prometheus`` and ``--pager`` is judged on how fast the alert fired, paged and resolved;
the same drill against the rules a team fears (``for: 10m``) fails, named; an alert no rule
defines, a drill without a pager and a pager address that is taken are refused before
anything is applied."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from drills.common.ports import free_port
from drills.common.prometheus import PrometheusAPI
from drills.lint_rules import metric_names
from drills.model.references import runbook_problem
from stack.monitoring import (
    RULES,
    Monitoring,
    prometheus_config,
    stack_targets,
    start_monitoring,
)
from stack.provision import ensure_prometheus
from tests.conftest import (
    RunningStack,
    drills_cli,
    isolated_env,
    run_attached,
)
from tests.helpers import anchored, drill_account

ROOT = Path(__file__).resolve().parent.parent
DRILL = ROOT / "tests" / "scenarios" / "short-alerts.yaml"
POD_LOSS_DRILL = ROOT / "scenarios" / "gpu-pod-loss.yaml"
QUIET = "alert_quiet LLM.* during baseline"
FIRED = "alert_fired LLMBreakerOpen {upstream=vllm-0} during fault"
PAGED = "alert_paged LLMBreakerOpen {upstream=vllm-0} during fault"
RESOLVED = "alert_resolved_within LLMBreakerOpen {upstream=vllm-0} during fault"
ON_PURPOSE = "alert_fired LLMEngineDown during fault"
RUNBOOK = "alert_runbook LLM.* during fault"


def test_the_stack_rules_load_and_each_names_a_real_runbook_step() -> None:
    """Prometheus's own checker accepts the rules, and every alert's runbook_url resolves to a
    heading of a shipped runbook (the drills' own runbook validation)."""
    promtool = ensure_prometheus().with_name("promtool")
    out = subprocess.run(
        [str(promtool), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert len(rules) >= 9
    for rule in rules:
        url = rule["annotations"].get("runbook_url")
        assert url, f"{rule['alert']} has no runbook_url"
        assert runbook_problem(url, RULES.parent) is None, (rule["alert"], url)


@pytest.mark.parametrize(
    ("check", "message"),
    [
        ("{check: alert_fired, alert: X, during: fault}", "check 'alert_fired' needs 'within'"),
        (
            "{check: alert_fired, alert: X, during: fault, below: 10s}",
            "check 'alert_fired' takes no 'below' or 'above': its bound is 'within'",
        ),
        ("{check: alert_paged, during: fault, within: 10s}", "check 'alert_paged' needs 'alert'"),
        ("{check: error_rate, alert: X, below: 0.1}", "check 'error_rate' takes no 'alert'"),
        (
            "{check: alert_fired, alert: X, during: baseline, within: 5s}",
            "nothing begins in phase 'baseline' to time it from: it needs a fault applied there "
            "or a load spike (load.shape: spike) that begins there",
        ),
        (
            "{check: alert_quiet, during: baseline, within: 5s}",
            "check 'alert_quiet' takes no 'within'",
        ),
        (
            "{check: error_rate, query: up, below: 0.1}",
            "check 'error_rate' takes no 'query' (only promql does)",
        ),
        ("{check: promql, below: 1}", "check 'promql' needs a 'query' (a PromQL expression)"),
        (
            "{check: e2e.p99, during: fault, within: 5s, below: 1s}",
            "check 'e2e.p99' takes no 'within' (only alert_fired, alert_paged, "
            "alert_resolved_within, workflows_served, workflow_fallbacks do)",
        ),
        (
            "{check: alert_resolved_within, alert: X, during: fault}",
            "needs 'within': the longest time allowed from the fault's revert to the alert's end",
        ),
        (
            "{check: alert_runbook, during: fault, below: 1}",
            "check 'alert_runbook' takes no 'below' or 'above': it passes when every alert of "
            "the set that fired in the window names a runbook step that exists",
        ),
    ],
)
def test_an_alert_check_without_its_fields_is_refused_where_it_is_written(
    check: str, message: str, tmp_path: Path
) -> None:
    text = anchored(DRILL.read_text(), DRILL.parent)
    lines = text.splitlines()
    at = next(i for i, t in enumerate(lines) if "check: alert_quiet" in t)
    lines[at] = f"  - {check}"
    bad = tmp_path / "bad.yaml"
    bad.write_text("\n".join(lines) + "\n")
    out = subprocess.run(
        drills_cli("validate", str(bad)), capture_output=True, text=True, env=isolated_env(tmp_path)
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{bad}:{at + 1}" in out.stderr and message in out.stderr, out.stderr


@pytest.fixture(scope="module")
def pager_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def exporter_port() -> int:
    return free_port()


def _monitoring(
    stack: RunningStack,
    home: Path,
    pager_port: int,
    rules: list[Path] | None = None,
    exporter_port: int | None = None,
) -> Monitoring:
    targets = stack_targets(stack.state_dir)
    if exporter_port is not None:  # the harness's own metrics, while a drill runs
        targets["drills"] = [f"127.0.0.1:{exporter_port}"]
    return start_monitoring(home, targets, f"http://127.0.0.1:{pager_port}/", rules)


@pytest.fixture(scope="module")
def monitoring(
    stack: RunningStack,
    tmp_path_factory: pytest.TempPathFactory,
    pager_port: int,
    exporter_port: int,
) -> Iterator[Monitoring]:
    home = tmp_path_factory.mktemp("monitoring")
    with _monitoring(stack, home, pager_port, exporter_port=exporter_port) as running:
        running.wait_scraped()
        yield running


def _watched(prometheus: str, pager: str, *extra: str) -> tuple[str, ...]:
    """The flags that attach a drill to the team's monitoring: its Prometheus, the pager."""
    return ("--prometheus", prometheus, "--pager", pager, *extra)


def _journal(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(next((tmp_path / "runs").glob("*/journal.json")).read_text())


@pytest.mark.stack
def test_the_breaker_alert_fires_pages_and_resolves_in_time(
    monitoring: Monitoring,
    pager_port: int,
    exporter_port: int,
    stack: RunningStack,
    tmp_path: Path,
) -> None:
    out = run_attached(
        DRILL,
        stack,
        tmp_path,
        *_watched(monitoring.prometheus, f"127.0.0.1:{pager_port}"),
        "--alertmanager",
        monitoring.alertmanager,
        "--exporter",
        f"127.0.0.1:{exporter_port}",
    )
    journal = _journal(tmp_path)
    results = {c["label"]: c for c in journal["checks"]}
    failed = [label for label, c in results.items() if not c["passed"]]
    assert failed == [ON_PURPOSE], drill_account(journal)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "did not fire" in results[ON_PURPOSE]["reason"], results[ON_PURPOSE]
    assert results[QUIET]["observed"] == 0, results[QUIET]
    fired, paged = results[FIRED]["observed"], results[PAGED]["observed"]
    # Paged after it fired (Alertmanager's group_wait of 1 s comes after the firing).
    assert 0 < fired <= paged, (results[FIRED], results[PAGED])
    assert "runbooks/gpu-pod-loss.md#breakers" in results[PAGED]["reason"], results[PAGED]
    assert 0 <= results[RESOLVED]["observed"] <= 12, results[RESOLVED]
    # The page's runbook_url, read beside the rules file Prometheus loaded, is a real heading.
    assert (
        "LLMBreakerOpen{severity=page,upstream=vllm-0} -> "
        "../../scenarios/runbooks/gpu-pod-loss.md#breakers (as paged)"
    ) in results[RUNBOOK]["reason"], results[RUNBOOK]
    # The pages are in the journal, each with when it arrived.
    pages = journal["pages"]
    assert any(
        a["name"] == "LLMBreakerOpen" and a["labels"].get("upstream") == "vllm-0"
        for p in pages
        for a in p["alerts"]
    ), pages
    # The detection matrix: the breaker opening claimed by the gateway, the alert and the page,
    # each with a time, and the alert and page name the runbook step. The L7 hop refused
    # connections to vllm-0 while its proxy was cut (a faithful chain: the gateway sees the
    # refusal it would see without the hop), so the gateway's attempts could not be seen
    # there, and the matrix says so rather than reading a breaker into requests that missed it.
    (row,) = journal["detection"]
    assert row["detected"] and row["what"] == "toxiproxy.down on vllm-0", row
    signs = {s["layer"]: s for s in row["signs"]}
    at_hop = signs["gateway, seen at the hop"]
    assert at_hop["after"] is None and "refused connections to vllm-0" in at_hop["what"], row
    assert signs["gateway, its claim"]["after"] is not None, row
    firing = [s for s in row["signs"] if s["layer"] == "alert firing"]
    assert any(s["what"].startswith("LLMBreakerOpen{") for s in firing), row
    assert all(s["runbook"] for s in firing if s["what"].startswith("LLMBreakerOpen")), row
    page = next(
        s for s in row["signs"] if s["what"] == "LLMBreakerOpen reached the pager (receiver pager)"
    )
    assert abs(page["after"] - paged) < 0.01, (row, paged)
    # The reports list the pages, with the runbook each named.
    summary = next((tmp_path / "runs").glob("*/summary.md")).read_text()
    assert "| firing | LLMBreakerOpen{severity=page,upstream=vllm-0} |" in summary, summary
    # The drill on the team's Prometheus: its fault window, scraped from the harness, lies
    # where the journal says the fault was (within a scrape interval and a query step).
    (fault,) = journal["faults"]
    with PrometheusAPI(monitoring.prometheus) as prometheus:
        ((labels, points),) = prometheus.query_range(
            'drills_fault_active{kind="toxiproxy.down",target="vllm-0"}',
            journal["started_at"],
            journal["ended_at"] + 5,
            0.25,
        )
        phases = prometheus.query_range(
            'max_over_time(drills_phase{phase="fault"}[1s])',
            journal["started_at"],
            journal["ended_at"] + 5,
            1,
        )
    assert labels["drill"] == "short-alerts" and labels["run"] == journal["run_id"], labels
    active = [t for t, v in points if v == 1]
    assert active, points
    assert fault["applied_at"] <= active[0] <= fault["applied_at"] + 2.5, (fault, active[0])
    assert active[-1] <= fault["reverted_at"] + 2.5, (fault, active[-1])
    assert any(v == 1 for _, pts in phases for _, v in pts), phases
    # What the team's Alertmanager held at the run's end, read back from it.
    held = journal["alertmanager"]
    assert held["error"] is None and held["url"] == monitoring.alertmanager, held
    assert all(a["name"] and a["state"] for a in held["alerts"]), held
    assert stack.toxics() == []


@pytest.mark.stack
def test_an_alert_the_team_fears_fails_the_detection_checks_named(
    stack: RunningStack, tmp_path: Path
) -> None:
    """The same drill against the rules a team fears: the breaker alert only after 10 minutes
    open, and a copy of it that fires at once but names no runbook. The fault is not detected
    by the alert the drill asks for, the page that came names no step, and the checks that say
    so are named."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == "LLMBreakerOpen":
                rule["for"] = "10m"
                unlinked = {**rule, "alert": "LLMBreakerUnlinked", "for": "0s"}
                unlinked["annotations"] = {"summary": rule["annotations"]["summary"]}
    rules["groups"][0]["rules"].append(unlinked)
    feared = tmp_path / "feared-rules.yml"
    feared.write_text(yaml.safe_dump(rules))
    pager = free_port()
    with _monitoring(stack, tmp_path / "monitoring", pager, [feared]) as running:
        out = run_attached(DRILL, stack, tmp_path, *_watched(running.prometheus, f":{pager}"))
    journal = _journal(tmp_path)
    results = {c["label"]: c for c in journal["checks"]}
    failed = {label for label, c in results.items() if not c["passed"]}
    assert failed == {FIRED, PAGED, RESOLVED, ON_PURPOSE, RUNBOOK}, drill_account(journal)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "did not fire" in results[FIRED]["reason"], results[FIRED]
    # It saw the breaker open (pending), and says that the rule's 'for' held it back.
    assert "pending from +" in results[FIRED]["reason"], results[FIRED]
    assert "the on-call was not paged" in results[PAGED]["reason"], results[PAGED]
    assert "never fired" in results[RESOLVED]["reason"], results[RESOLVED]
    assert results[RUNBOOK]["observed"] == 1, results[RUNBOOK]
    assert (
        "LLMBreakerUnlinked{severity=page,upstream=vllm-0} has no runbook_url"
        in results[RUNBOOK]["reason"]
    ), results[RUNBOOK]


@pytest.mark.stack
def test_what_an_alert_check_cannot_judge_is_refused_before_anything_is_applied(
    monitoring: Monitoring, stack: RunningStack, tmp_path: Path
) -> None:
    # The drill without its twin (whose must_fail names the alert renamed below).
    text = anchored(DRILL.read_text(), DRILL.parent).split("\ntwins:")[0] + "\n"
    # An alert that no loaded rule defines.
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(text.replace("alert: LLMEngineDown", "alert: LLMEngineGone"))
    pager = free_port()
    out = run_attached(unknown, stack, tmp_path, *_watched(monitoring.prometheus, f":{pager}"))
    assert out.returncode == 2, out.stderr[-3000:]
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "LLMEngineDown" in t)
    index = next(
        i for i, c in enumerate(yaml.safe_load(text)["expect"]) if c.get("alert") == "LLMEngineDown"
    )
    assert (
        f"{unknown}:{line} expect[{index}].alert: no alert rule loaded in the Prometheus at "
        f"{monitoring.prometheus} defines 'LLMEngineGone'; it defines: " in out.stderr
    ), out.stderr
    assert "LLMBreakerOpen" in out.stderr
    # alert_paged with no pager to receive the page.
    out = run_attached(DRILL, stack, tmp_path, "--prometheus", monitoring.prometheus)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "check 'alert_paged' judges what reached the harness's pager" in out.stderr
    # A pager address that is taken.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_attached(DRILL, stack, tmp_path, *_watched(monitoring.prometheus, f":{port}"))
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"the pager cannot listen at 127.0.0.1:{port}" in out.stderr, out.stderr
    # An Alertmanager that does not answer.
    gone = f"http://127.0.0.1:{free_port()}"
    watched = _watched(monitoring.prometheus, f":{free_port()}", "--alertmanager", gone)
    out = run_attached(DRILL, stack, tmp_path, *watched)
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"stack.attach.alertmanager: no Alertmanager answers at {gone}" in out.stderr
    # A pager that is not HOST:PORT.
    out = run_attached(DRILL, stack, tmp_path, *_watched(monitoring.prometheus, "nope"))
    assert out.returncode == 2 and "--pager: 'nope' is not HOST:PORT" in out.stderr, out.stderr
    assert stack.toxics() == []
    assert not list((tmp_path / "runs").glob("*/journal.json"))


# -- drills lint RULES.yml ------------------------------------------------------------------


def _lint(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        drills_cli("lint", *args), capture_output=True, text=True, env=isolated_env(tmp_path)
    )


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum(rate(drills_gateway_requests_total{code=~"5.."}[15s])) / sum(rate(x[1m]))',
            {"drills_gateway_requests_total", "x"},
        ),
        ("max by (upstream) (drills_gateway_breaker_state) == 2", {"drills_gateway_breaker_state"}),
        ("histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) > 2", {"a_bucket"}),
        ('up{job="vllm"} == 0', {"up"}),
        (
            "vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc",
            {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
        ),
        ("a + on (instance) group_left (node) b offset 5m > bool 1e3", {"a", "b"}),
    ],
)
def test_the_metrics_an_alert_reads_are_found_in_its_expression(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_shipped_rules_fit_a_one_minute_slo_at_one_second_intervals(tmp_path: Path) -> None:
    out = _lint(
        str(RULES),
        "--slo-window",
        "1m",
        "--scrape-interval",
        "1s",
        "--evaluation-interval",
        "1s",
        tmp_path=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 error(s), 0 warning(s)" in out.stdout


def test_alerts_too_slow_for_their_slo_or_without_a_runbook_are_named_with_the_fix(
    tmp_path: Path,
) -> None:
    rules = tmp_path / "team-rules.yml"
    rules.write_text(
        "groups:\n"
        "  - name: team\n"
        "    rules:\n"
        "      - alert: TTFTSlow\n"
        "        expr: histogram_quantile(0.99, sum by (le) (rate(ttft_bucket[10m]))) > 2\n"
        "        for: 10m\n"
        "        annotations: {runbook_url: https://runbooks.example/llm.md#ttft}\n"
        "      - alert: NoRunbook\n"
        "        expr: up == 0\n"
        "        annotations: {summary: down}\n"
        "      - alert: BadAnchor\n"
        "        expr: up == 0\n"
        "        annotations:\n"
        f"          runbook_url: {RULES.parent}/../../scenarios/runbooks/llm-latency.md#nope\n"
        "          slo_window: 30s\n"
    )
    out = _lint(str(rules), "--slo-window", "5m", tmp_path=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert (
        f"{rules}:6 TTFTSlow (groups.0.rules.0.for): error [alert-too-slow] fires 12m after the "
        "fault at the earliest (for 10m + scrape 1m + evaluation 1m), longer than the 5m SLO "
        "window it protects; its longest range, [10m], adds more; fix: shorten 'for' to at most 3m"
    ) in out.stdout, out.stdout
    assert (
        f"{rules}:10 NoRunbook (groups.0.rules.1.annotations): error [alert-runbook] has no "
        "runbook_url" in out.stdout
    ), out.stdout
    assert (
        "BadAnchor (groups.0.rules.2.annotations.runbook_url): error [alert-runbook]" in out.stdout
    )
    assert "llm-latency.md has no heading that makes the anchor #nope" in out.stdout
    # Its own slo_window (30s) wins over --slo-window: even for: 0s takes 2m at 1m intervals.
    assert "BadAnchor (groups.0.rules.2.for): error [alert-too-slow] fires 2m" in out.stdout
    # A bad flag is bad input.
    bad = _lint(str(rules), "--slo-window", "5", tmp_path=tmp_path)
    assert bad.returncode == 2 and "--slo-window:" in bad.stderr, bad.stderr


@pytest.mark.stack
def test_a_rule_on_a_metric_no_target_exposes_is_found_by_asking_prometheus(
    monitoring: Monitoring, tmp_path: Path
) -> None:
    """Every metric the shipped rules read is exposed by the embedded stack (the one
    alternative of an 'or' that this vLLM does not have is a warning); a misspelt one is an
    error."""
    args = ("--scrape-interval", "1s", "--evaluation-interval", "1s")
    out = _lint(str(RULES), *args, "--prometheus", monitoring.prometheus, tmp_path=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert " error(s)" in out.stdout and "[alert-no-metric]" not in out.stdout.replace(
        "warning [alert-no-metric]", ""
    ), out.stdout
    rules = yaml.safe_load(RULES.read_text())
    at = next(
        i for i, r in enumerate(rules["groups"][0]["rules"]) if r["alert"] == "LLMBreakerOpen"
    )
    rules["groups"][0]["rules"][at]["expr"] = "max by (upstream) (drills_gateway_breaker_stat) == 2"
    typo = tmp_path / "typo.yml"
    typo.write_text(yaml.safe_dump(rules, sort_keys=False))
    out = _lint(str(typo), *args, "--prometheus", monitoring.prometheus, tmp_path=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert (
        f"LLMBreakerOpen (groups.0.rules.{at}.expr): error [alert-no-metric] reads "
        "drills_gateway_breaker_stat, which no scrape target of the Prometheus exposes"
    ) in out.stdout, out.stdout


@pytest.mark.parametrize(
    ("twin", "message"),
    [
        (
            f"{{name: t, monitoring: {{rules: [gone.yml]}}, must_fail: [{ON_PURPOSE}]}}",
            "twins[0].monitoring.rules[0]: cannot read the rules file",
        ),
        (
            f"{{name: t, monitoring: {{rules: [short-alerts.yaml]}}, must_fail: [{ON_PURPOSE}]}}",
            "a Prometheus rules file is a mapping with 'groups'",
        ),
        (
            "{name: t, monitoring: {rules: [r.yml], route: lost}, must_fail: [x]}",
            "twins[0].monitoring.route",
        ),
        (
            "{name: t, profile: sound, monitoring: {rules: [r.yml]}, must_fail: [x]}",
            "a monitoring twin is the drill's own stack with other alert rules or route: not "
            "another stack too (got profile)",
        ),
    ],
)
def test_a_monitoring_twin_that_cannot_run_is_refused_where_it_is_written(
    twin: str, message: str, tmp_path: Path
) -> None:
    text = anchored(DRILL.read_text(), DRILL.parent).split("\ntwins:")[0]
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"{text}\ntwins:\n  - {twin}\n")
    (tmp_path / "short-alerts.yaml").write_text(DRILL.read_text())
    (tmp_path / "r.yml").write_text(RULES.read_text())
    out = subprocess.run(
        drills_cli("validate", str(bad)), capture_output=True, text=True, env=isolated_env(tmp_path)
    )
    assert out.returncode == 2, out.stdout + out.stderr
    line = len(text.splitlines()) + 2
    assert f"{bad}:{line}" in out.stderr and message in out.stderr, out.stderr


def test_a_drill_that_asks_its_monitoring_nothing_has_no_monitoring_twin(tmp_path: Path) -> None:
    text = anchored(POD_LOSS_DRILL.read_text(), POD_LOSS_DRILL.parent)
    kept = [t for t in text.splitlines() if "check: alert_" not in t]
    bad = tmp_path / "bad.yaml"
    bad.write_text("\n".join(kept) + "\n")
    (tmp_path / "monitoring").mkdir()
    feared = POD_LOSS_DRILL.parent / "monitoring" / "feared-rules.yml"
    (tmp_path / "monitoring" / "feared-rules.yml").write_text(feared.read_text())
    out = subprocess.run(
        drills_cli("validate", str(bad)), capture_output=True, text=True, env=isolated_env(tmp_path)
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "the drill asks its monitoring nothing (no promql or alert check)" in out.stderr
    assert "twins[1].monitoring: " in out.stderr, out.stderr


def test_a_monitoring_twins_rules_are_found_from_a_drill_named_relatively(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Prometheus reads a relative rules path beside its own config and loads nothing when no
    file is there, without a word: the twin's rules reach it absolute, found from the drill's
    folder, whatever folder the drill was named from."""
    from drills.model.scenario import load_scenario, twin_rules

    monkeypatch.chdir(ROOT)
    scenario, doc = load_scenario("scenarios/gpu-pod-loss.yaml")
    (twin,) = [t for t in scenario.twins if t.monitoring is not None]
    (rules,) = twin_rules(twin, doc)
    assert rules == ROOT / "scenarios" / "monitoring" / "feared-rules.yml" and rules.exists()
    config = prometheus_config({"vllm": ["127.0.0.1:1"]}, [Path("rel/rules.yml")], None)
    assert config["rule_files"] == [str(ROOT / "rel" / "rules.yml")]
