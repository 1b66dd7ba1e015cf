"""The embedded stack's own monitoring, for a drill that asks its monitoring something.

A drill on the embedded stack with ``promql`` or ``alert_*`` checks gets what a team would run
beside its stack: a real Prometheus that scrapes the stack (its engines, its gateway, and the
harness's exporter) and evaluates the stack's alert rules (``stack/monitoring/rules.yml``),
and a real Alertmanager that routes what fires to the harness's pager
(``stack.monitoring``). They start with the drill, only for a drill that uses them, keep their
state and logs in the run directory (``monitoring/``), and stop when it ends. A drill attached
to a team's stack asks the team's own (``stack.attach.prometheus``, ``pager``): nothing is
started for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

from drills.common.ports import free_port
from drills.engine.options import StackEndpoints, needs_monitoring
from drills.model.scenario import PrometheusEndpoint, Scenario
from stack.monitoring import stack_targets, start_monitoring

__all__ = ["embedded_monitoring", "needs_monitoring"]


@contextlib.contextmanager
def embedded_monitoring(
    scenario: Scenario,
    endpoints: StackEndpoints,
    state_dir: Path | None,
    home: Path,
    say: Callable[[str], None],
    beside: dict[str, Path] | None = None,
    feared: tuple[list[Path], bool] | None = None,
) -> Iterator[StackEndpoints]:
    """``endpoints``, with the embedded stack's Prometheus, Alertmanager, pager and exporter
    while the block runs when the drill needs them and runs on the embedded stack (its
    ``state_dir`` known, no Prometheus of the team's named); else ``endpoints`` as they are.

    ``beside``: components of the drill that another supervisor runs (a twin's gateway beside
    the stack, ``drills.engine.sharing``), by name: their state directory. Prometheus scrapes
    those, the ones the drill goes through, in place of the stack's own.

    ``feared``: a monitoring twin's rules files, in place of the stack's, and whether its
    Alertmanager drops every page (``Twin.monitoring``)."""
    if (
        not needs_monitoring(scenario)
        or state_dir is None
        or endpoints.prometheus is not None
        or endpoints.pager is not None
    ):
        yield endpoints
        return
    pager, exporter = free_port(), free_port()
    targets = stack_targets(state_dir)
    for other in (beside or {}).values():
        targets.update(stack_targets(other))
    targets["drills"] = [f"127.0.0.1:{exporter}"]
    say("starting the stack's monitoring: Prometheus with its alert rules, and Alertmanager")
    rules, dropped = feared if feared is not None else (None, False)
    with start_monitoring(
        home, targets, f"http://127.0.0.1:{pager}/", rules, drop_pages=dropped
    ) as monitoring:
        say(f"Prometheus at {monitoring.prometheus}, Alertmanager at {monitoring.alertmanager}")
        yield dataclasses.replace(
            endpoints,
            prometheus=PrometheusEndpoint(url=monitoring.prometheus),
            alertmanager=PrometheusEndpoint(url=monitoring.alertmanager),
            pager=f"127.0.0.1:{pager}",
            exporter=endpoints.exporter or f"127.0.0.1:{exporter}",
        )
