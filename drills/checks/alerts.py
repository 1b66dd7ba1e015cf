"""Did the team's monitoring see it: the ``alert_*`` checks.

Each reads the team's own Prometheus (``stack.attach.prometheus``; the ``ALERTS`` series its
rule evaluation writes, one per alert and state) or the harness's pager (``stack.attach.pager``:
what Alertmanager actually sent), never the stack's claims about itself:

- ``alert_fired``: the alert began firing ``within`` the onset: the application of the first
  fault applied in the check's ``during`` phase (else in the run), or, in a phase with no fault,
  the start of the load spike that began there (``drills.checks.onset``). An alert that was
  already firing at the onset proves nothing about it, and fails.
- ``alert_paged``: a notification naming the alert (firing) reached the pager ``within`` the
  onset; the runbook its ``runbook_url`` names is in the reason.
- ``alert_resolved_within``: after the phase's faults were reverted (or its load spike ended),
  the alert stopped firing ``within`` this. An alert that never fired resolves nothing, and
  fails.
- ``alert_quiet``: no alert whose name matches ``alert`` (a regular expression, as PromQL's
  ``=~``; any alert without it) fired in the window: no false page in the baseline.

Times are read from a range query at a step of a quarter of a second (or 1/10,000 of a
longer window), so a time is late by at most one step, on top of the rule's own ``for``, the scrape
and the evaluation interval: that is the detection time a team would see.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from drills.checks.base import Evaluation, formatted
from drills.checks.onset import onsets_of
from drills.checks.promql import client_for
from drills.common.errors import ConfigError
from drills.common.prometheus import PrometheusQueryError
from drills.common.redact import redact_url
from drills.common.yamlsrc import YamlDocument, located
from drills.model.check_families import ALERT_FAMILIES, ALERT_TIMED, reads
from drills.model.expect import Check
from drills.model.journal import CheckResult
from drills.model.scenario import PrometheusEndpoint, Scenario, expand_env

__all__ = [
    "alert_selector",
    "check_alert_fired",
    "check_alert_paged",
    "check_alert_quiet",
    "check_alert_resolved_within",
    "check_alert_rules",
    "check_alertmanager",
    "has_monitoring",
    "held_by_alertmanager",
]

Series = list[tuple[dict[str, str], list[tuple[float, float]]]]


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def alert_selector(check: Check, state: str, regex: bool = False) -> str:
    """The ``ALERTS`` series of ``check``'s alert (and labels) in ``state``, as PromQL."""
    matchers = [f"alertstate={_quote(state)}"]
    if check.alert:
        matchers.insert(0, f"alertname{'=~' if regex else '='}{_quote(check.alert)}")
    matchers += [f"{k}={_quote(v)}" for k, v in sorted(check.labels.items())]
    return "ALERTS{" + ",".join(matchers) + "}"


def _named(check: Check) -> str:
    labels = ",".join(f"{k}={v}" for k, v in sorted(check.labels.items()))
    return f"{check.alert}{{{labels}}}" if labels else str(check.alert)


def _verdict(
    check: Check, observed: float | None, samples: int, reason: str, family: str
) -> CheckResult:
    """A timed alert check's result: passed when ``observed`` (seconds) is at most
    ``within``."""
    within = check.within
    assert within is not None
    passed = observed is not None and observed <= within
    return CheckResult(
        label=check.label,
        check=check.check,
        during=check.during,
        expected=f"within {formatted(within, family)}",
        observed=observed,
        observed_text="not seen" if observed is None else formatted(observed, family),
        passed=passed,
        reason=reason,
        samples=samples,
        runbook=check.runbook,
    )


def _step(start: float, end: float) -> float:
    return max(0.25, (end - start) / 10000)


def _alerts(
    ev: Evaluation, expr: str, start: float, end: float
) -> tuple[Series | None, float, str]:
    """``expr``'s series over ``[start, end]`` from the team's Prometheus, the step, and
    where it was read (or why not, with ``None``)."""
    assert ev.prometheus is not None
    where = redact_url(ev.prometheus.url)
    step = _step(start, end)
    try:
        with client_for(ev.prometheus) as prometheus:
            series = prometheus.query_range(expr, start, end, step)
    except httpx.HTTPError as exc:
        return None, step, f"the Prometheus at {where} could not be read: {exc}"
    except PrometheusQueryError as exc:
        return None, step, f"the Prometheus at {where} refused {expr}: {exc}"
    return [(labels, points) for labels, points in series if points], step, where


def _times(series: Series) -> list[float]:
    return sorted({t for _, points in series for t, _ in points})


def _need_prometheus(check: Check, ev: Evaluation, family: str) -> CheckResult | None:
    if ev.prometheus is not None:
        return None
    reason = (
        "no Prometheus to ask: the drill names none (stack.attach.prometheus, or --prometheus URL)"
    )
    if check.check in ALERT_TIMED:
        return _verdict(check, None, 0, reason, family)
    return _quiet_result(check, None, reason)


def check_alert_fired(check: Check, ev: Evaluation) -> CheckResult:
    missing = _need_prometheus(check, ev, "alert_fired")
    if missing is not None:
        return missing
    measured = onsets_of(ev, check.during)
    if not measured:
        return _verdict(check, None, 0, f"{_nothing(check)}: nothing to detect", "alert_fired")
    first = measured[0]
    applied = first.at
    start, end = min(ev.run_window[0], applied), max(ev.run_window[1], applied)
    firing, step, where = _alerts(ev, alert_selector(check, "firing"), start, end)
    if firing is None:
        return _verdict(check, None, 0, where, "alert_fired")
    times = _times(firing)
    before = [t for t in times if applied - step <= t < applied]
    after = [t for t in times if t >= applied]
    name = _named(check)
    if before and after and after[0] - before[-1] <= step + 1e-6:
        return _verdict(
            check,
            None,
            len(times),
            f"{name} was already firing when {first.what} {first.began}: it cannot tell it "
            f"(at {where})",
            "alert_fired",
        )
    if not after:
        pending, _, _ = _alerts(ev, alert_selector(check, "pending"), applied, end)
        pending_at = [t for t in _times(pending or []) if t >= applied]
        held = (
            f"; it was pending from +{pending_at[0] - applied:.1f}s: the rule's 'for' held it"
            if pending_at
            else ""
        )
        return _verdict(
            check,
            None,
            0,
            f"{name} did not fire in the {end - applied:.0f}s from the moment {first.what} "
            f"{first.began} to the run's end{held} (at {where}): it was not detected",
            "alert_fired",
        )
    fired = after[0] - applied
    pending, _, _ = _alerts(ev, alert_selector(check, "pending"), applied, after[0])
    pending_at = [t for t in _times(pending or []) if t >= applied]
    pended = f", pending from +{pending_at[0] - applied:.1f}s" if pending_at else ""
    within = check.within or 0.0
    verdict = "in time" if fired <= within else f"later than {formatted(within, 'alert_fired')}"
    return _verdict(
        check,
        fired,
        len(after),
        f"{name} fired {fired:.1f}s after {first.what} {first.began}{pended} ({verdict}; "
        f"ALERTS at {step:g}s steps, at {where})",
        "alert_fired",
    )


def _in(check: Check) -> str:
    return f"in phase {check.during}" if check.during else "in the run"


def _nothing(check: Check) -> str:
    return f"no fault was applied and no load spike began {_in(check)}"


def check_alert_resolved_within(check: Check, ev: Evaluation) -> CheckResult:
    family = "alert_resolved_within"
    missing = _need_prometheus(check, ev, family)
    if missing is not None:
        return missing
    measured = onsets_of(ev, check.during)
    reverted = [o.ended_at for o in measured if o.ended_at is not None]
    if not measured or len(reverted) < len(measured):
        return _verdict(
            check,
            None,
            0,
            f"no fault {_in(check)} was applied and reverted, and no load spike began and "
            "ended there",
            family,
        )
    revert = max(reverted)
    ends = "the fault was reverted" if measured[0].fault is not None else "the load spike ended"
    start, end = ev.run_window[0], max(ev.run_window[1], revert)
    firing, step, where = _alerts(ev, alert_selector(check, "firing"), start, end)
    if firing is None:
        return _verdict(check, None, 0, where, family)
    times = _times(firing)
    name = _named(check)
    if not [t for t in times if t >= measured[0].at]:
        return _verdict(
            check, None, 0, f"{name} never fired after {measured[0].what}: nothing resolved", family
        )
    after = [t for t in times if t >= revert - step]
    if not after or after[0] > revert + step:
        return _verdict(
            check,
            0.0,
            len(times),
            f"{name} had stopped firing when {ends} (at {where})",
            family,
        )
    last = after[0]
    for t in after[1:]:
        if t - last > 1.5 * step:
            break
        last = t
    if last >= end - step:
        return _verdict(
            check,
            None,
            len(times),
            f"{name} was still firing at the run's end, {end - revert:.0f}s after {ends} "
            f"(at {where})",
            family,
        )
    ended = max(0.0, last + step - revert)
    return _verdict(
        check,
        ended,
        len(times),
        f"{name} stopped firing {ended:.1f}s after {ends} (at {where})",
        family,
    )


def _quiet_result(check: Check, fired: int | None, reason: str) -> CheckResult:
    return CheckResult(
        label=check.label,
        check=check.check,
        during=check.during,
        expected="no alert fired",
        observed=None if fired is None else float(fired),
        observed_text="no data" if fired is None else f"{fired} fired",
        passed=fired == 0,
        reason=reason,
        samples=0 if fired is None else fired,
        runbook=check.runbook,
    )


def check_alert_quiet(check: Check, ev: Evaluation) -> CheckResult:
    missing = _need_prometheus(check, ev, "alert_quiet")
    if missing is not None:
        return missing
    start, end = ev.window(check.during)
    firing, _, where = _alerts(ev, alert_selector(check, "firing", regex=True), start, end)
    if firing is None:
        return _quiet_result(check, None, where)
    which = "any alert" if not check.alert else f"alerts matching {check.alert!r}"
    window = f"{check.during or 'the run'} ({end - start:.0f}s)"
    if not firing:
        return _quiet_result(
            check, 0, f"no {which.replace('any ', '')} fired in {window} (at {where})"
        )
    names = sorted(
        "{}{{{}}}".format(
            labels.get("alertname", "?"),
            ",".join(
                f"{k}={v}"
                for k, v in sorted(labels.items())
                if k not in ("alertname", "alertstate", "__name__")
            ),
        )
        for labels, _ in firing
    )
    return _quiet_result(
        check, len(firing), f"{len(firing)} of {which} fired in {window}: {', '.join(names)}"
    )


def check_alert_paged(check: Check, ev: Evaluation) -> CheckResult:
    family = "alert_paged"
    if ev.pages is None:
        return _verdict(
            check,
            None,
            0,
            "no pager ran: the drill names none (stack.attach.pager, or --pager HOST:PORT)",
            family,
        )
    measured = onsets_of(ev, check.during)
    if not measured:
        return _verdict(check, None, 0, f"{_nothing(check)}: nothing to page", family)
    first = measured[0]
    applied = first.at
    matching = [
        (page, alert)
        for page in ev.pages
        for alert in page.alerts
        if alert.name == check.alert
        and alert.status == "firing"
        and all(alert.labels.get(k) == v for k, v in check.labels.items())
    ]
    name = _named(check)
    after = [(p, a) for p, a in matching if p.received_at >= applied]
    if not after:
        earlier = [p for p, _ in matching if p.received_at < applied]
        why = (
            f"; it was paged {applied - earlier[-1].received_at:.0f}s before {first.what} "
            f"{first.began}: it was already firing"
            if earlier
            else ""
        )
        return _verdict(
            check,
            None,
            0,
            f"no page for {name} reached the pager after {first.what} {first.began} "
            f"({len(ev.pages)} notifications in all){why}: the on-call was not paged",
            family,
        )
    page, alert = after[0]
    paged = page.received_at - applied
    runbook = alert.annotations.get("runbook_url")
    named = f"; it named the runbook {runbook}" if runbook else "; it named no runbook_url"
    started = _started(alert.starts_at)
    fired = f" (firing since +{started - applied:.1f}s)" if started is not None else ""
    return _verdict(
        check,
        paged,
        len(after),
        f"the page for {name} reached the pager {paged:.1f}s after {first.what} {first.began}"
        f"{fired}{named}",
        family,
    )


def _started(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# -- before anything is applied ------------------------------------------------------------


def has_monitoring(
    scenario: Scenario,
    doc: YamlDocument | None,
    prometheus: PrometheusEndpoint | None,
    pager: str | None,
) -> None:
    """Bad input (exit code 2, before any stack is started) if a drill attached to a team's
    stack has a check with nothing to read: ``alert_paged`` needs a pager, ``promql`` and the
    other alert checks a Prometheus. (The embedded stack starts its own: no refusal there.)"""
    for i, check in enumerate(scenario.expect):
        if reads(check.check, "pager") and pager is None:
            needs = (
                "judges what reached the harness's pager, and the drill runs none: give "
                "stack.attach.pager (or --pager HOST:PORT), the address your Alertmanager's "
                "webhook receiver sends to"
            )
        elif reads(check.check, "monitoring") and prometheus is None:
            series = " (its ALERTS series)" if check.check in ALERT_FAMILIES else ""
            needs = (
                f"asks the team's Prometheus{series}, and the drill names none: give "
                "stack.attach.prometheus (or --prometheus URL), or run it on the embedded "
                "stack, which starts its own"
            )
        else:
            continue
        raise ConfigError(
            [f"{located(doc, 'expect', i)}expect[{i}]: check {check.check!r} {needs}"]
        )


def check_alert_rules(
    scenario: Scenario, doc: YamlDocument | None, prometheus: PrometheusEndpoint | None
) -> None:
    """Before anything is applied: each alert a timed alert check names is defined by a rule
    the team's Prometheus has loaded (otherwise bad input, exit code 2, located at the check,
    with the alerts it does define)."""
    named = [(i, c) for i, c in enumerate(scenario.expect) if c.check in ALERT_TIMED]
    if not named or prometheus is None:
        return
    where = redact_url(prometheus.url)
    with client_for(prometheus) as client:
        try:
            defined = client.alert_rules()
        except (httpx.HTTPError, PrometheusQueryError) as exc:
            raise ConfigError(
                [
                    f"{located(doc, 'stack', 'attach', 'prometheus')}stack.attach.prometheus: "
                    f"the rules of the Prometheus at {where} could not be read: {exc}"
                ]
            ) from None
    problems = [
        f"{located(doc, 'expect', i, 'alert')}expect[{i}].alert: no alert rule loaded in the "
        f"Prometheus at {where} defines {check.alert!r}; it defines: "
        f"{', '.join(sorted(defined)) or 'none'}"
        for i, check in named
        if check.alert not in defined
    ]
    if problems:
        raise ConfigError(problems)


def check_alertmanager(doc: YamlDocument | None, alertmanager: PrometheusEndpoint | None) -> None:
    """Before anything is applied: the team's Alertmanager, when the drill names one, answers
    its status API; otherwise bad input (exit code 2)."""
    if alertmanager is None:
        return
    where = redact_url(alertmanager.url)
    try:
        with _alertmanager_client(alertmanager) as client:
            response = client.get(f"{alertmanager.url.rstrip('/')}/api/v2/status")
            response.raise_for_status()
            response.json()["versionInfo"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            [
                f"{located(doc, 'stack', 'attach', 'alertmanager')}stack.attach.alertmanager: "
                f"no Alertmanager answers at {where}/api/v2/status: "
                f"{exc if not isinstance(exc, KeyError) else 'not an Alertmanager status'}"
            ]
        ) from None


def held_by_alertmanager(alertmanager: PrometheusEndpoint | None) -> dict[str, Any] | None:
    """What the team's Alertmanager holds now (its ``/api/v2/alerts``: each alert's name,
    labels, state, start and receivers), for the journal beside the pages; ``None`` when the
    drill names none. A read that fails is kept as its error: nothing else is lost."""
    if alertmanager is None:
        return None
    where = redact_url(alertmanager.url)
    try:
        with _alertmanager_client(alertmanager) as client:
            response = client.get(f"{alertmanager.url.rstrip('/')}/api/v2/alerts")
            response.raise_for_status()
            alerts = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"url": where, "alerts": [], "error": str(exc)}
    return {
        "url": where,
        "alerts": [
            {
                "name": a.get("labels", {}).get("alertname"),
                "labels": a.get("labels", {}),
                "state": (a.get("status") or {}).get("state"),
                "starts_at": a.get("startsAt"),
                "receivers": [r.get("name") for r in a.get("receivers") or []],
                "runbook_url": (a.get("annotations") or {}).get("runbook_url"),
            }
            for a in alerts
        ],
        "error": None,
    }


def _alertmanager_client(alertmanager: PrometheusEndpoint) -> httpx.Client:
    headers = {k: expand_env(v) for k, v in alertmanager.headers.items()}
    return httpx.Client(headers=headers, timeout=alertmanager.timeout)
