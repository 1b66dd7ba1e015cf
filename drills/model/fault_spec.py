"""The base of every fault model: ``FaultSpec``, the fields every fault has and the traits a
family declares. Each built-in family's model subclasses it in ``injectors/specs/``; a
plugin's does the same (``drills.plugin``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field, field_validator

from drills.common.units import Duration
from drills.model.spec import SpecModel as _Model

__all__ = ["FaultSpec"]


class FaultSpec(_Model):
    """The fields every fault has. A fault family's model subclasses it and narrows ``kind``
    to its own ``Literal``; a third-party family does the same and names the model as the
    ``spec`` attribute of its injector (``injectors.base``), so that its faults validate, with
    file:line errors, exactly like the built-in ones."""

    # What the family is, for the runner, validation, the dry run and the safety policy to ask
    # (none of them names a kind). A plugin's family declares what applies to it; the defaults
    # are what an unknown family gets.
    kills: ClassVar[frozenset[str]] = frozenset()
    """The kinds of this family that take their target away (a kill, a stop, a deleted pod):
    what ``replacement_ready_within`` and the ``killed`` rule of a check's target look for."""
    replaced: ClassVar[frozenset[str] | None] = None
    """The kinds a phase with ``until: replaced`` can wait for: their injectors say during the
    run when the target is back (``Recovers``). ``None``, a plugin's default: any of its
    kinds, its injector tells at run time whether it can."""
    on_toxiproxy: ClassVar[bool] = False
    """Acts through Toxiproxy: an attached stack must name one (``stack.attach.toxiproxy``)."""
    on_hop: ClassVar[bool] = False
    """Acts through the harness's L7 hop (``drills.hop``)."""
    on_stack_process: ClassVar[bool] = False
    """Acts on a process of the embedded stack: the stack's state must be known."""
    hardware: ClassVar[str | None] = None
    """The hardware it needs (``"GPU"``): refused before the stack starts where there is none."""
    orchestrator: ClassVar[str | None] = None
    """The orchestrator it acts through (``"Docker"``, ``"Kubernetes"``): the dry run asks it
    what the fault would hit."""
    resolves: ClassVar[str] = "at run time"
    """How its target is found, in the dry run's words."""

    @property
    def daemon(self) -> str | None:
        """The remote daemon the fault acts through (a Docker host's URL), whose host the
        safety policy's ``allowed_hosts`` must allow; ``None``: none, or a local one."""
        return None

    kind: str
    target: str = Field(min_length=1)
    at: Duration = 0.0
    """Offset from the start of the phase."""
    for_: Duration | None = Field(default=None, alias="for")
    """How long the fault lasts; by default until the phase ends."""

    @field_validator("for_")
    @classmethod
    def _window(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError(
                "a fault lasts longer than 0s (e.g. for: 10s); leave 'for' out to keep it "
                "until its phase ends"
            )
        return value

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )
