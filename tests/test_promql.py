"""promql checks against a real Prometheus (Debian's, unpacked into the cache by
``stack.provision.ensure_prometheus``) that scrapes the session stack's engines and gateway every
second, as a team's own Prometheus would: a drill attached with ``--prometheus`` judges the
engines' own counters and histograms from it, a check that fails says why, and a query that
does not parse, a Prometheus that does not answer or a drill that names none are refused before
anything is applied."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from drills.common.ports import free_port
from stack import control
from stack.provision import ensure_prometheus
from tests.conftest import RunningStack, run_attached
from tests.helpers import anchored, drill_account

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
DRILL = ROOT / "tests" / "scenarios" / "short-promql.yaml"
SUCCESSES = "promql sum(vllm:request_success_total) during baseline"
TTFT = (
    "promql histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"
    "[5s]))) during baseline"
)
ON_PURPOSE = "promql sum(vllm:request_success_total) during fault"


@pytest.fixture(scope="module")
def prometheus(stack: RunningStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus scraping the stack's engines and gateway every second; its URL."""
    home = tmp_path_factory.mktemp("prometheus")
    engines = [
        c.endpoint.split("://", 1)[1]
        for c in control.status(stack.state_dir).components
        if c.kind == "engine" and c.endpoint
    ]
    gateway = stack.gateway_url.split("://", 1)[1]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "vllm", "static_configs": [{"targets": engines}]},
            {"job_name": "gateway", "static_configs": [{"targets": [gateway]}]},
        ],
    }
    (home / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    process = subprocess.Popen(
        [
            str(ensure_prometheus()),
            f"--config.file={home / 'prometheus.yml'}",
            f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(home / "prometheus.log").open("w"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, (home / "prometheus.log").read_text()[-2000:]
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "Prometheus was not ready in 60 s"
            time.sleep(0.3)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_promql_checks_judge_the_engines_own_metrics_from_prometheus(
    prometheus: str, stack: RunningStack, tmp_path: Path
) -> None:
    out = run_attached(DRILL, stack, tmp_path, "--prometheus", prometheus)
    journal = json.loads(next((tmp_path / "runs").glob("*/journal.json")).read_text())
    results = {c["label"]: c for c in journal["checks"]}
    # Only the check that fails on purpose failed (exit code 1: the drill failed).
    failed = [label for label, c in results.items() if not c["passed"]]
    assert failed == [ON_PURPOSE], drill_account(journal)
    assert out.returncode == 1, out.stderr[-3000:]
    on_purpose = results[ON_PURPOSE]
    assert on_purpose["observed"] is not None and "expected > 100000" in on_purpose["reason"]
    assert f"at {prometheus}" in on_purpose["reason"], on_purpose
    # The engines' own count of finished requests agrees with what the client saw answered
    # (every baseline request reached an engine; the counters are read at 1 s steps, so a
    # request at either edge of the window may fall outside it).
    engines = results[SUCCESSES]["observed"]
    answered = [r for r in journal["records"] if r["phase"] == "baseline" and r["status"] == 200]
    assert abs(engines - len(answered)) <= max(3, 0.25 * len(answered)), (engines, len(answered))
    ttft = results[TTFT]
    assert 0 < ttft["observed"] < 3 and "series" in ttft["reason"], ttft


def test_a_query_prometheus_cannot_parse_is_refused_before_anything_is_applied(
    prometheus: str, stack: RunningStack, tmp_path: Path
) -> None:
    text = anchored(DRILL.read_text(), DRILL.parent).replace(
        'query: "sum(vllm:request_success_total)", agg: increase, during: fault',
        'query: "sum(vllm:request_success_total", agg: increase, during: fault',
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    out = run_attached(bad, stack, tmp_path, "--prometheus", prometheus)
    assert out.returncode == 2, out.stderr[-3000:]
    line = next(i for i, t in enumerate(text.splitlines(), 1) if 'success_total"' in t)
    assert (
        f"{bad}:{line} expect[3].query: the Prometheus at {prometheus} refused it (bad_data)"
        in out.stderr
    ), out.stderr
    assert "parse error" in out.stderr
    assert stack.toxics() == []
    assert not list((tmp_path / "runs").glob("*/journal.json"))


def test_no_prometheus_or_one_that_does_not_answer_is_refused(
    stack: RunningStack, tmp_path: Path
) -> None:
    none = run_attached(DRILL, stack, tmp_path)
    assert none.returncode == 2, none.stderr[-3000:]
    assert "check 'promql' asks the team's Prometheus, and the drill names none" in none.stderr
    gone = f"http://127.0.0.1:{free_port()}"
    out = run_attached(DRILL, stack, tmp_path, "--prometheus", gone)
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"stack.attach.prometheus: no Prometheus answers at {gone}" in out.stderr
    assert stack.toxics() == []
