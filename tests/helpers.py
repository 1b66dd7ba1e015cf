"""Helpers shared by the tests of YAML loading."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drills.common.errors import ConfigError


def problems(load: Callable[[Path], Any], path: Path) -> list[str]:
    """The problems ``load`` reports for ``path``; it must refuse the file."""
    with pytest.raises(ConfigError) as info:
        load(path)
    return info.value.problems
