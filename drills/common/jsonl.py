"""JSON Lines files that other processes append to while we read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["read_jsonl"]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The objects of ``path``, one per line; a line that is not one (half written by a
    process still appending, or killed mid-write) is skipped. A missing file has none."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out
