"""drills: provoke the failures an LLM serving stack meets in production, on purpose, and prove
that it degrades the way its owners designed it to."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
