"""What a drill reads from the stack it runs on, besides its load and its probes: where the
embedded stack keeps its state, which components it has (for process faults), the chain's
state before and after the drill, what reached the L7 hop, the config it runs with (for
``stack_lint`` and the agent's identity), the tool server's audit log (for the ``tasks_*``
checks) and the retrieval recall probe. The runner asks; nothing here applies or
reverts anything, and each answer is ``None`` where the drill does not need it or the stack
does not have it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from drills.common.errors import ConfigError, HopError
from drills.common.hop import HopClient, HopRecord
from drills.common.jsonl import read_jsonl
from drills.common.yamlsrc import YamlDocument
from drills.engine.chain import ChainState, read_chain
from drills.engine.options import RunOptions, StackEndpoints, attach_of
from drills.lint import lint_stack
from drills.model.check_families import reads
from drills.model.scenario import Scenario
from drills.probes import Prober
from drills.probes.retrieval import RecallProbe, load_queries
from stack.config import load_stack_config
from stack.state import default_state_dir, read_state

__all__ = ["StackReads"]

logger = logging.getLogger(__name__)


class StackReads:
    """The reads of one drill (``scenario``, from ``doc``, run with ``options``)."""

    def __init__(self, scenario: Scenario, doc: YamlDocument | None, options: RunOptions) -> None:
        self.scenario = scenario
        self.doc = doc
        self.options = options

    def tool_audit(self, state_dir: Path | None, since: float) -> list[dict[str, Any]] | None:
        """The embedded tool server's audit log since the run began, when the drill has a
        check that reads it (``drills.checks.agent``)."""

        wanted = any(reads(c.check, "agent_tasks") for c in self.scenario.expect)
        if state_dir is None or not wanted:
            return None
        path = state_dir / "tools" / "audit.jsonl"
        if not path.exists():
            return None
        return [e for e in read_jsonl(path) if float(e.get("time") or 0) >= since]

    def state_dir_of_run(self) -> Path | None:
        """The embedded stack's state directory, when this run knows it."""

        if self.options.state_dir is not None:
            return self.options.state_dir
        return None if attach_of(self.scenario, self.options) else default_state_dir()

    def components(self, state_dir: Path | None) -> list[str] | None:
        """The stack's components, or ``None`` when the drill has no process fault; raise
        ``ConfigError`` when it has one and no embedded stack state is known."""
        process = [
            (i, j)
            for i, p in enumerate(self.scenario.phases)
            for j, f in enumerate(p.inject)
            if f.on_stack_process
        ]
        if not process:
            return None
        state = read_state(state_dir) if state_dir else None
        if state is None:
            i, j = process[0]
            where = (
                f"{self.doc.path}:{self.doc.line_of(('phases', i, 'inject', j))} "
                if self.doc
                else ""
            )
            raise ConfigError(
                [
                    f"{where}phases[{i}].inject[{j}]: process faults need the embedded stack's "
                    f"state ({state_dir or 'none given'} has none); pass --state-dir of the "
                    "stack `drills stack up` started"
                ]
            )
        return sorted(state.components)

    def config_path(self, state_dir: Path | None, endpoints: StackEndpoints) -> str | None:
        """The config the stack runs with: the embedded stack's copy (its real ports), else
        the one given for an attached stack, else the profile."""
        if state_dir is not None and (state_dir / "stack.yaml").exists():
            return str(state_dir / "stack.yaml")
        attach = attach_of(self.scenario, self.options)
        if self.options.stack_config:
            return self.options.stack_config
        if attach is not None and attach.config:
            base = self.doc.path.parent if self.doc else Path.cwd()
            return str(base / attach.config)
        return endpoints.profile

    def agent_identity(self, state_dir: Path | None, endpoints: StackEndpoints) -> tuple[str, str]:
        """Who the gateway's agent calls tools as, and the tool server's hop name."""

        source = self.config_path(state_dir, endpoints)
        if source is not None:
            try:
                config = load_stack_config(source)
            except ConfigError:
                config = None
            if config is not None and config.rag is not None:
                return config.gateway.agent.agent_id, config.rag.tools.name
        return "gateway-agent", "tools"

    def retrieval_probe(
        self, prober: Prober, state_dir: Path | None, endpoints: StackEndpoints
    ) -> dict[str, Any] | None:
        """Add the recall probe to ``prober`` when the drill asks for it; its status."""

        scenario = self.scenario
        wanted = scenario.retrieval_probe or any(
            reads(c.check, "recall_probe") for c in scenario.expect
        )
        if not wanted:
            return None
        source = self.config_path(state_dir, endpoints)
        if source is None:
            return {"available": False, "reason": "no stack config known (pass --stack-config)"}
        base = self.doc.path.parent if self.doc else Path.cwd()
        queries = load_queries(
            base / scenario.retrieval_queries if scenario.retrieval_queries else None
        )
        try:
            probe = RecallProbe(load_stack_config(source), queries)
        except ValueError as exc:
            return {"available": False, "reason": str(exc)}
        prober.sources["retrieval"] = probe.samples
        prober.every["retrieval"] = scenario.retrieval_interval
        return {
            "available": True,
            "config": source,
            "queries": len(queries.queries),
            "k": queries.k,
        }

    def lint(self, endpoints: StackEndpoints) -> list[dict[str, Any]] | None:
        """Lint findings on the stack's config (``None`` when the stack's config is unknown)."""

        attach = attach_of(self.scenario, self.options)
        source = self.options.stack_config
        if source is None and attach is not None and attach.config:
            # A scenario's own ``stack.config`` is relative to the scenario file.
            base = self.doc.path.parent if self.doc else Path.cwd()
            source = str(base / attach.config)
        elif source is None and attach is None:
            source = endpoints.profile
        if source is None:
            return None
        try:
            return [f.as_json() for f in lint_stack(source, self.scenario.load.timeout)]
        except ConfigError as exc:
            logger.error("cannot lint the stack config %s: %s", source, exc)
            return None

    def chain(self, endpoints: StackEndpoints, state_dir: Path | None) -> ChainState:
        """The chain's state now: Toxiproxy's proxies, the L7 hop's faults and the embedded
        stack's processes (``drills.engine.chain``)."""
        state = read_state(state_dir) if state_dir is not None else None
        components = state.components if state is not None else None
        return read_chain(endpoints.toxiproxy, endpoints.hop, components)

    def hop_records(
        self, endpoints: StackEndpoints, since: int, say: Callable[[str, str], None]
    ) -> list[HopRecord] | None:
        """What reached the L7 hop since the run began (``None``: no hop, or it cannot be read:
        the checks then say that they fall back to the gateway's claim)."""
        if endpoints.hop is None:
            return None
        try:
            with HopClient(endpoints.hop) as client:
                return client.all_records(since)
        except HopError as exc:
            say(f"the L7 hop's records could not be read: {exc}", "warning")
            return None
