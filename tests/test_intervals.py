"""Confidence intervals of the checks that judge a share of requests (Wilson score), and
whether a verdict is conclusive: checked against exact binomial coverage and known values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drills.checks import evaluate
from drills.common.stats import quantile_interval, wilson
from drills.model.journal import CheckResult, Journal
from reports import render_all
from tests.test_checks import ev, rec, scenario
from tests.test_reports import journal


def rendered(tmp_path: Path, checks: list[CheckResult]) -> str:
    """The Markdown summary of tests/test_reports.py's journal with ``checks`` as its checks
    (the HTML report is written beside it, in ``tmp_path/run``)."""
    path = journal(tmp_path)
    data = json.loads(path.read_text())
    data["checks"] = [c.model_dump(mode="json") for c in checks]
    path.write_text(json.dumps(data))
    render_all(Journal.read(path), path.parent)
    return (path.parent / "summary.md").read_text()


def test_the_issues_example_24_of_25_reaches_down_to_about_080() -> None:
    low, high = wilson(24, 25)
    assert low == pytest.approx(0.8046, abs=5e-4) and high == pytest.approx(0.9929, abs=5e-4)
    # At the edges it stays inside [0, 1] and still has a width: 0 of 50 errors does not
    # prove an error rate under 1%.
    assert wilson(0, 50) == (0.0, pytest.approx(0.0713, abs=5e-4))
    assert wilson(50, 50)[1] == 1.0
    with pytest.raises(ValueError):
        wilson(3, 0)


@given(st.integers(1, 400), st.data())
def test_the_interval_holds_the_observed_share_and_narrows_with_more_requests(
    n: int, data: st.DataObject
) -> None:
    hits = data.draw(st.integers(0, n))
    low, high = wilson(hits, n)
    assert 0 <= low <= hits / n <= high <= 1
    wider = wilson(hits, n, 0.99)
    assert wider[0] <= low + 1e-12 and wider[1] >= high - 1e-12
    more = wilson(hits * 4, n * 4)
    assert more[1] - more[0] < high - low + 1e-12


@pytest.mark.parametrize("p", [0.02, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("n", [25, 100])
def test_coverage_is_near_95_percent_by_the_exact_binomial(n: int, p: float) -> None:
    """Over every outcome of n requests with true share p, weighted by its binomial chance,
    the interval holds p about 95% of the time (Wilson's is known to hover around it; never
    under 0.90 for these)."""
    covered = sum(
        math.comb(n, k) * p**k * (1 - p) ** (n - k)
        for k in range(n + 1)
        if wilson(k, n)[0] <= p <= wilson(k, n)[1]
    )
    assert 0.90 <= covered <= 0.995, covered


def test_a_rate_check_says_when_too_few_requests_decide_it(tmp_path: Path) -> None:
    s = scenario(
        # 23 fallbacks of 25 (0.92): a pass, but the interval reaches below 0.8.
        {"check": "fallback_rate", "during": "fault", "above": 0.8},
        # 0 errors of 25 against 0.5: a pass no rerun would turn.
        {"check": "error_rate", "during": "fault", "below": 0.5},
        # 25 of 25 failed against 0.05: a fail no rerun would turn.
        {"check": "success_rate", "during": "fault", "above": 0.95},
    )
    records = [rec(10 + i * 0.3, fallback=i > 1) for i in range(25)]
    fallback, errors, success = evaluate(ev(s, records))
    assert fallback.passed and fallback.conclusive is False
    low, high = fallback.interval
    assert low < 0.8 < 0.92 < high
    assert errors.passed and errors.conclusive is True
    assert not success.passed and success.conclusive is True and success.interval[1] < 0.95
    # Per-token gaps within a stream are not independent samples: no interval.
    (itl,) = evaluate(ev(scenario({"check": "itl.p50", "during": "fault", "below": "2s"}), records))
    assert itl.interval is None and itl.conclusive is None
    # The reports say it beside the observed value.
    summary = rendered(tmp_path, [fallback, errors])
    assert (
        "0.920 (95% CI 0.750 to 0.978, n=25: not conclusive, too few requests to be sure)"
        in summary
    )
    assert "(95% CI 0.000 to 0.133, n=25)" in summary
    assert "not conclusive" in (tmp_path / "run" / "index.html").read_text()


def test_the_median_of_100_is_bounded_by_the_40th_and_61st_and_of_25_by_the_8th_and_18th() -> None:
    """The ranks of the standard tables for a 95% interval of the median."""
    assert quantile_interval(list(range(1, 101)), 0.5) == (40, 61)
    assert quantile_interval(list(range(1, 26)), 0.5) == (8, 18)
    # A p99 from 40 requests has no upper bound; from 400 it has.
    assert quantile_interval(list(range(1, 41)), 0.99)[1] is None
    assert quantile_interval(list(range(1, 401)), 0.99)[1] is not None
    with pytest.raises(ValueError):
        quantile_interval([], 0.5)


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
@pytest.mark.parametrize("n", [25, 100, 1000])
def test_quantile_coverage_is_at_least_95_percent_by_the_exact_binomial(n: int, q: float) -> None:
    """For any continuous distribution, [X_(l), X_(u)] holds the q quantile exactly when
    l <= B < u, B ~ Binomial(n, q) the samples below it; an open side always holds it."""
    from drills.common.stats import _binomial_cdf

    cdf = _binomial_cdf(n, q)
    low, high = quantile_interval(list(range(1, n + 1)), q)  # values = ranks
    misses_low = cdf[low - 1] if low is not None else 0.0
    misses_high = 1 - cdf[high - 1] if high is not None else 0.0
    assert misses_low <= 0.025 + 1e-12 and misses_high <= 0.025 + 1e-12
    assert 1 - misses_low - misses_high >= 0.95


def test_a_latency_percentile_from_few_requests_is_not_conclusive(tmp_path: Path) -> None:
    fast = [rec(10 + i * 0.2, e2e=0.4 + i * 0.01) for i in range(40)]
    s = scenario(
        {"check": "e2e.p99", "during": "fault", "below": "2s"},
        {"check": "e2e.p50", "during": "fault", "below": "2s"},
        {"check": "ttft.p50", "during": "fault", "below": "10ms"},
    )
    p99, p50, ttft = evaluate(ev(s, fast))
    # Every one of 40 answers took under 0.8 s, yet 40 cannot bound a p99 from above.
    assert p99.passed and p99.interval[1] is None and p99.conclusive is False
    assert p50.passed and p50.conclusive is True and p50.interval[1] < 2
    assert not ttft.passed and ttft.conclusive is True  # 0.2 s at the least: a sure fail
    summary = rendered(tmp_path, [p99, p50])
    assert "to no upper bound, n=40: not conclusive, too few requests to be sure)" in summary
    assert "595ms (95% CI 530 ms to 660 ms, n=40)" in summary
