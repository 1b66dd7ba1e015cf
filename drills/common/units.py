"""Human units in YAML: durations (``200ms``, ``30s``, ``2m``) and sizes (``512KiB``, ``1GiB``).

A bare number is refused: ``timeout: 30`` could mean seconds or milliseconds, and a drill that
guesses wrong proves nothing.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

__all__ = ["Duration", "Size", "format_duration", "parse_duration", "parse_size"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")
_DURATION_FACTORS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)\s*$")
_SIZE_FACTORS = {
    "B": 1,
    "KB": 1000,
    "MB": 1000**2,
    "GB": 1000**3,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
}


def parse_duration(value: Any) -> float:
    """Return the duration in seconds; raise ``ValueError`` naming what is allowed."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(
            "a duration needs a unit: a number followed by ms, s, m or h (e.g. 200ms, 30s, 2m)"
        )
    match = _DURATION.match(value)
    if match is None:
        raise ValueError(
            f"invalid duration {value!r}; expected a number followed by ms, s, m or h "
            "(e.g. 200ms, 30s, 2m)"
        )
    return float(match.group(1)) * _DURATION_FACTORS[match.group(2)]


def parse_size(value: Any) -> int:
    """Return the size in bytes; raise ``ValueError`` naming what is allowed."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError("a size needs a unit: B, KB, MB, GB, KiB, MiB or GiB (e.g. 512KiB)")
    match = _SIZE.match(value)
    if match is None:
        raise ValueError(
            f"invalid size {value!r}; expected a number followed by B, KB, MB, GB, KiB, MiB "
            "or GiB (e.g. 512KiB, 1GiB)"
        )
    return int(float(match.group(1)) * _SIZE_FACTORS[match.group(2)])


def format_duration(seconds: float) -> str:
    """The shortest exact human form of a duration in seconds (``0.2`` -> ``200ms``)."""
    millis = round(seconds * 1000)
    if millis % 1000:
        return f"{millis}ms"
    whole = millis // 1000
    if whole and whole % 3600 == 0:
        return f"{whole // 3600}h"
    if whole and whole % 60 == 0:
        return f"{whole // 60}m"
    return f"{whole}s"


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h)\s*$",
            "description": "a duration with its unit: 200ms, 30s, 2m, 1h",
        }
    ),
]
"""Seconds as a float, written in YAML with a unit."""

Size = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(lambda n: f"{n}B", return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|KiB|MiB|GiB)\s*$",
            "description": "a size with its unit: 512KiB, 1GiB",
        }
    ),
]
"""Bytes as an int, written in YAML with a unit."""
