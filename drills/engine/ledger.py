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
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from drills.common.errors import InputError
from drills.common.system import pid_alive, state_home
from injectors.base import revert_entry

__all__ = ["CorruptLedger", "Ledger", "default_ledger_path"]

logger = logging.getLogger(__name__)


def default_ledger_path() -> Path:
    env = os.environ.get("DRILLS_LEDGER")
    return Path(env) if env else state_home() / "active-faults.json"


class CorruptLedger(InputError):
    """The ledger file is not a ledger; it was copied aside and left as it is."""


class Ledger:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_ledger_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def _edit(self) -> Iterator[dict[str, Any]]:
        lock = self.path.with_suffix(".lock")
        with open(lock, "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            data = self._read()
            yield data
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=2))
            os.replace(tmp, self.path)

    def _read(self) -> dict[str, Any]:
        """The entries; a ledger that is not what this module writes is never emptied: it is
        copied aside and refused (``CorruptLedger``), so no fault in it is forgotten."""
        if not self.path.exists():
            return {}
        raw = self.path.read_bytes()
        try:
            data = json.loads(raw)
        except ValueError as exc:
            problem = f"not JSON ({exc})"
        else:
            if isinstance(data, dict) and all(
                isinstance(v, dict) and "kind" in v and "target" in v for v in data.values()
            ):
                return data
            problem = "not a map of fault entries (each with kind and target)"
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        if not aside.exists():
            shutil.copyfile(self.path, aside)
        raise CorruptLedger(
            f"{self.path}: the ledger of applied faults is {problem}; a copy is kept at "
            f"{aside}. Remove the faults it lists by hand, then delete {self.path}",
            path=str(self.path),
        )

    def record(self, key: str, entry: dict[str, Any]) -> None:
        with self._edit() as data:
            since = data.get(key, {}).get("recorded_at", time.time())
            data[key] = {**entry, "pid": os.getpid(), "recorded_at": since}

    def forget(self, key: str) -> None:
        with self._edit() as data:
            data.pop(key, None)

    def entries(self) -> dict[str, dict[str, Any]]:
        with self._edit() as data:
            return dict(data)

    def sweep(self) -> list[dict[str, Any]]:
        """Revert faults left by runs that are no longer alive; return what was removed."""

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
