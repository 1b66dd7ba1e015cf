"""MkDocs hooks: the reference pages, generated from the code at build time, and the home
page, which is the README.

The reference is read from the registries the harness itself uses (the scenario's fault
models, the check families, the gateway adapter's model and the built-in adapters, the
command-line parser), so it cannot drift from what ``drills`` accepts. Plugins installed in
the environment that builds the docs appear in it too.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from drills.cli_parser import build_parser as _parser
from drills.model.check_families import ALERT_TIMED, families
from drills.model.gateways import (
    BreakerSignal,
    GatewayAdapter,
    Health,
    UpstreamHeader,
    known_adapters,
    merged,
)
from drills.model.scenario import fault_models

ROOT = Path(__file__).resolve().parent.parent

REFERENCE = {
    "reference/faults.md": "faults",
    "reference/checks.md": "checks",
    "reference/adapters.md": "adapters",
    "reference/cli.md": "cli",
}


def on_files(files: Files, config: Any) -> Files:
    for uri, what in REFERENCE.items():
        files.append(File.generated(config, uri, content=PAGES[what]()))
    files.append(File.generated(config, "index.md", content=home()))
    return files


# -- the home page ----------------------------------------------------------------------------


def home() -> str:
    """The README, with its table of pages as links within the site."""
    text = (ROOT / "README.md").read_text()
    return re.sub(
        r"`docs/pages/([a-z-]+(?:/[a-z-]+)?)(\.md|/)`",
        lambda m: f"[{m.group(1)}]({m.group(1)}{'.md' if m.group(2) == '.md' else '/faults.md'})",
        text,
    )


def _md(text: str) -> str:
    """A docstring as one Markdown paragraph (reST's double backticks made single)."""
    return " ".join(text.split()).replace("``", "`")


# -- faults -----------------------------------------------------------------------------------


def _type(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        target = defs.get(name, {})
        return _type(target, defs) if "enum" in target else name
    if "const" in schema:
        return f"`{schema['const']}`"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            kinds = [_type(s, defs) for s in schema[key] if s.get("type") != "null"]
            nullable = any(s.get("type") == "null" for s in schema[key])
            return " or ".join(kinds) + (" (or null)" if nullable else "")
    if schema.get("pattern", "").endswith("(ms|s|m|h)\\s*$"):
        return "duration (`200ms`, `30s`, `2m`)"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}), defs)}"
    if kind == "object":
        return "mapping"
    return str(kind)


def _fields(model: Any, skip: tuple[str, ...] = ()) -> list[str]:
    schema = model.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    rows = ["| field | type | default | what it is |", "|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        if name in skip:
            continue
        default = "required" if name in required else f"`{prop.get('default')}`"
        what = _md(prop.get("description") or "").replace("|", "\\|")
        rows.append(f"| `{name}` | {_type(prop, defs)} | {default} | {what} |")
    return rows


def faults() -> str:
    lines = [
        "# Faults",
        "",
        "Every fault kind a scenario's `inject` list can hold (generated from the fault "
        "models; a plugin's kinds appear where it is installed). Every fault also has `target` "
        "(what it hits), `at` (its offset in the phase) and `for` (how long it lasts; by "
        "default until the phase ends).",
        "",
    ]
    common = ("kind", "target", "at", "for")
    for model in sorted(fault_models(), key=lambda m: str(m.model_fields["kind"].annotation)):
        kinds = re.findall(r"'([^']+)'", str(model.model_fields["kind"].annotation))
        lines += [f"## {', '.join(f'`{k}`' for k in kinds)}", ""]
        doc = (model.__doc__ or "").strip()
        if doc and not doc.startswith(model.__name__ + "("):
            lines += [_md(doc), ""]
        rows = _fields(model, skip=common)
        lines += rows if len(rows) > 2 else ["No parameters besides `target`, `at` and `for`."]
        lines.append("")
    return "\n".join(lines)


# -- checks -----------------------------------------------------------------------------------

_BOUNDS = {
    "duration": "a duration with its unit (`below: 8s`)",
    "share": "a share from 0 to 1 (`below: 0.02`)",
    "count": "a count, 0 or more",
    "number": "any number",
    "findings": "the number of lint findings tolerated",
}


def checks() -> str:
    lines = [
        "# Checks",
        "",
        "Every check name a scenario's `expect` list can use (generated from the check "
        "families; a plugin's checks appear where it is installed). A check judges one window "
        "(`during: PHASE`, or the whole run) against `below` and/or `above`, and names the "
        "runbook step that covers it (`runbook: runbooks/x.md#step`).",
        "",
        "| check | family | bound | target | window | other fields |",
        "|---|---|---|---|---|---|",
    ]
    for family in families():
        names = ", ".join(f"`{n}`" for n in family.listed)
        target = "required" if family.needs_target else "optional"
        window = "`during`" if family.takes_during else "the whole run"
        bound = _BOUNDS[family.bounds] + (" (below only)" if family.only_below else "")
        if family.family in ALERT_TIMED:
            bound = "`within`: a duration (`within: 30s`), from the fault (or its revert)"
        elif family.family == "alert_quiet":
            bound = "none: it passes when no alert of the set fired"
        elif family.family == "alert_runbook":
            bound = "none: it passes when every alert of the set that fired leads to a runbook step"
        elif not family.needs_bound:
            bound = "none"
        other = ", ".join(f"`{f}`" for f in family.fields) or "-"
        lines.append(f"| {names} | {family.family} | {bound} | {target} | {window} | {other} |")
    lines.append("")
    return "\n".join(lines)


# -- adapters ---------------------------------------------------------------------------------


def adapters() -> str:
    lines = [
        "# Gateway adapters",
        "",
        "How the harness reads a gateway (generated from the adapter's model). A scenario's "
        "attach section names one (`adapter: litellm`) and may override any field "
        "(`adapter: {use: litellm, health: {path: /health/readiness}}`).",
        "",
        "## Built-in and installed adapters",
        "",
        "| adapter | what it is |",
        "|---|---|",
    ]
    for name in known_adapters():
        lines.append(f"| `{name}` | {merged(name).description} |")
    lines.append("")
    for title, model in (
        ("The adapter", GatewayAdapter),
        ("`health`", Health),
        ("`upstream`", UpstreamHeader),
        ("`breaker_opened`, `breaker_opens`", BreakerSignal),
    ):
        lines += [f"## {title}", "", *_fields(model), ""]
    return "\n".join(lines)


# -- the command line -------------------------------------------------------------------------


def cli() -> str:
    parser = _parser()
    lines = ["# Command line", "", "Every `drills` command, as `--help` prints it.", ""]
    lines += ["```text", parser.format_help().rstrip(), "```", ""]
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, sub in action.choices.items():
            lines += [f"## drills {name}", "", "```text", sub.format_help().rstrip(), "```", ""]
            for inner in sub._actions:
                if isinstance(inner, argparse._SubParsersAction):
                    for child, parser_of in inner.choices.items():
                        lines += [
                            f"### drills {name} {child}",
                            "",
                            "```text",
                            parser_of.format_help().rstrip(),
                            "```",
                            "",
                        ]
    return "\n".join(lines)


PAGES = {"faults": faults, "checks": checks, "adapters": adapters, "cli": cli}
