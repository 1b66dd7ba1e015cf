"""``drills validate``: check any file of ours without touching anything, whatever kind it is.

Each file is recognised by its top-level keys (``KINDS``, first match wins) and loaded by that
kind's own loader, which names file, line, field, value and what is allowed. A file that is
none of ours, or that looks like two kinds at once, is refused naming the kinds there are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drills.common.errors import ConfigError
from drills.common.yamlsrc import load_yaml, parse_model
from drills.engine.safety import SafetyPolicy, load_policy
from drills.gameday import AnswersFile, load_plan
from drills.model.scenario import load_scenario
from drills.probes.retrieval import load_queries
from stack.config import load_stack_config

__all__ = ["KINDS", "Kind", "kind_of", "validate_files"]


def _drill(path: Path) -> None:

    load_scenario(path)


def _plan(path: Path) -> None:

    load_plan(path)


def _answers(path: Path) -> None:

    parse_model(AnswersFile, load_yaml(path))


def _profile(path: Path) -> None:

    load_stack_config(path)


def _policy(path: Path) -> None:

    load_policy(path)


def _queries(path: Path) -> None:

    load_queries(path)


def _policy_fields() -> set[str]:

    return set(SafetyPolicy.model_fields)


@dataclass(frozen=True)
class Kind:
    name: str
    sign: str
    """How a person tells it (for the error that lists the kinds)."""
    matches: Callable[[dict[str, Any]], bool]
    load: Callable[[Path], None]


KINDS = (
    Kind("drill", "`drill:` at the top", lambda d: "drill" in d, _drill),
    Kind("game-day plan", "`gameday:` at the top", lambda d: "gameday" in d, _plan),
    Kind("game-day answers", "`answers:` at the top", lambda d: "answers" in d, _answers),
    Kind(
        "stack profile",
        "`replicas:` and `toxiproxy:` at the top",
        lambda d: "replicas" in d or ("toxiproxy" in d and "gateway" in d),
        _profile,
    ),
    Kind("recall queries", "`queries:` at the top", lambda d: "queries" in d, _queries),
    Kind(
        "safety policy",
        "only safety policy fields (allowed_hosts, max_faults_at_once, ...)",
        lambda d: bool(d) and set(d) <= _policy_fields(),
        _policy,
    ),
)


def kind_of(path: Path) -> Kind:
    """The kind of file ``path`` is; ``ConfigError`` if none, or more than one, fits."""
    doc = load_yaml(path)
    data = doc.data
    signs = "; ".join(f"a {k.name} has {k.sign}" for k in KINDS)
    if not isinstance(data, dict):
        raise ConfigError(
            [f"{path}:1 a YAML mapping is expected at the top, not {type(data).__name__}; {signs}"]
        )
    found = [k for k in KINDS if k.matches(data)]
    if len(found) != 1:
        keys = ", ".join(sorted(map(str, data))) or "none"
        what = (
            "none of the files drills reads"
            if not found
            else f"more than one kind at once ({', '.join(k.name for k in found)})"
        )
        raise ConfigError([f"{path}:1 this file is {what} (top-level keys: {keys}); {signs}"])
    return found[0]


def validate_files(paths: list[Path]) -> tuple[list[tuple[Path, str]], list[str]]:
    """Each valid file with its kind, and every problem of the others (file:line, field)."""
    valid: list[tuple[Path, str]] = []
    problems: list[str] = []
    for path in paths:
        try:
            kind = kind_of(path)
            kind.load(path)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        valid.append((path, kind.name))
    return valid, problems
