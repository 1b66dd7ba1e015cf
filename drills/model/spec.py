"""The base of every model of a drill file: unknown fields are refused, values are frozen,
and attribute docstrings become the schema's descriptions (hover text in an editor)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["SpecModel"]


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
