"""The code keeps the shape the project agreed on: no function longer than 60 lines unless a
comment at its top says why (``# Long on purpose: ...``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("drills", "injectors", "stack", "reports")
LIMIT = 60


def test_no_long_function_without_a_reason() -> None:
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            source = path.read_text()
            lines = source.splitlines()
            for node in ast.walk(ast.parse(source)):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                head = "\n".join(lines[node.lineno : node.lineno + 12])
                if length > LIMIT and "# Long on purpose:" not in head:
                    rel = path.relative_to(ROOT)
                    offenders.append(f"{rel}:{node.lineno} {node.name} ({length} lines)")
    assert not offenders, "functions over 60 lines with no reason given:\n" + "\n".join(offenders)
