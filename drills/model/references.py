"""Every reference a scenario makes, checked when it is validated, not when it runs.

- ``load.prompts``: a prompts file must exist, and every line must be a prompt;
- ``runbook`` (the drill's and each check's): a relative path to a Markdown file that exists,
  and an ``#anchor`` that one of its headings makes (GitHub's rule: lower case, punctuation
  dropped, spaces to hyphens; a repeated heading gets ``-1``, ``-2``); or an ``http(s)`` URL.
  Any other scheme (``javascript:``, ``file:``) is refused: reports link to it.

Problems come back as ``(location, message, value)``, located in the scenario file by the
caller, like the model's own problems.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from drills.common.errors import InputError

__all__ = ["check_link", "markdown_anchors", "read_prompts", "scenario_references"]

Loc = tuple[str | int, ...]
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def markdown_anchors(text: str) -> set[str]:
    """The anchors the headings of a Markdown text make (GitHub's slugs)."""
    seen: dict[str, int] = {}
    anchors = set()
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(2).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def check_link(link: str) -> str | None:
    """Why ``link`` may not stand in a report (``None`` when it may): only http(s) URLs and
    relative paths are links."""
    if _SCHEME.match(link) is None:
        return None
    parts = urlsplit(link)
    if parts.scheme in ("http", "https") and parts.netloc:
        return None
    return f"only http(s) URLs and relative paths are allowed as links, not {parts.scheme}:"


def runbook_problem(runbook: str, base: Path) -> str | None:
    """What is wrong with a runbook reference relative to ``base`` (``None``: nothing)."""
    refused = check_link(runbook)
    if refused is not None:
        return refused
    if _SCHEME.match(runbook):
        return None  # an http(s) runbook: not ours to fetch
    path, _, anchor = runbook.partition("#")
    target = base / path
    if not path or not target.is_file():
        return f"no runbook file {str(target)!r}"
    if anchor:
        anchors = markdown_anchors(target.read_text(errors="replace"))
        if anchor not in anchors:
            return f"{path} has no heading that makes the anchor #{anchor}; its anchors: " + (
                ", ".join(sorted(anchors)) or "none"
            )
    return None


def read_prompts(path: Path) -> list[list[dict[str, str]]]:
    """The chat message lists of a prompts file (JSONL: ``{"prompt": ...}`` or
    ``{"messages": [...]}`` per line); ``InputError`` naming the file and line otherwise."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the prompts file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: the prompts file is not UTF-8 text") from None
    messages: list[list[dict[str, str]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{path}:{number}: not a JSON object ({exc})") from None
        if isinstance(item, dict) and isinstance(item.get("messages"), list):
            messages.append(item["messages"])
        elif isinstance(item, dict) and isinstance(item.get("prompt"), str):
            messages.append([{"role": "user", "content": item["prompt"]}])
        else:
            raise InputError(
                f"{path}:{number}: expected a 'prompt' (text) or 'messages' (a list) field"
            )
    if not messages:
        raise InputError(f"{path}: no prompts")
    return messages


def scenario_references(scenario: Any, base: Path) -> Iterator[tuple[Loc, str, Any]]:
    """The problems of every file and link ``scenario`` refers to, relative to ``base``."""
    prompts = scenario.load.prompts
    if isinstance(prompts, str):
        try:
            read_prompts(base / prompts)
        except InputError as exc:
            yield ("load", "prompts"), str(exc), prompts
    if scenario.runbook:
        problem = runbook_problem(scenario.runbook, base)
        if problem:
            yield ("runbook",), problem, scenario.runbook
    for i, check in enumerate(scenario.expect):
        if check.runbook:
            problem = runbook_problem(check.runbook, base)
            if problem:
                yield ("expect", i, "runbook"), problem, check.runbook
