"""Timeout-budget lint: is a stack's reliability policy consistent with itself?

The seed's first fault day found timeouts that contradicted each other (a request deadline
shorter than the first-token timeout, so a slow model was never retried elsewhere), retries with
no bound and no budget, and breakers that never reset. Those are visible in the config alone,
before any drill runs. ``lint_stack`` reads a stack config and returns one ``Finding`` per problem,
each naming the file, line, field, the values involved and the fix.

The tiers, innermost first, and what each must cover (see ``stack.config.Timeouts``)::

    connect  <  first_token  <=  model_call
    request - fallback_reserve  >=  queue + primary attempts x first_token
                                    + backoffs between them + one backup attempt
    client timeout  >=  request           (the client must outwait the gateway's fallback)

Findings are ``error`` (the policy cannot do what it claims: a drill will show it) or ``warning``
(a weakness a reviewer should see). ``drills lint`` exits 1 on any error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from drills.common.units import format_duration
from drills.common.yamlsrc import YamlDocument, format_path, load_yaml
from stack.config import StackConfig, load_stack_config, profile_path

__all__ = ["Finding", "lint_config", "lint_stack"]

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    severity: Severity
    rule: str
    field: str
    message: str
    fix: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line} " if self.file else ""
        return f"{where}{self.field}: {self.severity} [{self.rule}] {self.message}; fix: {self.fix}"

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _d(seconds: float) -> str:
    return format_duration(seconds)


def lint_config(
    config: Any, doc: YamlDocument | None = None, client_timeout: float | None = None
) -> list[Finding]:
    """Findings for a validated ``StackConfig``; ``doc`` locates them in its file, in the order
    the report lists them: the timeouts, the retries, the budget they share, breakers and the
    degraded path, capacity, the RAG and agent paths, the client in front.

    ``client_timeout``: the timeout of the clients in front of the gateway (a drill's load, an
    app), when known.
    """

    assert isinstance(config, StackConfig)
    findings: list[Finding] = []

    def add(
        severity: Severity, rule: str, loc: tuple[str | int, ...], message: str, fix: str
    ) -> None:
        # Point at the deepest node of ``loc`` that the file spells out.
        findings.append(
            Finding(
                severity,
                rule,
                format_path(loc),
                message,
                fix,
                str(doc.path) if doc else None,
                doc.line_of(loc) if doc else None,
            )
        )

    _lint_timeouts(config, add)
    _lint_retries(config, add)
    _lint_budget(config, add)
    _lint_breakers_and_fallback(config, add)
    _lint_capacity(config, add)
    if config.rag is not None:
        _lint_paths(config, add)
    if client_timeout is not None:
        _lint_client(config, client_timeout, add)
    return findings


class _Add(Protocol):
    """How a rule reports a finding (``lint_config``'s ``add``)."""

    def __call__(
        self, severity: Severity, rule: str, loc: tuple[str | int, ...], message: str, fix: str
    ) -> None: ...


TIMEOUTS = ("gateway", "timeouts")


def _lint_timeouts(config: Any, add: _Add) -> None:
    """The tiers in order: connect under first_token, first_token within model_call, the
    queue's wait a part of the request's deadline."""
    t, tmo = config.gateway.timeouts, TIMEOUTS
    if t.connect >= t.first_token:
        add(
            "error",
            "connect-within-first-token",
            (*tmo, "connect"),
            f"connect ({_d(t.connect)}) is not shorter than first_token ({_d(t.first_token)}): "
            "a dead host is reported as a slow model",
            "make connect well under first_token",
        )
    if t.first_token > t.model_call:
        add(
            "error",
            "first-token-within-model-call",
            (*tmo, "first_token"),
            f"first_token ({_d(t.first_token)}) is longer than model_call "
            f"({_d(t.model_call)}): the first-token timeout can never fire",
            "make first_token shorter than model_call",
        )
    if t.queue >= t.request:
        add(
            "error",
            "queue-within-request",
            (*tmo, "queue"),
            f"queue ({_d(t.queue)}) is not shorter than request ({_d(t.request)}): a request can "
            "wait in the queue until its deadline and never reach a model",
            "make queue a fraction of request (the sound profile uses 3s of 15s)",
        )


def _lint_retries(config: Any, add: _Add) -> None:
    """Retries bounded, budgeted and backed off."""
    retries = config.gateway.retries
    attempts = retries.max_attempts
    if attempts is None:
        add(
            "error",
            "retries-bounded",
            ("gateway", "retries", "max_attempts"),
            "retries are unbounded: under a fault every request retries until its deadline, "
            "multiplying the load on the failing upstream",
            "set max_attempts (2 is usual: the first attempt and one retry)",
        )
    if retries.budget is None:
        add(
            "error",
            "retries-budgeted",
            ("gateway", "retries", "budget"),
            "no retry budget: retries are not capped as a share of traffic, so a slow upstream "
            "turns every request into several (a retry storm)",
            "set budget: {ratio: 0.2, min_retries: 3, window: 10s}",
        )
    if (attempts is None or attempts > 1) and retries.backoff_max <= 0:
        add(
            "error",
            "retries-back-off",
            ("gateway", "retries", "backoff_max"),
            "retries have no backoff: they are sent at once, in step, onto a struggling upstream",
            "set backoff_base (e.g. 50ms) and backoff_max (e.g. 1s); jitter is applied in full",
        )


def _lint_budget(config: Any, add: _Add) -> None:
    """The request's deadline covers the tiers below it (the budget arithmetic)."""
    gw, t, tmo, retries = config.gateway, config.gateway.timeouts, TIMEOUTS, config.gateway.retries
    primaries, attempts = len(config.replicas), config.gateway.retries.max_attempts
    # What the gateway may need to spend before it falls back: admission wait, every primary
    # attempt (a slow model fails at first_token), the backoffs between them, one backup try.
    primary_tries = min(attempts, primaries) if attempts is not None else primaries
    per_pool = attempts if attempts is not None else 1
    backoffs = max(per_pool - 1, 0) * retries.backoff_max
    backup_try = t.first_token if config.backup is not None else 0.0
    needed = t.queue + primary_tries * t.first_token + backoffs + backup_try
    usable = t.request - gw.fallback_reserve
    if usable < needed:
        parts = [
            f"queue {_d(t.queue)}",
            f"{primary_tries} primary attempt(s) x first_token {_d(t.first_token)}",
        ]
        if backoffs:
            parts.append(f"backoff {_d(backoffs)}")
        if backup_try:
            parts.append(f"one backup attempt {_d(backup_try)}")
        add(
            "error",
            "request-covers-tiers",
            (*tmo, "request"),
            f"request - fallback_reserve ({_d(usable)}) does not cover the tiers below it "
            f"({' + '.join(parts)} = {_d(needed)}): the deadline ends the request before a slow "
            "model is retried elsewhere" + (" or the backup model is tried" if backup_try else ""),
            f"raise request to at least {_d(needed + gw.fallback_reserve)}, or shorten the "
            "tiers below it",
        )


def _lint_breakers_and_fallback(config: Any, add: _Add) -> None:
    """Breakers present and resetting; a degraded answer, with time kept back for it."""
    gw = config.gateway
    if gw.breaker is None:
        add(
            "error",
            "breakers-present",
            ("gateway", "breaker"),
            "no circuit breakers: a dead upstream keeps receiving every request's first attempt",
            "set breaker: {failure_threshold: 3, reset_timeout: 5s}",
        )
    elif gw.breaker.reset_timeout <= 0:
        add(
            "error",
            "breakers-reset",
            ("gateway", "breaker", "reset_timeout"),
            "the breaker never waits before probing again (reset_timeout 0): it cannot shed "
            "load from a failing upstream",
            "set reset_timeout to a few seconds (the sound profile uses 5s)",
        )

    if gw.fallback.text is None:
        add(
            "error",
            "degraded-path",
            ("gateway", "fallback", "text"),
            "no fallback text: when every model fails the client gets an error instead of the "
            "degraded answer",
            "set fallback.text to what the product shows when the assistant is unavailable",
        )
    elif gw.fallback_reserve <= 0:
        add(
            "warning",
            "fallback-reserve",
            ("gateway", "fallback_reserve"),
            "no time is kept back for the fallback text: it may be sent after the client's "
            "deadline",
            "keep 100ms or so in fallback_reserve",
        )


def _lint_capacity(config: Any, add: _Add) -> None:
    """Redundancy, and a gateway that queues what the engines cannot run."""
    gw, primaries = config.gateway, len(config.replicas)
    if primaries == 1 and config.backup is None:
        add(
            "warning",
            "redundancy",
            ("replicas",),
            "one replica and no backup model: losing its engine (a node, an OOM kill) leaves "
            "only the fallback text until a replacement has loaded the model",
            "run a second replica or a backup model on another node",
        )

    engine_slots = primaries * config.engine.max_num_seqs
    if gw.admission.max_concurrency > engine_slots:
        add(
            "warning",
            "queue-at-gateway",
            ("gateway", "admission", "max_concurrency"),
            f"max_concurrency ({gw.admission.max_concurrency}) exceeds what the engines run at "
            f"once ({primaries} replica(s) x max_num_seqs {config.engine.max_num_seqs} = "
            f"{engine_slots}): requests queue inside the engines, where the gateway cannot time "
            "them out or shed them",
            f"set max_concurrency to at most {engine_slots} and let max_queue hold the rest",
        )


def _lint_client(config: Any, client_timeout: float, add: _Add) -> None:
    """The client in front outwaits the gateway's fallback."""
    t, tmo = config.gateway.timeouts, TIMEOUTS
    if client_timeout < t.request:
        add(
            "error",
            "client-outwaits-gateway",
            (*tmo, "request"),
            f"the client's timeout ({_d(client_timeout)}) is shorter than what the gateway may "
            f"spend ({_d(t.request)}): the client gives up before the gateway's fallback arrives",
            f"raise the client timeout above {_d(t.request)} or lower request",
        )


def lint_stack(path: Path | str, client_timeout: float | None = None) -> list[Finding]:
    """Lint a stack config file (a profile name or a path); raise ``ConfigError`` if it does
    not validate at all."""

    config = load_stack_config(path)  # names the shipped profiles when ``path`` is neither
    return lint_config(config, load_yaml(profile_path(str(path))), client_timeout)


def _lint_paths(config: Any, add: _Add) -> None:
    """The RAG and agent paths: each hop call bounded, budgeted, backed off and behind a
    breaker; a degraded answer; hop timeouts that fit inside the path's request timeout."""
    gw = config.gateway
    rag, agent = gw.rag, gw.agent
    paths = (
        (
            "rag",
            rag,
            "no_context_text",
            "a retrieval failure becomes an error instead of an answer that says it has no context",
            "set no_context_text to what users read when the knowledge base is unreachable",
        ),
        (
            "agent",
            agent,
            "graceful_text",
            "a saturated tool or an open breaker becomes an error instead of the agent's "
            "graceful answer",
            "set graceful_text to what users read when a tool is overloaded",
        ),
    )
    for name, policy, text_field, text_problem, text_fix in paths:
        _lint_hop_policy(name, policy, text_field, text_problem, text_fix, add)
        _lint_hop_time(name, policy, gw, add)
    _lint_agent_resume(agent, add)
    _lint_orchestrator(gw.orchestrator, add)


def _lint_hop_policy(
    name: str, policy: Any, text_field: str, text_problem: str, text_fix: str, add: _Add
) -> None:
    """One path's hop calls bounded, budgeted, backed off and behind a breaker, and its
    degraded answer set."""
    base = ("gateway", name)
    retries = policy.retries
    attempts = retries.max_attempts
    if attempts is None:
        add(
            "error",
            "hop-retries-bounded",
            (*base, "retries", "max_attempts"),
            f"{name} hop calls retry without bound: a failing hop gets every request's "
            "calls until the deadline",
            "set max_attempts (2)",
        )
    if retries.budget is None:
        add(
            "error",
            "hop-retries-budgeted",
            (*base, "retries", "budget"),
            f"{name} hop calls have no retry budget: under a fault each request multiplies "
            "its calls on the hop (retry amplification)",
            "set budget: {ratio: 0.2, min_retries: 3, window: 10s}",
        )
    if (attempts is None or attempts > 1) and retries.backoff_max <= 0:
        add(
            "error",
            "hop-retries-back-off",
            (*base, "retries", "backoff_max"),
            f"{name} hop retries have no backoff: they land at once on a struggling hop",
            "set backoff_base (50ms) and backoff_max (500ms)",
        )
    if policy.breaker is None:
        add(
            "error",
            "hop-breakers-present",
            (*base, "breaker"),
            f"no breakers on the {name} hops: a dead or saturated hop keeps receiving "
            "every request's calls",
            "set breaker: {failure_threshold: 3, reset_timeout: 5s}",
        )
    if getattr(policy, text_field) is None:
        add("error", "hop-degraded-path", (*base, text_field), text_problem, text_fix)


def _lint_hop_time(name: str, policy: Any, gw: Any, add: _Add) -> None:
    """One path's hop calls, with their retries and backoffs, fit in its request timeout."""
    base = ("gateway", name)
    retries = policy.retries
    attempts = retries.max_attempts
    rag, agent = gw.rag, gw.agent
    tries = attempts if attempts is not None else 1
    if name == "rag":
        hop_time = tries * (rag.timeouts.embed + rag.timeouts.retrieve)
        what = f"{tries} attempt(s) x (embed {_d(rag.timeouts.embed)} + retrieve " + (
            f"{_d(rag.timeouts.retrieve)})"
        )
    else:
        hop_time = tries * agent.timeouts.tool_call
        what = f"{tries} attempt(s) x tool_call {_d(agent.timeouts.tool_call)}"
    backoffs = max(tries - 1, 0) * retries.backoff_max
    request = policy.timeouts.request
    if hop_time + backoffs >= request:
        add(
            "error",
            "hop-timeouts-within-request",
            (*base, "timeouts", "request"),
            f"{what} + backoff {_d(backoffs)} = {_d(hop_time + backoffs)} does not fit in "
            f"the {name} request timeout ({_d(request)}): one slow hop uses the whole "
            "request, and the degraded answer is never reached in time",
            "shorten the hop timeouts (near the hop's p99) or raise request",
        )


def _lint_orchestrator(orchestrator: Any, add: Any) -> None:
    """No task of the orchestrator waits or runs without end: a slot held by a wait that never
    ends is lost, and when every slot is, the orchestrator serves nothing."""
    base = ("gateway", "orchestrator")
    if orchestrator.wait_limit is None:
        add(
            "error",
            "orchestrator-wait-limit",
            (*base, "wait_limit"),
            "tasks wait for their dependencies without a limit, holding their worker slots: a "
            "stalled dependency (or two tasks waiting on each other) freezes the orchestrator",
            "set wait_limit (2s): past it the task answers its fallback and frees its slot",
        )
    if orchestrator.task_timeout is None:
        add(
            "error",
            "orchestrator-task-timeout",
            (*base, "task_timeout"),
            "tasks run without a time limit: a hung tool call holds its worker slot for good",
            "set task_timeout (5s)",
        )
    elif (orchestrator.wait_limit or 0) > orchestrator.task_timeout:
        add(
            "warning",
            "orchestrator-wait-within-task",
            (*base, "wait_limit"),
            f"wait_limit ({_d(orchestrator.wait_limit)}) is longer than task_timeout "
            f"({_d(orchestrator.task_timeout)}): a waiting task is stopped before its own "
            "fallback can answer",
            "keep wait_limit below task_timeout",
        )
    if not orchestrator.cancel_orphans:
        add(
            "warning",
            "orchestrator-orphans",
            (*base, "cancel_orphans"),
            "a task nobody waits for any more keeps its slot until it ends",
            "set cancel_orphans: true",
        )


def _lint_agent_resume(agent: Any, add: Any) -> None:
    """A crashed agent task resumes without repeating its side effects."""
    if not agent.checkpoints:
        add(
            "error",
            "agent-checkpoints",
            ("gateway", "agent", "checkpoints"),
            "agent tasks keep no checkpoints: a task resumed after a crash runs every step "
            "again, its side effects included",
            "set checkpoints: true",
        )
    if not agent.stable_keys:
        add(
            "error",
            "agent-stable-keys",
            ("gateway", "agent", "stable_keys"),
            "side-effecting tool calls get a fresh idempotency key per call: a call repeated "
            "after a crash (one that did its work before its step was saved) is delivered again",
            "set stable_keys: true (the key is the task and step)",
        )
