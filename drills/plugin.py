"""The public API for plugin authors: everything a package that adds a fault kind, a check
family or a gateway adapter to drills needs, in one module. A plugin imports only this module;
every other module of drills may change between releases.

A plugin is found through entry points, one group per kind of extension. The entry point's
name is the name it adds::

    [project.entry-points."drills.injectors"]
    "myteam.cpu_hog" = "myteam_drills:CpuHog"         # a factory with .spec and .revert_entry

    [project.entry-points."drills.checks"]
    slowdown = "myteam_drills:SLOWDOWN"                # a CheckFamily called "slowdown"

    [project.entry-points."drills.gateways"]
    myteam-gw = "myteam_drills:GATEWAY"                # a GatewayAdapter called "myteam-gw"

**A fault kind** is a factory (usually a class) called as ``factory(fault, context, index)``
for each fault of a drill, with:

- ``spec``: the fault's model, a ``FaultSpec`` subclass with ``kind: Literal["myteam.cpu_hog"]``
  (the entry point's name) and the fault's own fields, validated with file:line errors before
  the drill runs;
- ``revert_entry(entry) -> RevertOutcome`` (on the factory or in its module): reverts the fault
  from its ledger entry in another process, after the run that applied it was killed.

What it builds satisfies ``Injector``: ``apply() -> Evidence`` (the fault read back in place,
or ``InjectionFailed``), ``revert() -> RevertOutcome`` (idempotent; ``RevertError`` if the fault
could not be removed), ``ledger_entry() -> dict`` (at least ``kind`` and ``target``). Optional:
``preflight()`` (``Preflight``: what it would hit, changing nothing), ``prepare()``/``release()``
(``Prepares``), ``observe()`` (``Observer``: the target's recovery after the run). ``context``
(``InjectionContext``) has the run id, the Toxiproxy and L7 hop addresses and the safety limits.

**A check family** is a ``CheckFamily``: its check names (or a pattern), what its bound means
(``duration``, ``share``, ``count``, ``number``), and ``evaluate(check, ev) -> CheckResult``,
usually ending with ``result(check, family, observed, samples, reason)``. Fields of its own
(a threshold, a mode) are a pydantic model given as ``params=``: a check writes them under
``params:``, they are validated with the scenario (file, line, field, what is allowed) and
published in the schema, and the evaluator reads them with ``check.params_as(Model)``. ``ev`` is an
``Evaluation``: the client's records (``ev.records``; those of a check's window are
``ev.requests_in(*ev.window(check.during))``), the phases by name (``ev.phases``), the faults as
applied and reverted (``ev.faults``), and what the L7 hop saw (``ev.hop_records``).

**A gateway adapter** is a ``GatewayAdapter``: its liveness probe (``Health``), how it names the
upstream that served a request (``UpstreamHeader``) and where its breaker state shows in its
metrics (``BreakerSignal``).

The rules every group follows (``drills.common.plugins``): a plugin cannot take a built-in's name
or another plugin's; a broken entry point is one line naming the group, the entry point, its
target, the exception and the fix, and breaks only the drills that use its name; all of these
are input errors (exit code 2), raised before anything is applied.
"""

from __future__ import annotations

from drills.checks.base import CheckResult, Evaluation, is_error, percentile, result
from drills.common.errors import InjectionFailed, InputError, RevertError
from drills.common.plugins import PluginError
from drills.common.units import Duration, Size, parse_duration
from drills.model.check_families import CheckFamily
from drills.model.expect import Check
from drills.model.gateways import BreakerSignal, GatewayAdapter, Health, UpstreamHeader
from drills.model.scenario import FaultSpec
from injectors.base import (
    Evidence,
    InjectionContext,
    Injector,
    Observer,
    Preflight,
    Prepares,
    RevertOutcome,
)

__all__ = [
    "BreakerSignal",
    "Check",
    "CheckFamily",
    "CheckResult",
    "Duration",
    "Evaluation",
    "Evidence",
    "FaultSpec",
    "GatewayAdapter",
    "Health",
    "InjectionContext",
    "InjectionFailed",
    "Injector",
    "InputError",
    "Observer",
    "PluginError",
    "Preflight",
    "Prepares",
    "RevertError",
    "RevertOutcome",
    "Size",
    "UpstreamHeader",
    "is_error",
    "parse_duration",
    "percentile",
    "result",
]
