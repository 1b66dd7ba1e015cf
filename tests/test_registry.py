"""The injector registry: every built-in family is found whichever module was imported first,
and an unknown kind is refused by name. (A fresh interpreter: the registry is process-wide.)"""

from __future__ import annotations

import subprocess
import sys


def test_importing_one_family_first_does_not_hide_the_others() -> None:
    code = (
        "import injectors.process\n"
        "from injectors.base import REGISTRY, _registered\n"
        "_registered()\n"
        "print(' '.join(sorted({k.split('.')[0] for k in REGISTRY})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["docker", "gpu", "kubernetes", "process", "tool", "toxiproxy"]
