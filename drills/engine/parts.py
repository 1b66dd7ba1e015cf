"""Which optional parts of a stack profile a drill needs, so that only those are started.

A profile's optional part (``stack.config.OPTIONAL_PARTS``; today one, ``rag``: the Triton
embedder, the vector DB and the tool server, with their own environment of several GB) is
started for a drill that uses it:

- its load asks the gateway's RAG or agent endpoint;
- a fault targets one of the part's components (a hop, a process) or floods its tool server;
- a check reads one of them (a ``prometheus`` source, a target such as ``tools:search_kb``) or is
  one of the part's own checks (recall, missing context, tool timeouts);
- it runs the retrieval recall probe.

Everything else of the profile (Toxiproxy, the engines, the L7 hop, the gateway) always runs.
A drill that needs none of the part is answered by the same gateway on the same engines: the
part only adds the ``/v1/rag/answer`` and ``/v1/agent/run`` routes.
"""

from __future__ import annotations

from collections.abc import Iterable

from drills.model.check_families import parts_of
from drills.model.faults import ToolSaturateFault
from drills.model.scenario import Scenario
from stack.config import StackConfig

__all__ = ["needed_parts"]


def needed_parts(scenarios: Iterable[Scenario], config: StackConfig) -> dict[str, str]:
    """Each optional part of ``config`` that one of ``scenarios`` needs, with the first reason
    found (``{"rag": "drill tool-saturation: phases[1].inject[0] floods tool search_kb"}``)."""
    needed: dict[str, str] = {}
    if config.rag is None:
        return needed
    names = {config.rag.embedder.name, config.rag.vector_db.name, config.rag.tools.name}
    for scenario in scenarios:
        reason = _rag_reason(scenario, names)
        if reason is not None:
            needed.setdefault("rag", f"drill {scenario.drill}: {reason}")
    return needed


def _rag_reason(scenario: Scenario, names: set[str]) -> str | None:
    """Why ``scenario`` needs the retrieval and agent part (``None``: it does not)."""
    if scenario.load.endpoint != "chat":
        return f"load.endpoint is {scenario.load.endpoint!r}"
    if scenario.retrieval_probe:
        return "retrieval_probe is on"
    for i, phase in enumerate(scenario.phases):
        for j, fault in enumerate(phase.inject):
            where = f"phases[{i}].inject[{j}]"
            if isinstance(fault, ToolSaturateFault) and fault.url is None:
                return f"{where} floods tool {fault.target} on the stack's tool server"
            if fault.target in names:
                return f"{where} ({fault.kind}) targets {fault.target}"
    for i, check in enumerate(scenario.expect):
        # retry_amplification needs it for a retrieval or tool target only (below): at the
        # model hops it is the engines' part.
        if "rag" in parts_of(check.check):
            return f"expect[{i}] is a {check.check} check"
        for field in ("target", "source"):
            value = getattr(check, field)
            if value is not None and value.split(":", 1)[0] in names:  # tools:search_kb
                return f"expect[{i}].{field} is {value}"
    return None
