"""Two pytest-xdist workers in two lanes (``-n 2`` in pyproject's addopts; ``-n 0`` runs the
whole suite in one process, as before).

Most of the suite's time is drills against real services (vLLM on 2 CPU cores, Locust,
Toxiproxy, LiteLLM, Docker, a Kubernetes control plane), whose bounds were measured on a quiet
machine. Two of them side by side do not keep those bounds: measured with two session stacks,
each worker drilling its own, a LiteLLM breaker was seen open after 25 s (15 s allowed) and the
tool-saturation drill's recovery SLO never held within 19 s (it does alone). So the drills stay
in one lane, one after another, on the first worker, in the order they are collected; the
second worker runs beside them only the tests that judge no time and start no engine (parsing,
validation, the reports, the lint, the dry runs): the files named in ``BESIDE``. A drill keeps
the 2 cores about 70% idle (measured: 30% busy through the latency drill), which those tests
use.

A file is in the second lane only when it is named here, so a new test file runs with the
drills until someone decides otherwise; a file named here that gains a test marked as running
against real services is refused at collection, naming the test.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

__all__ = ["BESIDE"]

# Test files that judge no time, start no engine and hold no machine-wide resource.
BESIDE = frozenset(
    f"tests/{name}.py"
    for name in (
        "test_abort",
        "test_agent_checks",
        "test_alert_runbook",
        "test_chain",
        "test_checks",
        "test_clock",
        "test_code_shape",
        "test_deploy_files",
        "test_faithful_chain",
        "test_fault_lifecycle",
        "test_fault_traits",
        "test_gateways",
        "test_gpu",
        "test_groups",
        "test_history",
        "test_intervals",
        "test_kubeconfig",
        "test_lint",
        "test_observed",
        "test_orchestrator",
        "test_parts",
        "test_policies",
        "test_ports",
        "test_rag_checks",
        "test_readme",
        "test_registry",
        "test_relative_bounds",
        "test_reports",
        "test_scenario",
        "test_score",
        "test_stack_config",
        "test_stack_sweep",
        "test_tracing",
        "test_twins",
        "test_workflow_checks",
    )
)
# Markers of tests that run against real services (pyproject's markers).
_REAL = ("stack", "docker", "kubernetes")


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = [
        item.nodeid
        for item in items
        if _file(item.nodeid) in BESIDE and any(item.get_closest_marker(m) for m in _REAL)
    ]
    if wrong:
        raise pytest.UsageError(
            "tests/scheduling.py runs these files beside the drills, but these tests run "
            f"against real services: {', '.join(wrong)}; move them, or take their file out of "
            "BESIDE"
        )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling  # Imported here: only with xdist running

    class Lanes(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's scope scheduler, a file a scope, each scope kept to its lane: the first
        worker takes the drills' files, the others the files named in ``BESIDE``."""

        def _split_scope(self, nodeid: str) -> str:
            return _file(nodeid)

        def _lane_of(self, node: Any) -> bool:
            # With one worker, that worker runs both lanes.
            return len(self.nodes) > 1 and node is not self.nodes[0]

        def _next_for(self, node: Any) -> str | None:
            beside = self._lane_of(node)
            return next((s for s in self.workqueue if (s in BESIDE) == beside), None)

        def _assign_work_unit(self, node: Any) -> None:
            scope = self._next_for(node)
            if scope is None:
                return
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some(
                [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
            )

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down:
                return
            if self._next_for(node) is None:
                node.shutdown()  # after the tests it was sent: none of its lane is left
                return
            if self._pending_of(self.assigned_work.get(node, {})) > 2:
                return
            self._assign_work_unit(node)

    return Lanes(config, log)


@pytest.fixture(autouse=True, scope="session")
def _worker_state(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The run registry and ledger of drills run in this process (``drills.engine.safety``)
    live in the session's temporary folder: one worker's ``drills abort`` or ``drills faults``
    never sees the other's runs, and nothing is left in the user's own state folder."""
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
