"""A real Jaeger for the trace-export tests (``stack.jaeger``): the tracing backend a team
sends OpenTelemetry traces to, started for each test module that uses it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stack.jaeger import Jaeger, running_jaeger
from stack.provision import cache_root, ensure_jaeger, jaeger_built

__all__ = ["Jaeger", "jaeger"]


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a machine that has not built Jaeger yet, build it now, before the first test, when a
    collected test needs it: a compile beside the tests distorts their timings (see
    tests/kube_env.py). CI builds it before pytest (``python -m stack.install jaeger``)."""
    wanted = any("jaeger" in getattr(item, "fixturenames", ()) for item in session.items)
    if not wanted or jaeger_built():
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            "building Jaeger before the tests (once per version; minutes; log in "
            f"{cache_root() / 'logs'})"
        )
    ensure_jaeger()


@pytest.fixture(scope="module")
def jaeger() -> Iterator[Jaeger]:
    """A Jaeger for one test module: started in about a second, and not left running beside
    the rest of the suite's timing tests."""
    with running_jaeger() as running:
        yield running
