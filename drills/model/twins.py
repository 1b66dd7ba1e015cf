"""Twins: the broken stacks a drill must fail on (``twins:`` of a scenario).

A twin is the proof that a drill can fail: the same drill on a stack broken on purpose (a
stack profile, a stack the user runs, a LiteLLM config, the stack in another Kubernetes
namespace, or the drill's own stack watched by monitoring the team fears), and the checks
that must catch it. This module holds their model and the reading of the files they name;
``drills.engine.twins`` runs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from drills.common.yamlsrc import YamlDocument, format_path
from drills.model.spec import SpecModel as _Model

__all__ = [
    "Twin",
    "TwinKubernetes",
    "TwinMonitoring",
    "twin_file_problems",
    "twin_label_problems",
    "twin_litellm",
    "twin_profile",
    "twin_rules",
]

Loc = tuple[str | int, ...]


class TwinKubernetes(_Model):
    """Where a twin's stack runs on Kubernetes, for a drill with kubernetes faults: the same
    stack deployed broken in another namespace (or cluster context) of the user's."""

    namespace: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """Every kubernetes fault of the drill acts in this namespace on the twin (it must be in
    the drill's ``kubernetes.allowed_namespaces``)."""
    context: str | None = None
    """The kubeconfig context the twin runs in (in the drill's ``allowed_contexts``)."""

    @model_validator(mode="after")
    def _says_where(self) -> TwinKubernetes:
        if self.namespace is None and self.context is None:
            raise ValueError("a Kubernetes twin names its 'namespace', its 'context' or both")
        return self


class TwinMonitoring(_Model):
    """Monitoring the team fears, for a drill that asks the embedded stack's monitoring: the
    same stack, its Prometheus evaluating these rules in place of the stack's own, and its
    Alertmanager's route dropping every page when ``route: dropped``."""

    rules: list[str] = Field(min_length=1)
    """Prometheus rules files (relative to the scenario), in place of
    ``stack/monitoring/rules.yml``: a ``for`` of 10 minutes, a rule on a metric no target
    exposes, an alert without its runbook_url."""
    route: Literal["pager", "dropped"] = "pager"
    """``dropped``: Alertmanager's route sends every alert to a receiver with no integration
    (a route that swallows the page); ``pager``: to the harness's pager, as the drill's."""


class Twin(_Model):
    """A broken stack the drill must fail on, and the checks that must catch it: the proof
    that the drill can fail (``drills run --twin``). The twin's stack is a stack profile
    (``profile``), a stack the user runs (``attach``, fields over the drill's own), a LiteLLM
    config (``litellm``), or, for a drill with kubernetes faults, the stack deployed broken in
    another namespace or context (``kubernetes``, with ``attach`` when its gateway differs);
    or the drill's own stack watched by monitoring the team fears (``monitoring``)."""

    name: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]{0,60}$")
    """How ``--twin NAME`` picks it; default: the profile's name, else ``attached``."""
    profile: str | None = None
    """A stack profile (a name, or a YAML path relative to the scenario)."""
    attach: dict[str, Any] | None = None
    """Fields of the drill's ``stack.attach`` that differ on the twin (``gateway: URL`` of
    the same gateway with a broken config, ``adapter``, ``config``)."""
    litellm: str | None = None
    """A LiteLLM proxy config (YAML, relative to the scenario): the harness starts LiteLLM
    with it in front of the drill's stack and runs the drill on it in place of the drill's
    gateway. A config without a ``model_list`` gets one deployment per primary hop of the
    embedded stack (``stack.litellm``)."""
    kubernetes: TwinKubernetes | None = None
    """The namespace or context, on the twin, of every kubernetes fault of the drill (a
    replica deployed without the controller that would replace it, say)."""
    monitoring: TwinMonitoring | None = None
    """The drill's own stack, its monitoring broken as a team fears (alert rules, a route
    that drops the page): the detection checks must fail on it."""
    must_fail: list[str]
    """Labels of the drill's checks that must fail on the twin (``fallback_rate during
    fault``, ``stack_lint``): the twin passes when exactly these fail."""
    may_fail: list[str] = Field(default_factory=list)
    """Checks that may go either way on the twin (say why in the YAML); any other check that
    fails on it fails the twin."""
    absent: list[str] = Field(default_factory=list)
    """Hops or components the drill's faults target that the twin's stack does not have:
    those faults are not applied on the twin."""
    why: str = ""
    """What is broken in the twin, in a sentence (shown in the report)."""
    aborts: Literal["error_rate", "fallback_rate", "answer_rate"] | None = None
    """The drill's abort condition (``abort_when``) that must stop the run on the twin: a
    break that freezes the stack is caught by the abort, before the phases end. The twin then
    holds when that condition stopped it and the checks (judged on what ran) failed as named."""

    @field_validator("must_fail")
    @classmethod
    def _names_a_check(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError(
                "a twin names at least one check that must fail on it: a twin that fails no "
                "check proves nothing"
            )
        return value

    @model_validator(mode="after")
    def _one_stack(self) -> Twin:
        given = [f for f in ("profile", "attach", "litellm") if getattr(self, f) is not None]
        if self.monitoring is not None:
            if given or self.kubernetes is not None:
                raise ValueError(
                    "a monitoring twin is the drill's own stack with other alert rules or "
                    "route: not another stack too (got "
                    f"{', '.join([*given, *(['kubernetes'] if self.kubernetes else [])])})"
                )
        elif self.kubernetes is not None:
            if given not in ([], ["attach"]):
                raise ValueError(
                    "a Kubernetes twin is the drill's stack in another namespace or context, "
                    "with 'attach' fields where its gateway differs: not a stack profile or "
                    f"a LiteLLM config too (got {', '.join(given)})"
                )
        elif len(given) != 1:
            raise ValueError(
                "a twin is a stack profile ('profile'), a stack the user runs ('attach') or a "
                "LiteLLM config the harness starts LiteLLM with ('litellm'): exactly one of "
                f"them (got {', '.join(given) or 'none'})"
            )
        return self

    @property
    def key(self) -> str:
        if self.name:
            return self.name
        if self.profile or self.litellm:
            return Path(self.profile or self.litellm or "").stem
        if self.kubernetes is not None:
            return str(self.kubernetes.namespace or self.kubernetes.context)
        if self.monitoring is not None:
            return "monitoring"
        return "attached"


def twin_label_problems(i: int, twin: Twin, labels: list[str]) -> Iterator[tuple[Loc, str, Any]]:
    """The checks a twin names are the drill's, each in must_fail or may_fail, not both."""
    for field in ("must_fail", "may_fail"):
        for j, label in enumerate(getattr(twin, field)):
            if label not in labels:
                yield (
                    ("twins", i, field, j),
                    "the drill has no check of that label; expected one of: " + ", ".join(labels),
                    label,
                )
            elif field == "may_fail" and label in twin.must_fail:
                yield (
                    ("twins", i, field, j),
                    "already in must_fail: a check either must fail or may",
                    label,
                )


def twin_profile(twin: Twin, doc: YamlDocument | None) -> str | None:
    """The twin's profile as ``load_stack_config`` takes it: a name, or a path (relative to
    the scenario file when it lies there)."""
    if twin.profile is None:
        return None
    if doc is not None and twin.profile.endswith((".yaml", ".yml")):
        beside = doc.path.parent / twin.profile
        if beside.exists():
            return str(beside)
    return twin.profile


def twin_litellm(twin: Twin, doc: YamlDocument | None) -> Path | None:
    """The twin's LiteLLM config file (relative to the scenario file)."""
    if twin.litellm is None:
        return None
    base = doc.path.parent if doc is not None else Path.cwd()
    return base / twin.litellm


def _read_yaml(value: str, doc: YamlDocument | None, loc: Loc, what: str) -> tuple[Any, list[str]]:
    """The YAML file ``value`` names (relative to the scenario file), or the problem of
    reading it, located at ``loc``; ``what`` names the kind of file in the problem."""
    where = f"{doc.path}:{doc.line_of(loc)} " if doc else ""
    path = (doc.path.parent if doc is not None else Path.cwd()) / value
    try:
        return yaml.safe_load(path.read_text()), []
    except OSError as exc:
        return None, [
            f"{where}{format_path(loc)}: cannot read the {what} {path}: {exc.strerror} "
            f"(got {value!r})"
        ]
    except yaml.YAMLError as exc:
        return None, [f"{where}{format_path(loc)}: {path} is not YAML: {exc} (got {value!r})"]


def _litellm_problems(value: str, doc: YamlDocument | None, loc: Loc) -> list[str]:
    data, problems = _read_yaml(value, doc, loc, "LiteLLM config")
    if problems or isinstance(data, dict):
        return problems
    return _shape_problem(
        value,
        doc,
        loc,
        "a LiteLLM config is a mapping (model_list, router_settings, litellm_settings, ...)",
    )


def _shape_problem(value: str, doc: YamlDocument | None, loc: Loc, shape: str) -> list[str]:
    """The file ``value`` names is YAML but not of the ``shape`` it must have."""
    where = f"{doc.path}:{doc.line_of(loc)} " if doc else ""
    path = (doc.path.parent if doc is not None else Path.cwd()) / value
    return [f"{where}{format_path(loc)}: {path}: {shape} (got {value!r})"]


def twin_rules(twin: Twin, doc: YamlDocument | None) -> list[Path]:
    """A monitoring twin's rules files (relative to the scenario file); none for another."""
    base = doc.path.parent if doc is not None else Path.cwd()
    return [(base / r).resolve() for r in (twin.monitoring.rules if twin.monitoring else [])]


def _rules_problems(value: str, doc: YamlDocument | None, loc: Loc) -> list[str]:
    data, problems = _read_yaml(value, doc, loc, "rules file")
    if problems or (isinstance(data, dict) and isinstance(data.get("groups"), list)):
        return problems
    return _shape_problem(
        value,
        doc,
        loc,
        "a Prometheus rules file is a mapping with 'groups' (a list of rule groups)",
    )


def twin_file_problems(i: int, twin: Twin, doc: YamlDocument | None) -> list[str]:
    """What is wrong with the files twin ``i`` names (its LiteLLM config, its rules files),
    each located at the twin's field."""
    problems: list[str] = []
    if twin.litellm is not None:
        problems += _litellm_problems(twin.litellm, doc, ("twins", i, "litellm"))
    for j, rules in enumerate(twin.monitoring.rules if twin.monitoring else []):
        problems += _rules_problems(rules, doc, ("twins", i, "monitoring", "rules", j))
    return problems
