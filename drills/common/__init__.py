"""The low layer: what both the embedded stack and the harness build on.

Errors, units, the line-aware YAML source, process helpers, redaction and the API clients
(Toxiproxy, Docker, Kubernetes). Nothing here imports anything else of ours: ``stack/`` may
import this package and nothing else of ``drills``, and the import contract
(``[tool.importlinter]`` in ``pyproject.toml``, run in CI) keeps it so.
"""

from __future__ import annotations

__all__: list[str] = []
