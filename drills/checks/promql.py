"""Any PromQL expression on the team's own Prometheus, over a window of the drill: ``promql``.

The harness's own scrapes (``prometheus``) see what it can reach; this reads what the team's
monitoring saw, with the team's recording rules and labels: vLLM's TTFT histogram as their
dashboards compute it, the queue their alerts watch. The expression is run as a range query
over the check's window (one point per second, or per 1/1000 of a longer window), and its
values, across the window and across the series it returns, become one by ``agg``.
"""

from __future__ import annotations

import math

import httpx

from drills.checks.base import Evaluation, expected_text, increase_of, result, within_bounds
from drills.common.errors import ConfigError
from drills.common.prometheus import PrometheusAPI, PrometheusQueryError
from drills.common.redact import redact_url
from drills.common.yamlsrc import YamlDocument, located
from drills.model.expect import Check
from drills.model.journal import CheckResult
from drills.model.scenario import PrometheusEndpoint, Scenario, expand_env

__all__ = ["check_promql", "check_queries", "client_for"]


def client_for(endpoint: PrometheusEndpoint) -> PrometheusAPI:
    """A client of ``endpoint``, its headers' ``${NAME}`` read from the environment."""
    headers = {k: expand_env(v) for k, v in endpoint.headers.items()}
    return PrometheusAPI(endpoint.url, headers, endpoint.timeout)


def check_promql(check: Check, ev: Evaluation) -> CheckResult:
    assert check.query is not None
    if ev.prometheus is None:
        return result(
            check,
            "promql",
            None,
            0,
            "no Prometheus to ask: the drill names none "
            "(stack.attach.prometheus, or --prometheus URL)",
        )
    start, end = ev.window(check.during)
    step = float(max(1, math.ceil((end - start) / 1000)))
    where = redact_url(ev.prometheus.url)
    try:
        with client_for(ev.prometheus) as prometheus:
            series = prometheus.query_range(check.query, start, end, step)
    except httpx.HTTPError as exc:
        return result(
            check, "promql", None, 0, f"the Prometheus at {where} could not be read: {exc}"
        )
    except PrometheusQueryError as exc:
        return result(check, "promql", None, 0, f"the Prometheus at {where} refused it: {exc}")
    series = [(labels, points) for labels, points in series if points]
    window = f"{check.during or 'the run'} ({end - start:.0f}s, {step:g}s steps)"
    if not series:
        return result(
            check, "promql", None, 0, f"{check.query} had no samples in {window} at {where}"
        )
    values = [v for _, points in series for _, v in points]
    observed = _aggregate(check.agg, series)
    shown = f"{observed:g}"
    verdict = (
        "within bounds"
        if within_bounds(check, observed)
        else f"expected {expected_text(check, '')}"
    )
    reason = (
        f"{check.agg} of {check.query} over {window}: {shown} ({len(series)} series, "
        f"{len(values)} points, at {where}); {verdict}"
    )
    return result(check, "promql", observed, len(values), reason)


def _aggregate(agg: str, series: list[tuple[dict[str, str], list[tuple[float, float]]]]) -> float:
    """The series' points as one value: ``increase`` of each counter summed, ``last`` the
    largest of the series' last values, the others over every point."""
    if agg == "increase":
        return sum(increase_of(points) for _, points in series)
    if agg == "last":
        return max(points[-1][1] for _, points in series)
    values = [v for _, points in series for _, v in points]
    if agg == "max":
        return max(values)
    if agg == "min":
        return min(values)
    return sum(values) / len(values)


def check_queries(
    scenario: Scenario, doc: YamlDocument | None, prometheus: PrometheusEndpoint | None
) -> None:
    """Before anything is applied: the drill's ``promql`` checks have a Prometheus to ask, it
    answers, and it parses each of their queries (an instant query now); otherwise bad input
    (exit code 2), located at the check, with Prometheus's own message."""
    found = [(i, c) for i, c in enumerate(scenario.expect) if c.query is not None]
    if not found or prometheus is None:
        return
    where = redact_url(prometheus.url)
    problems = []
    with client_for(prometheus) as client:
        try:
            client.build()
        except (httpx.HTTPError, PrometheusQueryError) as exc:
            raise ConfigError(
                [
                    f"{located(doc, 'stack', 'attach', 'prometheus')}stack.attach.prometheus: "
                    f"no Prometheus answers at {where}: {exc}"
                ]
            ) from None
        for i, check in found:
            at = located(doc, "expect", i, "query")
            try:
                client.query(str(check.query))
            except PrometheusQueryError as exc:
                problems.append(
                    f"{at}expect[{i}].query: the Prometheus at {where} refused it "
                    f"({exc.kind}): {exc} (got {check.query!r})"
                )
            except httpx.HTTPError as exc:
                problems.append(f"{at}expect[{i}].query: {where}: {exc}")
    if problems:
        raise ConfigError(problems)
