"""The README and the documentation pages (docs/pages) as tested documentation: their drill
snippets validate, their attach snippets load, every `drills` command in them parses with the
real argument parser, the cheap ones (validate, lint, schema, --dry-run, --help) run, every
repository path they (and the CLI's help and JSON schemas) name exists, the README's sample
output has the format the CLI prints, and the site builds with MkDocs in --strict mode.
Touches nothing: no stack, no network beyond what a dry run reads (nothing)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from drills.cli_parser import build_parser as _parser
from drills.model.scenario import Attach, load_scenario
from tests.conftest import isolated_env

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "pages").rglob("*.md"))]
TEXTS = {str(p.relative_to(ROOT)): p.read_text() for p in PAGES}
# (file:line, language, body) of every fenced block
BLOCKS = [
    (f"{name}:{text[: m.start()].count(chr(10)) + 2}", m.group(1), m.group(2))
    for name, text in TEXTS.items()
    for m in re.finditer(r"```(\w+)\n(.*?)```", text, re.S)
]
PREFIXES = ("bash stack/bootstrap.sh drills ", ".venv/bin/drills ", "drills ")
CHEAP = ("validate", "lint", "schema", "--help")


def _yaml_blocks() -> list[tuple[str, Any]]:
    return [(line, yaml.safe_load(body)) for line, lang, body in BLOCKS if lang == "yaml"]


def _commands() -> list[tuple[str, list[str]]]:
    """Every `drills` invocation in the pages' shell blocks and CI jobs, as argv, by file:line."""
    found = []
    for where, lang, body in BLOCKS:
        if lang not in ("bash", "yaml"):
            continue
        name, line = where.rsplit(":", 1)
        for offset, text in enumerate(body.splitlines()):
            text = text.strip().removeprefix("- ")
            text = re.split(r"\s+#|\s*(?:>|&&|\|)\s", text)[0].strip()
            prefix = next((p for p in PREFIXES if text.startswith(p)), None)
            if prefix is not None:
                found.append((f"{name}:{int(line) + offset}", shlex.split(text[len(prefix) :])))
    # And the ones in the prose, except those written as a pattern (`drills gate|gameday`,
    # `drills abort [RUN_ID]`, `drills gate PATH...`).
    for name, page in TEXTS.items():
        for match in re.finditer(r"`drills ([^`]+)`", page):
            text = match.group(1)
            if " " in text and not re.search(r"[|\[]|\.\.\.", text):  # a name alone: no command
                line = page[: match.start()].count("\n") + 1
                found.append((f"{name}:{line}", shlex.split(text)))
    return found


def _expanded(argv: list[str]) -> list[str] | None:
    """``argv`` with its globs expanded from the repository root; ``None`` when it holds a
    placeholder (``DRILL.yaml``, ``STACK_CONFIG``) and so cannot be run as written."""
    out: list[str] = []
    for arg in argv:
        if re.search(r"[A-Z]{3,}", arg) and not arg.startswith("-"):
            return None
        out.extend(
            sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(arg)) if "*" in arg else [arg]
        )
    return out


def test_the_readme_has_the_drill_snippet_and_commands_these_tests_read() -> None:
    assert any(isinstance(d, dict) and "drill" in d for _, d in _yaml_blocks())
    assert len(_commands()) >= 15


def test_every_drill_snippet_validates_beside_the_shipped_scenarios(tmp_path: Path) -> None:
    scenarios = tmp_path / "scenarios"
    shutil.copytree(ROOT / "scenarios", scenarios)
    snippets = [(line, d) for line, d in _yaml_blocks() if isinstance(d, dict) and "drill" in d]
    for line, data in snippets:
        path = scenarios / f"snippet-{line.replace('/', '-').replace(':', '-')}.yaml"
        path.write_text(yaml.safe_dump(data))
        load_scenario(path)  # raises, naming the field, if the README's snippet is wrong


def test_the_attach_snippet_is_a_valid_stack_section(tmp_path: Path) -> None:
    attach = [d for _, d in _yaml_blocks() if isinstance(d, dict) and set(d) == {"stack"}]
    assert attach, "the README's attach snippet is gone"
    reference = yaml.safe_load((ROOT / "scenarios" / "inference-latency.yaml").read_text())
    reference.pop("twins")  # its twin is a stack profile, which an attached drill cannot have
    scenarios = tmp_path / "scenarios"
    shutil.copytree(ROOT / "scenarios", scenarios)
    for data in attach:
        path = scenarios / "attached.yaml"
        path.write_text(yaml.safe_dump({**reference, **data}))
        scenario, _ = load_scenario(path)
        attach = scenario.stack
        assert isinstance(attach, Attach) and attach.gateway and attach.toxiproxy
        adapter = attach.gateway_adapter()  # the overrides merge onto the adapter named
        given = data["stack"]["attach"].get("adapter")
        if isinstance(given, dict):
            assert adapter.name == given["use"]
            assert adapter.health.path == given["health"]["path"]
            if isinstance(given.get("breaker_opened"), dict):
                assert adapter.breaker_opened is not None
                assert adapter.breaker_opened.map == given["breaker_opened"]["map"]
            if "metrics_path" in given:
                assert adapter.metrics_path == (
                    None if given["metrics_path"] == "none" else given["metrics_path"]
                )


@pytest.mark.parametrize(("line", "argv"), _commands(), ids=lambda v: str(v))
def test_every_drills_command_in_the_readme_parses(line: str, argv: list[str]) -> None:
    parser = _parser()
    try:
        parser.parse_args(argv)
    except SystemExit as exc:
        assert exc.code == 0 and "--help" in argv, f"{line}: drills {shlex.join(argv)}"


def test_the_cheap_commands_in_the_readme_run(tmp_path: Path) -> None:
    ran = 0
    for line, argv in _commands():
        if argv[0] not in CHEAP and "--dry-run" not in argv and "--help" not in argv:
            continue
        args = _expanded(argv)
        if args is None:
            continue
        result = subprocess.run(
            [sys.executable, "-m", "drills.cli", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=isolated_env(tmp_path),
            timeout=120,
        )
        assert result.returncode == 0, f"{line}: {result.stdout}{result.stderr}"
        ran += 1
    assert ran >= 3


def test_the_sample_output_has_the_format_the_cli_prints() -> None:
    sample = re.search(r"The drill ends like this.*?```\n(.*?)```", README, re.S)
    assert sample, "the README's sample output is gone"
    lines = [t for t in sample.group(1).splitlines() if t.strip() and t.strip() != "..."]
    checks = [t for t in lines if t.startswith("  ")]
    assert checks and all(
        re.fullmatch(r"  (pass|FAIL)  [^:]+: observed \S.*, expected \S.*", t) for t in checks
    ), checks
    assert re.fullmatch(r"verdict: (passed|failed|aborted|interrupted)", lines[-2])
    assert re.fullmatch(r"report: runs/[a-z0-9-]+-\d{8}-\d{6}-[0-9a-f]{6}/index.html", lines[-1])
    source = (ROOT / "drills" / "cli_run.py").read_text()
    assert 'print(f"  {mark}  {check.label}: observed {check.observed_text}, expected ' in source


def test_the_safety_section_names_every_policy_field() -> None:
    from drills.engine.safety import SafetyPolicy

    safety = TEXTS["docs/pages/safety.md"]
    section = safety[safety.index("- **Policy**") : safety.index("- **Dry run**")]
    named = set(re.findall(r"`([a-z_]+)`", section))
    assert set(SafetyPolicy.model_fields) <= named, set(SafetyPolicy.model_fields) - named


def test_the_readme_is_short_and_the_site_builds_strictly(tmp_path: Path) -> None:
    """The README is the front door (at most 250 lines); the rest is the site, which builds
    with every page in the navigation, every link and anchor resolved, and the reference
    generated from the registries."""
    assert README.count("\n") <= 250
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "docs/mkdocs.yml", "-d", site],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    checks = (site / "reference" / "checks" / "index.html").read_text()
    assert "retry_amplification" in checks and "breaker_opened_within" in checks
    faults = (site / "reference" / "faults" / "index.html").read_text()
    assert "toxiproxy.latency" in faults and "hop.stall" in faults
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "exit codes:" in cli and "drills gameday" in cli


def test_every_repository_path_the_pages_name_exists() -> None:
    """A path in backticks that starts with one of the repository's top folders (or is one of
    its top files) names something that is there; placeholders (CAPITALS, globs, <...>) and
    paths under a run's output are not paths of the repository."""
    tops = ("drills/", "injectors/", "scenarios/", "stack/", "reports/", "tests/", "bench/",
            "docs/", ".ci/")  # fmt: skip
    made = ("docs/site", "docs/pages/reference")  # written by `mkdocs build` and its hooks
    missing = []
    for name, page in TEXTS.items():
        for match in re.finditer(r"`([^`\s]+)`", page):
            path = match.group(1).split(":")[0].split("#")[0].rstrip(".,)")
            if not path.startswith(tops) or re.search(r"[A-Z]{2,}|[*<>{}]|\.\.\.", path):
                continue
            if path.startswith(made):
                continue
            if not (ROOT / path).exists():
                missing.append(f"{name}:{page[: match.start()].count(chr(10)) + 1}: {path}")
    assert not missing, "\n".join(missing)


def _help_texts(parser: Any) -> list[tuple[str, str]]:
    """(where, text) of every help string of the parser and its subcommands, recursively."""
    import argparse

    found = [(parser.prog, parser.description or ""), (parser.prog, parser.epilog or "")]
    for action in parser._actions:
        found.append((f"{parser.prog} {'/'.join(action.option_strings) or action.dest}",
                      str(action.help or "")))  # fmt: skip
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                found.append((f"{parser.prog} {choice.dest}", str(choice.help or "")))
            for sub in action.choices.values():
                found.extend(_help_texts(sub))
    return found


def _schema_texts(node: Any, where: str) -> list[tuple[str, str]]:
    if isinstance(node, dict):
        return [
            item
            for key, value in node.items()
            for item in (
                [(where, value)]
                if key == "description" and isinstance(value, str)
                else _schema_texts(value, f"{where}.{key}")
            )
        ]
    if isinstance(node, list):
        return [item for value in node for item in _schema_texts(value, where)]
    return []


def test_every_repository_path_the_cli_help_and_the_schemas_name_exists() -> None:
    """What a user reads without the docs (`drills ... --help`, `drills schema`, an editor's
    hover) names only files that are there."""
    from drills.cli import _schema

    texts = _help_texts(_parser())
    for what in ("scenario", "journal"):
        texts += _schema_texts(_schema(what), f"schema {what}")
    tops = "drills|injectors|scenarios|stack|reports|bench|docs"
    pattern = rf"(?:{tops})/[\w./-]*\w\.(?:ya?ml|md|py|json)"
    missing = [
        f"{where}: {path}"
        for where, text in texts
        for path in re.findall(pattern, " ".join(text.split()))
        if not (ROOT / path).exists()
    ]
    assert len(texts) > 100
    assert not missing, "\n".join(missing)
