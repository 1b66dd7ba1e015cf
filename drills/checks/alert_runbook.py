"""Did the page point at the right place: ``alert_runbook``.

Every alert that fired in the check's window (its ``ALERTS`` series on the team's
Prometheus; ``alert``, a regular expression as PromQL's ``=~``, and ``labels`` narrow the set)
must carry a ``runbook_url`` that leads to a real heading of a runbook, the step the on-call
is meant to take. The URL judged is the one the on-call got: the page's (Alertmanager's
notification, its templates expanded by Prometheus) when the harness ran the pager, else the
rule's annotation with its ``{{ $labels.NAME }}`` filled in from the alert's labels.

- A relative URL is resolved against the rules file that defines the alert (the rule group's
  ``file``, as Prometheus reports it) and checked the way a drill's own runbook links are
  (``drills.model.references.runbook_problem``): the file exists and a heading of it makes
  the ``#anchor``.
- An ``http(s)`` URL is fetched (GET, redirects followed): it must answer 2xx, and an
  ``#anchor`` must be a heading of the page: a Markdown heading's slug (a raw ``.md``), or an
  ``id``/``name`` attribute of the HTML (GitHub renders ``id="user-content-ANCHOR"``).

An alert without a ``runbook_url``, a link that leads nowhere, and a window in which no alert
of the set fired (nothing to judge: the check proves nothing) fail, each named.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from drills.checks.alerts import alert_selector
from drills.checks.base import Evaluation
from drills.checks.promql import client_for
from drills.common.prometheus import PrometheusQueryError
from drills.common.redact import redact_url
from drills.model.expect import Check
from drills.model.journal import CheckResult
from drills.model.references import check_link, markdown_anchors, runbook_problem

__all__ = ["check_alert_runbook", "link_problem"]

_TEMPLATE = re.compile(r"\{\{\s*(?:\$labels|\.Labels)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_FETCH_TIMEOUT = 5.0


def check_alert_runbook(check: Check, ev: Evaluation) -> CheckResult:
    if ev.prometheus is None:
        return _result(
            check,
            None,
            0,
            "no Prometheus to ask which alerts fired: the drill names none "
            "(stack.attach.prometheus, or --prometheus URL)",
        )
    start, end = ev.window(check.during)
    where = redact_url(ev.prometheus.url)
    step = max(0.25, (end - start) / 10000)
    try:
        with client_for(ev.prometheus) as prometheus:
            series = prometheus.query_range(
                alert_selector(check, "firing", regex=True), start, end, step
            )
            groups = prometheus.get_data("/api/v1/rules", {"type": "alert"}) or {}
    except httpx.HTTPError as exc:
        return _result(check, None, 0, f"the Prometheus at {where} could not be read: {exc}")
    except PrometheusQueryError as exc:
        return _result(check, None, 0, f"the Prometheus at {where} refused it: {exc}")
    fired = sorted(
        {_key(labels): labels for labels, points in series if points}.items(),
        key=lambda item: item[0],
    )
    which = f"alerts matching {check.alert!r}" if check.alert else "alerts"
    window = f"{check.during or 'the run'} ({end - start:.0f}s)"
    if not fired:
        return _result(
            check,
            None,
            0,
            f"no {which} fired in {window} (at {where}): no page whose runbook could be followed",
        )
    rules = _rules(groups)
    findings = []
    bad = 0
    with httpx.Client(timeout=_FETCH_TIMEOUT, follow_redirects=True) as web:
        for key, labels in fired:
            url, base, source = _runbook_of(labels, rules, ev)
            if url is None:
                problem: str | None = "has no runbook_url: the page names no step to take"
            else:
                problem = link_problem(url, base, web)
                problem = None if problem is None else f"{url}: {problem}"
            bad += problem is not None
            findings.append(f"{key} {problem}" if problem else f"{key} -> {url} ({source})")
    verdict = (
        f"{bad} of {len(fired)} {which} that fired in {window} lead nowhere"
        if bad
        else f"each of the {len(fired)} {which} that fired in {window} names a runbook step "
        "that exists"
    )
    return _result(check, float(bad), len(fired), f"{verdict}: {'; '.join(findings)}")


def link_problem(url: str, base: Path | None, web: httpx.Client) -> str | None:
    """Why ``url`` does not lead to a runbook heading (``None``: it does). A relative URL is
    read from ``base`` (the rules file's folder); an http(s) URL is fetched with ``web``."""
    refused = check_link(url)
    if refused is not None:
        return refused
    if not re.match(r"^https?://", url, re.IGNORECASE):
        if _TEMPLATE.search(url) or "{{" in url:
            return "a template the harness cannot expand"
        if base is None:
            return "a relative link, and Prometheus did not say which rules file defines it"
        return runbook_problem(url, base)
    page, _, anchor = url.partition("#")
    try:
        response = web.get(page)
    except httpx.HTTPError as exc:
        return f"could not be fetched: {exc}"
    if not response.is_success:
        return f"answered HTTP {response.status_code}"
    if not anchor:
        return None
    text = response.text
    kind = response.headers.get("content-type", "")
    if "html" in kind or text.lstrip()[:1] == "<":
        ids = set(re.findall(r"""\b(?:id|name)\s*=\s*["']([^"']+)["']""", text))
        if anchor in ids or f"user-content-{anchor}" in ids:
            return None
        return f"the page has no heading or element with the id #{anchor}"
    anchors = markdown_anchors(text)
    if anchor in anchors:
        return None
    return f"no heading of the page makes the anchor #{anchor}; its anchors: " + (
        ", ".join(sorted(anchors)) or "none"
    )


def _rules(groups: dict[str, Any]) -> dict[str, tuple[str | None, Path | None]]:
    """Each alerting rule's ``runbook_url`` annotation (unexpanded) and its rules file's
    folder."""
    rules: dict[str, tuple[str | None, Path | None]] = {}
    for group in groups.get("groups") or []:
        file = group.get("file")
        base = Path(file).parent if file else None
        for rule in group.get("rules") or []:
            url = (rule.get("annotations") or {}).get("runbook_url")
            rules.setdefault(str(rule.get("name")), (str(url) if url else None, base))
    return rules


def _runbook_of(
    labels: dict[str, str], rules: dict[str, tuple[str | None, Path | None]], ev: Evaluation
) -> tuple[str | None, Path | None, str]:
    """The runbook URL of a fired alert, the folder a relative one is read from, and where the
    URL was read: the page the on-call got, else the rule."""
    name = labels.get("alertname", "")
    template, base = rules.get(name, (None, None))
    for page in ev.pages or []:
        for alert in page.alerts:
            if alert.name == name and all(
                alert.labels.get(k) == v
                for k, v in labels.items()
                if k not in ("alertstate", "__name__")
            ):
                return alert.annotations.get("runbook_url"), base, "as paged"
    if template is None:
        return None, base, "its rule"
    filled = _TEMPLATE.sub(lambda m: labels.get(m.group(1), m.group(0)), template)
    return filled, base, "its rule"


def _key(labels: dict[str, str]) -> str:
    shown = ",".join(
        f"{k}={v}"
        for k, v in sorted(labels.items())
        if k not in ("alertname", "alertstate", "__name__")
    )
    return f"{labels.get('alertname', '?')}{{{shown}}}"


def _result(check: Check, bad: float | None, fired: int, reason: str) -> CheckResult:
    return CheckResult(
        label=check.label,
        check=check.check,
        during=check.during,
        expected="every alert that fired names a runbook step that exists",
        observed=bad,
        observed_text="no data" if bad is None else f"{bad:.0f} of {fired} lead nowhere",
        passed=bad == 0 and fired > 0,
        reason=reason,
        samples=fired,
        runbook=check.runbook,
    )
