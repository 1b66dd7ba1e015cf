"""Alert-rule lint: will these alerts page in time, and point somewhere useful?

``drills lint RULES.yml`` reads a Prometheus rules file (ours, ``stack/monitoring/rules.yml``,
or a team's) and finds, before any drill runs, what a detection drill would show:

- ``alert-too-slow`` (error): the earliest an alert can fire is its ``for`` plus one scrape and
  one evaluation interval after the fault; when that is longer than the SLO window the alert
  protects (``--slo-window``, or the rule's own ``slo_window`` annotation), the SLO is broken
  before anyone is paged. The rule's longest range (``[10m]``) is named too: a rate over a long
  range crosses its threshold late.
- ``alert-runbook`` (error): an alert without a ``runbook_url`` annotation, or with a relative one
  that names no runbook file or no heading of it (the drills' own runbook validation).
- ``alert-no-metric`` (with ``--prometheus URL``): a metric the expression reads that no scrape
  target of that Prometheus exposes, by its series and its metadata. An error, or a warning
  where the expression offers an alternative (``or``). A labelled counter that never counted
  has no series yet: a drill that provokes it tells the two apart.

Metric names are read from the expression without a PromQL parser: strings, label matchers,
ranges and grouping clauses are removed, and what is left that is a name and not a function or
a keyword is a metric. Each finding names the file, the line of the rule, the values and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from drills.common.errors import ConfigError
from drills.common.prometheus import PrometheusAPI, PrometheusQueryError
from drills.common.units import format_duration, parse_duration
from drills.common.yamlsrc import YamlDocument, load_yaml
from drills.lint import Finding
from drills.model.references import runbook_problem

__all__ = ["is_rules_file", "lint_alert_rules", "metric_names"]

_KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
        "atan2",
    }
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_RANGE = re.compile(r"\[\s*([0-9smhdwy]+)\s*(?::\s*[0-9smhdwy]*\s*)?\]")
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = _GROUPING.sub("", text)
    text = re.sub(r"#.*", "", text)
    names = set()
    for match in _NAME.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def _longest_range(expr: str) -> float:
    ranges = []
    for match in _RANGE.finditer(_STRING.sub('""', expr)):
        try:
            ranges.append(parse_duration(match.group(1)))
        except ValueError:
            continue
    return max(ranges, default=0.0)


def is_rules_file(path: Path | str) -> bool:
    """Whether ``path`` reads as a Prometheus rules file (a top-level ``groups`` list)."""
    try:
        data = load_yaml(path).data
    except ConfigError:
        return False
    return isinstance(data, dict) and isinstance(data.get("groups"), list)


def lint_alert_rules(
    path: Path | str,
    slo_window: float | None = None,
    scrape_interval: float = 60.0,
    evaluation_interval: float = 60.0,
    prometheus: str | None = None,
) -> list[Finding]:
    """Findings for the alerting rules of the rules file at ``path``; ``ConfigError`` when it
    is not one. Intervals default to Prometheus's own defaults (1m); a group's ``interval``
    overrides the evaluation interval for its rules."""
    doc = load_yaml(path)
    findings: list[Finding] = []
    known = _known_metrics(prometheus, doc) if prometheus else None
    recorded = {
        str(rule.get("record"))
        for group in doc.data.get("groups") or []
        for rule in group.get("rules") or []
        if isinstance(rule, dict) and rule.get("record")
    }
    for g, group in enumerate(doc.data.get("groups") or []):
        if not isinstance(group, dict):
            raise ConfigError([f"{doc.path}:{doc.line_of(('groups', g))} groups[{g}]: not a map"])
        every = evaluation_interval
        if group.get("interval"):
            every = _duration(doc, ("groups", g, "interval"), group["interval"])
        timing = _Timing(slo_window, scrape_interval, every)
        for r, rule in enumerate(group.get("rules") or []):
            if isinstance(rule, dict) and "alert" in rule:
                loc = ("groups", g, "rules", r)
                findings.extend(_lint_rule(doc, loc, rule, timing, known, recorded))
    return findings


@dataclass(frozen=True)
class _Timing:
    """What bounds how fast an alert of a group can fire, and the SLO window it must fit."""

    slo_window: float | None
    scrape: float
    every: float
    """The group's evaluation interval."""


def _duration(doc: YamlDocument, loc: tuple[str | int, ...], value: Any) -> float:
    try:
        return parse_duration(str(value))
    except ValueError as exc:
        field = ".".join(str(p) for p in loc)
        raise ConfigError([f"{doc.path}:{doc.line_of(loc)} {field}: {exc}"]) from None


Problem = tuple[str, tuple[str | int, ...], str, str, bool]
"""A finding before it is located: rule id, path in the file, message, fix, error or not."""


def _lint_rule(
    doc: YamlDocument,
    loc: tuple[str | int, ...],
    rule: dict[str, Any],
    timing: _Timing,
    known: set[str] | None,
    recorded: set[str],
) -> list[Finding]:
    name = str(rule["alert"])
    problems = [
        *_too_slow(doc, loc, rule, timing),
        *_runbook(doc, loc, rule),
        *(
            _missing_metrics(loc, str(rule.get("expr", "")), known, recorded)
            if known is not None
            else []
        ),
    ]
    return [
        Finding(
            "error" if error else "warning",
            rule_id,
            f"{name} ({'.'.join(str(p) for p in at)})",
            message,
            fix,
            str(doc.path),
            doc.line_of(at),
        )
        for rule_id, at, message, fix, error in problems
    ]


def _too_slow(
    doc: YamlDocument, loc: tuple[str | int, ...], rule: dict[str, Any], timing: _Timing
) -> list[Problem]:
    scrape, every = timing.scrape, timing.every
    annotations = rule.get("annotations") or {}
    hold = _duration(doc, (*loc, "for"), rule["for"]) if rule.get("for") else 0.0
    window = timing.slo_window
    if annotations.get("slo_window"):
        window = _duration(doc, (*loc, "annotations", "slo_window"), annotations["slo_window"])
    earliest = hold + scrape + every
    if window is None or earliest <= window:
        return []
    longest = _longest_range(str(rule.get("expr", "")))
    ranged = f"; its longest range, [{format_duration(longest)}], adds more" if longest else ""
    fix = (
        f"shorten 'for' to at most {format_duration(window - scrape - every)}, or alert on a "
        "faster signal (a burn rate over a short window)"
        if window > scrape + every
        else f"even with for: 0s it fires {format_duration(scrape + every)} after the fault: "
        "scrape and evaluate more often than the SLO window, or alert on a faster signal"
    )
    message = (
        f"fires {format_duration(earliest)} after the fault at the earliest (for "
        f"{format_duration(hold)} + scrape {format_duration(scrape)} + evaluation "
        f"{format_duration(every)}), longer than the {format_duration(window)} SLO window it "
        f"protects{ranged}"
    )
    return [("alert-too-slow", (*loc, "for"), message, fix, True)]


def _runbook(doc: YamlDocument, loc: tuple[str | int, ...], rule: dict[str, Any]) -> list[Problem]:
    annotations = rule.get("annotations") or {}
    url = annotations.get("runbook_url")
    if not url:
        return [
            (
                "alert-runbook",
                (*loc, "annotations") if annotations else loc,
                "has no runbook_url: the page names no step to take",
                "add annotations.runbook_url: the runbook heading that covers it "
                "(https://.../runbook.md#step)",
                True,
            )
        ]
    problem = runbook_problem(str(url), doc.path.parent)
    if problem is None:
        return []
    return [
        (
            "alert-runbook",
            (*loc, "annotations", "runbook_url"),
            f"runbook_url {url!r}: {problem}",
            "point it at a runbook heading that exists",
            True,
        )
    ]


def _missing_metrics(
    loc: tuple[str | int, ...], expr: str, known: set[str], recorded: set[str]
) -> list[Problem]:
    alternative = re.search(r"\bor\b", expr) is not None
    return [
        (
            "alert-no-metric",
            (*loc, "expr"),
            f"reads {metric}, which no scrape target of the Prometheus exposes (no series, no "
            "metadata)" + ("; the expression has an alternative ('or')" if alternative else ""),
            "check the metric's name against /metrics of the target, or drill the stack so a "
            "labelled counter counts once; a rule on a missing metric never fires",
            not alternative,
        )
        for metric in sorted(metric_names(expr))
        if metric not in recorded and not _exposed(metric, known)
    ]


def _exposed(metric: str, known: set[str]) -> bool:
    if metric in known:
        return True
    base = next((metric[: -len(s)] for s in _SUFFIXES if metric.endswith(s)), None)
    return base is not None and base in known


def _known_metrics(url: str, doc: YamlDocument) -> set[str]:
    """Every metric name the Prometheus at ``url`` has a series or metadata of."""
    try:
        with PrometheusAPI(url) as client:
            names = set(client.get_data("/api/v1/label/__name__/values", {}) or [])
            metadata = client.get_data("/api/v1/metadata", {}) or {}
    except (httpx.HTTPError, PrometheusQueryError) as exc:
        raise ConfigError([f"--prometheus: no Prometheus answers at {url}: {exc}"]) from None
    return names | set(metadata)
