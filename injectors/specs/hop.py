"""The L7 hop's per-request faults (``hop.*``): the hop's own rules (``drills.common.hop``)
as fault specs.

The spec of the family whose injector is ``injectors.hop``: what a scenario may write
(validated by ``drills.model.faults.Fault``), what the family needs of the stack, how it
previews. It imports only the model's base and the low layer."""

from __future__ import annotations

from typing import Any, Literal

from drills.common.hop import (
    CutRule,
    FirstTokenDelayRule,
    MalformedRule,
    StallRule,
    StatusRule,
    WedgeRule,
)
from drills.model.fault_spec import FaultSpec


class _HopFault(FaultSpec):
    """A per-request fault of the harness's L7 hop (``drills.hop``); ``target`` is the hop (a
    model upstream: vllm-0, backup, ...). The rule's own fields come first in each subclass's
    bases, so that its ``kind`` is the one that counts."""

    on_hop = True
    replaced = frozenset()
    resolves = "the listener of that name on the stack's L7 hop (drills.hop), at run time"

    def rule(self) -> dict[str, Any]:
        """What the hop's control API is sent (the rule's fields, in its units)."""
        fields = set(type(self).model_fields) - set(FaultSpec.model_fields) | {"kind"}
        return self.model_dump(mode="json", include=fields)


class HopStatusFault(StatusRule, _HopFault):
    """Model calls answered with an HTTP error by the hop (429 with ``retry_after``, 500, 503)."""

    kind: Literal["hop.status"]


class HopFirstTokenDelayFault(FirstTokenDelayRule, _HopFault):
    """The first token (and the headers) of each answer held back for ``delay``."""

    kind: Literal["hop.first_token_delay"]


class HopStallFault(StallRule, _HopFault):
    """The stream stops for ``duration`` after ``after_chunks`` events (a hung decode)."""

    kind: Literal["hop.stall"]


class HopCutFault(CutRule, _HopFault):
    """The stream ends after ``after_chunks`` events, cleanly (``clean: true``) or not."""

    kind: Literal["hop.cut"]


class HopMalformedFault(MalformedRule, _HopFault):
    """One event of the stream is not JSON."""

    kind: Literal["hop.malformed"]


class HopWedgeFault(WedgeRule, _HopFault):
    """Model calls hang while ``/health`` answers 200 (the wedged engine)."""

    kind: Literal["hop.wedge"]


HOP_FAULTS: tuple[type[FaultSpec], ...] = (
    HopStatusFault,
    HopFirstTokenDelayFault,
    HopStallFault,
    HopCutFault,
    HopMalformedFault,
    HopWedgeFault,
)
