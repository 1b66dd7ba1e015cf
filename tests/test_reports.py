"""Reports from a journal: the HTML in a real headless Chromium (escaping included), JUnit with
one case per check, and the Markdown summary. The journal is built here: rendering is the
subject, not the stack."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from drills.model.journal import Journal
from reports import render_all

HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


def journal(tmp_path: Path) -> Path:
    t0 = 1_800_000_000.0
    records = [
        {
            "start": t0 + i,
            "ttft": 0.2,
            "itl": [0.05],
            "e2e": 0.5,
            "status": 200,
            "error": None,
            "tokens": 4,
            "fallback": i >= 10,
            "route": "fallback" if i >= 10 else "primary",
            "upstream": None,
            "trace_id": "ab" * 16,
            "text": HOSTILE if i == 3 else "hello",
        }
        for i in range(20)
    ]
    scenario_dir = tmp_path / "scenarios"
    (scenario_dir / "runbooks").mkdir(parents=True)
    (scenario_dir / "runbooks" / "llm-latency.md").write_text("# runbook\n## Fallback\n")
    data: dict[str, Any] = {
        "format": 1,
        "drill": "demo",
        "title": "Demo <drill>",
        "description": "",
        "runbook": None,
        "run_id": "r1",
        "status": "completed",
        "verdict": "failed",
        "started_at": t0 - 5,
        "t0": t0,
        "ended_at": t0 + 20,
        "scenario_path": str(scenario_dir / "demo.yaml"),
        "scenario": {},
        "stack": {"gateway": "http://127.0.0.1:1", "profile": "sound"},
        "phases": [
            {"name": "baseline", "start": t0, "end": t0 + 10},
            {"name": "fault", "start": t0 + 10, "end": t0 + 20},
        ],
        "timeline": [{"time": t0, "offset": 0, "event": "phase_start", "phase": "baseline"}],
        "faults": [
            {
                "index": 0,
                "phase": "fault",
                "kind": "toxiproxy.latency",
                "target": "vllm-0",
                "spec": {},
                "scheduled_offset": 10,
                "scheduled_end": 20,
                "applied_at": t0 + 10.05,
                "reverted_at": t0 + 20.01,
                "evidence": {"toxics": [{"name": "drills-r1-0"}]},
                "revert": {"method": "removed"},
                "error": None,
            }
        ],
        "aborted": None,
        "revert_errors": [],
        "leftovers_removed": [],
        "records": records,
        "probes": [],
        "probe_failures": {},
        "checks": [
            {
                "label": "error_rate during baseline",
                "check": "error_rate",
                "during": "baseline",
                "expected": "< 0.01",
                "observed": 0.0,
                "observed_text": "0.000",
                "passed": True,
                "reason": "within bounds",
                "samples": 10,
                "runbook": None,
            },
            {
                "label": "fallback_rate during fault",
                "check": "fallback_rate",
                "during": "fault",
                "expected": "< 0.5",
                "observed": 1.0,
                "observed_text": "1.000",
                "passed": False,
                "reason": "observed 1.000, expected < 0.5",
                "samples": 10,
                "runbook": "runbooks/llm-latency.md#fallback",
            },
        ],
        "run_dir": str(tmp_path / "run"),
    }
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / "journal.json"
    path.write_text(json.dumps(data))
    return path


def render(path: Path) -> dict[str, Path]:
    """The reports of the journal file at ``path``, beside it (what `drills report` does)."""
    return render_all(Journal.read(path), path.parent)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail(
            "Chromium is needed to test the HTML report: apt-get install chromium "
            "(stack/bootstrap.sh installs it when run as root)"
        )
    return found


def test_html_report_renders_in_a_real_browser_with_model_output_escaped(tmp_path: Path) -> None:
    paths = render(journal(tmp_path))
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [
                chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--dump-dom",
                paths["html"].as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    dom = result.stdout
    assert "<title>demo: failed</title>" in dom  # the hostile script never ran
    assert 'id="verdict"' in dom and "FAILED" in dom
    assert dom.index('id="verdict"') < dom.index('id="checks"')  # verdict first
    assert "<script>" not in dom and "onerror=alert" not in dom.replace("onerror=alert(1)&gt;", "")
    assert "&lt;script&gt;document.title" in dom
    assert "Demo &lt;drill&gt;" in dom
    assert dom.count("<svg") == 3  # latency, throughput, errors and fallbacks
    link = "../scenarios/runbooks/llm-latency.md#fallback"
    assert f'href="{link}"' in dom
    assert (paths["html"].parent / link.split("#")[0]).resolve().exists()


def test_junit_has_one_case_per_check_and_markdown_links_failures(tmp_path: Path) -> None:
    paths = render(journal(tmp_path))
    suite = ET.parse(paths["junit"]).getroot()
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "error_rate during baseline",
        "fallback_rate during fault",
        "every fault reverted",
    ]
    failure = cases[1].find("failure")
    assert failure is not None and "observed 1.000, expected < 0.5" in (failure.text or "")
    assert "runbook: runbooks/llm-latency.md#fallback" in (failure.text or "")
    assert suite.get("failures") == "1"
    summary = paths["markdown"].read_text()
    assert "**FAILED**" in summary
    assert (
        "| fallback_rate during fault | < 0.5 | 1.000 | **FAIL**: observed 1.000, expected < 0.5 "
        "([runbook]" in summary
    )


@pytest.mark.parametrize(
    ("runbook", "href"),
    [
        ("javascript:alert(document.domain)", None),
        ("file:///etc/passwd#x", None),
        ("data:text/html,<b>x</b>", None),
        (
            "https://wiki.example.com/runbooks/llm#fallback",
            "https://wiki.example.com/runbooks/llm#fallback",
        ),
    ],
)
def test_runbook_links_are_http_or_relative_only(
    tmp_path: Path, runbook: str, href: str | None
) -> None:
    path = journal(tmp_path)
    data = json.loads(path.read_text())
    data["checks"][1]["runbook"] = runbook
    path.write_text(json.dumps(data))
    paths = render(path)
    for kind in ("html", "markdown"):
        text = paths[kind].read_text()
        assert "javascript:" not in text and "file:" not in text and "data:text" not in text
        if href is not None:
            assert href in text


def test_a_fault_whose_revert_said_nothing_still_renders(tmp_path: Path) -> None:
    # A third-party injector's revert outcome need not name a method; the report must render.
    path = journal(tmp_path)
    data = json.loads(path.read_text())
    data["faults"][0]["revert"] = {"finished_at": 1_800_000_020.0}
    data["faults"][0]["evidence"] = None
    path.write_text(json.dumps(data))
    html = render(path)["html"].read_text()
    assert "at +20.010s</p>" in html and "(None)" not in html


def test_the_journal_writes_probe_scrapes_in_columns_and_reads_them_back(tmp_path: Path) -> None:
    """Format 3: each series once, its values in a column beside the scrape times; read back
    into the same scrapes (a failed scrape, a NaN, a series a scrape carried twice included),
    and a format-2 journal (every sample an object) is still read."""
    path = journal(tmp_path)
    data = json.loads(path.read_text())
    t0 = data["t0"]
    data["probes"] = [
        {
            "time": t0 + i,
            "source": source,
            "samples": [
                {"name": "vllm:num_requests_waiting", "labels": {"engine": "0"}, "value": i},
                {"name": "vllm:kv_cache_usage_perc", "labels": {}, "value": float("nan")},
                {"name": "dup_total", "labels": {}, "value": 1.0},
                {"name": "dup_total", "labels": {}, "value": 2.0},
            ][: 4 if i % 2 else 1],
            "error": None,
            "ended": None,
        }
        for i in range(6)
        for source in ("vllm-0", "gateway")
    ] + [{"time": t0 + 2.5, "source": "vllm-0", "samples": [], "error": "refused", "ended": None}]
    before = Journal.model_validate(data)
    before.write(path)
    written = json.loads(path.read_text())
    assert written["format"] == 3
    blocks = {b["source"]: b for b in written["probes"]}
    assert blocks["vllm-0"]["times"][:3] == [t0, t0 + 1, t0 + 2]
    assert blocks["vllm-0"]["errors"] == {"3": "refused"}
    waiting, kv, dup, dup2 = blocks["vllm-0"]["series"]
    assert waiting["name"] == "vllm:num_requests_waiting" and waiting["labels"] == {"engine": "0"}
    assert waiting["values"] == [0.0, 1.0, 2.0, None, 3.0, 4.0, 5.0]
    assert kv["values"][:3] == [None, "NaN", None]
    assert (dup["values"][1], dup2["values"][1]) == (1.0, 2.0)
    after = Journal.read(path)

    def scrapes(j: Journal) -> list[tuple[float, str, str | None, list[tuple[str, str]]]]:
        return sorted(
            (p.time, p.source, p.error, sorted((s.name, repr(s.value)) for s in p.samples))
            for p in j.probes
        )

    assert scrapes(after) == scrapes(before)
    # A format-2 file (scrapes as objects) reads as it did.
    legacy = json.loads(json.dumps(before.model_dump(), default=str).replace("NaN", "0"))
    legacy["format"] = 2
    assert isinstance(legacy["probes"][0]["samples"], list)
    assert len(Journal.model_validate(legacy).probes) == len(before.probes) == 13
