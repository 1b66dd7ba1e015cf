"""The ledger of applied faults: what a crashed run left behind, so the next run can remove it.

Before a fault is applied its entry is written (with the pid of the run), and it is removed once
the fault is reverted. ``sweep`` reverts every entry whose run is no longer alive. The file is
``$DRILLS_LEDGER`` or ``~/.local/state/drills/active-faults.json``.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from drills.common.system import pid_alive, state_home

__all__ = ["Ledger", "default_ledger_path"]

logger = logging.getLogger(__name__)


def default_ledger_path() -> Path:
    env = os.environ.get("DRILLS_LEDGER")
    return Path(env) if env else state_home() / "active-faults.json"


class Ledger:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_ledger_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def _edit(self) -> Iterator[dict[str, Any]]:
        lock = self.path.with_suffix(".lock")
        with open(lock, "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                data = json.loads(self.path.read_text()) if self.path.exists() else {}
            except ValueError:
                data = {}
            yield data
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=2))
            os.replace(tmp, self.path)

    def record(self, key: str, entry: dict[str, Any]) -> None:
        with self._edit() as data:
            data[key] = {**entry, "pid": os.getpid()}

    def forget(self, key: str) -> None:
        with self._edit() as data:
            data.pop(key, None)

    def entries(self) -> dict[str, dict[str, Any]]:
        with self._edit() as data:
            return dict(data)

    def sweep(self) -> list[dict[str, Any]]:
        """Revert faults left by runs that are no longer alive; return what was removed."""
        from injectors.base import revert_entry

        removed = []
        for key, entry in self.entries().items():
            if pid_alive(int(entry.get("pid", 0))) and int(entry["pid"]) != os.getpid():
                continue
            try:
                outcome = revert_entry(entry)
            except Exception as exc:  # recorded and kept for the next sweep
                logger.error("could not remove leftover fault %s: %s", key, exc)
                continue
            logger.warning(
                "removed a fault left behind by an earlier run (pid %s): %s on %s (%s)",
                entry.get("pid"),
                entry["kind"],
                entry["target"],
                outcome.get("method"),
            )
            self.forget(key)
            removed.append({"key": key, **entry, **outcome})
        return removed
