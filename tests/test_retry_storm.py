"""The retry-storm drill on the real stack: both primaries answer 503 through the L7 hop; the
sound policy keeps the calls that reach each replica near one per request, the unsound twin
multiplies them, and both are counted where they arrive."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RunningStack, run_on_stack, run_twin
from tests.helpers import shortened, twin_account

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
RETRY_STORM = ROOT / "scenarios" / "retry-storm.yaml"


def sized(tmp_path: Path) -> Path:
    """The shipped drill with an 8 s baseline (at 4 users, 20-30 answers); its fault and the
    20 s of recovery its recovered_within needs are kept."""
    return shortened(RETRY_STORM, tmp_path, baseline="8s")


def by_label(journal: dict) -> dict[str, dict]:
    return {c["label"]: c for c in journal["checks"]}


def test_retry_storm_passes_on_the_sound_stack_counted_at_the_hop(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    result, [journal] = run_on_stack(sized(tmp_path), stack, tmp_path)
    checks = by_label(journal)
    assert result.returncode == 0, (result.stderr[-3000:], checks)
    for hop in ("vllm-0", "vllm-1"):
        amplification = checks[f"retry_amplification {hop} during fault"]
        assert amplification["source"] == "observed", amplification
        assert f"reached {hop} (seen at the L7 hop)" in amplification["reason"]
        # The gateway's own count is shown beside the harness's, and agrees with it.
        assert amplification["claim"] and not amplification["disagrees"], amplification
    injected = [h for h in journal["hop_records"] if h["outcome"] == "injected"]
    assert injected and {h["hop"] for h in injected} == {"vllm-0", "vllm-1"}
    assert {h["status"] for h in injected} == {503}
    html = (Path(journal["run_dir"]) / "index.html").read_text()
    assert "retry amplification over time" in html and "calls at vllm-0" in html


def test_retry_storm_on_its_unsound_twin_multiplies_the_calls(
    stack: RunningStack, toxi: object, tmp_path: Path
) -> None:
    result, [journal] = run_twin(sized(tmp_path), stack, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert journal["twin"]["held"], twin_account(journal)
    checks = by_label(journal)
    # Each request loops over the two failing replicas until its deadline: a storm, seen at
    # the hop, many times the one call per request a sound policy allows.
    for hop in ("vllm-0", "vllm-1"):
        amplification = checks[f"retry_amplification {hop} during fault"]
        assert amplification["observed"] > 10, amplification
