"""The journal's probe scrapes as columns: each series' name and labels once, its values in a
column beside the scrape times, not every sample as an object of its own.

A one-hour drill scrapes four sources every second; as objects that is about 150 MB of JSON
(a sample's name and labels repeated in every scrape), as columns a few MB. ``to_columns``
writes ``Journal.probes`` this way and ``from_columns`` reads it back into the same scrapes
(``bench/journal_size.py`` measures both). The shape, per source, in the order of its first
scrape::

    {"source": "vllm-0",
     "times": [t0, t1, ...],                     # each scrape's time
     "errors": {"3": "connection refused"},      # by scrape index, only the failed ones
     "ended": {"0": t},                           # by index, probes that take a while
     "series": [{"name": "vllm:num_requests_waiting", "labels": {...},
                 "values": [0.0, null, 2.0, ...]}]}  # null: not in that scrape

A series that a scrape carried twice (the same name and labels) is kept as two series. A value
that JSON cannot hold is written as Prometheus spells it: ``"NaN"``, ``"+Inf"``, ``"-Inf"``.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["from_columns", "is_columns", "to_columns"]

Key = tuple[str, tuple[tuple[str, str], ...], int]


def to_columns(probes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``probes`` (each a scrape: ``time``, ``source``, ``samples``, ``error``, ``ended``) as
    one column block per source, its scrapes in time order."""
    blocks: dict[str, dict[str, Any]] = {}
    series: dict[str, dict[Key, dict[str, Any]]] = {}
    for probe in sorted(probes, key=lambda p: p["time"]):
        source = probe["source"]
        block = blocks.get(source)
        if block is None:
            block = blocks[source] = {"source": source, "times": [], "errors": {}, "ended": {}}
            series[source] = {}
        index = len(block["times"])
        block["times"].append(probe["time"])
        if probe.get("error") is not None:
            block["errors"][str(index)] = probe["error"]
        if probe.get("ended") is not None:
            block["ended"][str(index)] = probe["ended"]
        seen: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        for sample in probe.get("samples") or ():
            labels = tuple(sorted((sample.get("labels") or {}).items()))
            twice = seen.get((sample["name"], labels), 0)
            seen[(sample["name"], labels)] = twice + 1
            column = series[source].get((sample["name"], labels, twice))
            if column is None:
                column = series[source][(sample["name"], labels, twice)] = {
                    "name": sample["name"],
                    "labels": dict(labels),
                    "values": [None] * index,
                }
            column["values"].append(_finite(sample["value"]))
        for column in series[source].values():
            if len(column["values"]) < index + 1:
                column["values"].append(None)
    return [{**block, "series": list(series[source].values())} for source, block in blocks.items()]


def _finite(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def is_columns(probes: Any) -> bool:
    """Whether a journal's ``probes`` are in columns (a list of blocks with ``times``)."""
    return isinstance(probes, list) and bool(probes) and "times" in probes[0]


def from_columns(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The scrapes ``to_columns`` wrote, in time order (a source's in the order taken)."""
    probes: list[dict[str, Any]] = []
    for block in blocks:
        errors, ended = block.get("errors") or {}, block.get("ended") or {}
        columns = block.get("series") or []
        for index, at in enumerate(block["times"]):
            probes.append(
                {
                    "time": at,
                    "source": block["source"],
                    "samples": [
                        {
                            "name": c["name"],
                            "labels": c["labels"],
                            "value": float(c["values"][index]),
                        }
                        for c in columns
                        if c["values"][index] is not None
                    ],
                    "error": errors.get(str(index)),
                    "ended": ended.get(str(index)),
                }
            )
    probes.sort(key=lambda p: p["time"])
    return probes
