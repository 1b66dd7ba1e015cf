"""Injection precision from drill journals: scheduled start -> toxic confirmed active (read back
from Toxiproxy), and scheduled end -> removal finished.

    .venv/bin/python bench/injection_precision.py runs/*/journal.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main() -> None:
    apply_ms: list[float] = []
    revert_ms: list[float] = []
    methods: dict[str, int] = {}
    for name in sys.argv[1:]:
        journal = json.loads(Path(name).read_text())
        t0 = journal.get("t0")
        if not t0:
            continue
        for fault in journal["faults"]:
            evidence = fault.get("evidence") or {}
            if fault.get("applied_at") and evidence.get("confirmed_at"):
                apply_ms.append(
                    (evidence["confirmed_at"] - (t0 + fault["scheduled_offset"])) * 1000
                )
            revert = fault.get("rollback") or fault.get("revert") or {}
            if revert.get("finished_at"):
                revert_ms.append((revert["finished_at"] - (t0 + fault["scheduled_end"])) * 1000)
                methods[revert.get("method", "?")] = methods.get(revert.get("method", "?"), 0) + 1
    if not apply_ms:
        raise SystemExit("no faults with evidence in the given journals")
    print(f"faults: {len(apply_ms)} applied, {len(revert_ms)} reverted {methods}")
    print(
        f"scheduled start -> confirmed active: median {statistics.median(apply_ms):.1f} ms, "
        f"max {max(apply_ms):.1f} ms"
    )
    print(
        f"scheduled end -> removed: median {statistics.median(revert_ms):.1f} ms, "
        f"max {max(revert_ms):.1f} ms"
    )


if __name__ == "__main__":
    main()
