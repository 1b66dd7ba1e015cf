"""Prometheus metrics of the gateway, in a registry of its own (one per gateway instance)."""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["BREAKER_STATE_VALUE", "GatewayMetrics"]

logger = logging.getLogger("stack.gateway")

BREAKER_STATE_VALUE = {"closed": 0, "half-open": 1, "open": 2}
_LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)


class GatewayMetrics:
    def __init__(self) -> None:
        # Long on purpose: Declarations only: every metric the gateway exports, with its help text
        # and labels.
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "drills_gateway_requests",
            "Client requests by how they were answered (route) and HTTP status",
            ["route", "code"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "drills_gateway_request_seconds",
            "Client request duration, queueing included",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft_seconds = Histogram(
            "drills_gateway_ttft_seconds",
            "Time from request arrival to the first token sent to the client",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.attempts = Counter(
            "drills_gateway_upstream_attempts",
            "Model calls sent to an upstream, by outcome",
            ["upstream", "outcome"],
            registry=r,
        )
        self.retries = Counter(
            "drills_gateway_retries", "Retries sent after a retryable failure", ["pool"], registry=r
        )
        self.budget_exhausted = Counter(
            "drills_gateway_retry_budget_exhausted",
            "Retries refused because the retry budget was spent",
            registry=r,
        )
        self.breaker_state = Gauge(
            "drills_gateway_breaker_state",
            "Circuit breaker state per upstream: 0 closed, 1 half-open, 2 open",
            ["upstream"],
            registry=r,
        )
        self.breaker_transitions = Counter(
            "drills_gateway_breaker_transitions",
            "Circuit breaker state changes",
            ["upstream", "to"],
            registry=r,
        )
        self.breaker_opened_at = Gauge(
            "drills_gateway_breaker_opened_timestamp_seconds",
            "Wall-clock time (Unix seconds) at which each breaker last opened",
            ["upstream"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "drills_gateway_queue_depth", "Requests waiting for admission", registry=r
        )
        self.inflight = Gauge(
            "drills_gateway_inflight", "Admitted requests being served", registry=r
        )
        self.rejected = Counter(
            "drills_gateway_rejected",
            "Requests refused before reaching an upstream",
            ["reason"],
            registry=r,
        )
        self.fallbacks = Counter(
            "drills_gateway_fallbacks",
            "Requests answered by the degraded path",
            ["kind"],
            registry=r,
        )
        self.midstream_failures = Counter(
            "drills_gateway_midstream_failures",
            "Streams that broke after the first token had been sent to the client",
            ["upstream", "reason"],
            registry=r,
        )
        self.rag_answers = Counter(
            "drills_gateway_rag_answers",
            "RAG answers by outcome: context (grounded), no_context (retrieval failed, said so), "
            "error",
            ["outcome"],
            registry=r,
        )
        self.agent_tasks = Counter(
            "drills_gateway_agent_tasks",
            "Agent tasks by how they ended: done, step_limit, graceful, error",
            ["status"],
            registry=r,
        )
        self.agent_resumed = Counter(
            "drills_gateway_agent_resumed",
            "Agent tasks resumed from a checkpoint",
            registry=r,
        )
        self.tool_calls = Counter(
            "drills_gateway_tool_calls",
            "Agent tool calls by tool and outcome (after retries): ok, timeout, breaker_open, ...",
            ["tool", "outcome"],
            registry=r,
        )
        self.workflows = Counter(
            "drills_gateway_workflows",
            "Orchestrator workflows by kind and how they ended: done, fallback, error",
            ["workflow", "outcome"],
            registry=r,
        )
        self.orchestrator_slots = Gauge(
            "drills_gateway_orchestrator_slots",
            "Orchestrator worker slots by state: busy (running a task), waiting (held by a task "
            "that waits for a dependency)",
            ["state"],
            registry=r,
        )
        self.orchestrator_queued = Gauge(
            "drills_gateway_orchestrator_queued",
            "Tasks in the orchestrator's queue",
            registry=r,
        )
        self.hop_attempts = Counter(
            "drills_gateway_hop_attempts",
            "Attempts sent to a retrieval or tool hop, by outcome",
            ["hop", "outcome"],
            registry=r,
        )

    def breaker_changed(self, name: str, old: str, new: str) -> None:
        """A breaker's state change: its gauge, a transition count, and when it opened."""
        self.breaker_state.labels(name).set(BREAKER_STATE_VALUE[new])
        self.breaker_transitions.labels(name, new).inc()
        if new == "open":
            self.breaker_opened_at.labels(name).set(time.time())
        logger.warning("breaker %s: %s -> %s", name, old, new)
