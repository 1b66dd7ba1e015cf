"""Choose upstreams, retry, fail over to the backup model, and tell the caller what happened.

Order of the degraded path, as the seed's reliability chapter lays it out: the primary replicas
(skipping those whose breaker is open, retrying retryable failures on another replica within the
attempt limit and the retry budget, with jittered backoff), then the backup model, then the
preset fallback text; all of it inside the request's deadline.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from stack.config import GatewayConfig, Upstream
from stack.gateway.breaker import Breaker, BreakerState
from stack.gateway.metrics import GatewayMetrics
from stack.gateway.retry import RetryBudget, full_jitter_backoff
from stack.gateway.upstream import (
    AttemptStream,
    DeadlineReached,
    RejectedByUpstream,
    RetryableFailure,
    UpstreamClient,
)

__all__ = ["Routed", "Router"]

logger = logging.getLogger(__name__)

Route = Literal["primary", "backup", "canary", "fallback", "error", "rejected"]
Pool = Literal["canary", "primary", "backup"]


@dataclass
class Routed:
    """The outcome of routing one request.

    ``stream`` is set for ``primary``/``backup``; ``rejection`` for a non-retryable upstream
    answer (``error``); neither for ``fallback`` (all upstreams failed or the deadline ran out).
    """

    route: Route
    attempts: int
    stream: AttemptStream | None = None
    rejection: RejectedByUpstream | None = None
    last_failure: str | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def upstream(self) -> str | None:
        return self.stream.upstream.name if self.stream else None


class Router:
    def __init__(
        self, config: GatewayConfig, upstreams: list[Upstream], host: str, metrics: GatewayMetrics
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.clients = {u.name: UpstreamClient(u, host, config.timeouts) for u in upstreams}
        policy = config.breaker
        self.breakers = {
            u.name: Breaker(
                u.name,
                failure_threshold=policy.failure_threshold if policy else 1,
                reset_timeout=policy.reset_timeout if policy else 0.0,
                enabled=policy is not None,
                on_change=self._breaker_changed,
            )
            for u in upstreams
        }
        for name in self.breakers:
            metrics.breaker_state.labels(name).set(0)
        self._picks = 0
        budget = config.retries.budget
        self.budget = (
            RetryBudget(ratio=budget.ratio, min_retries=budget.min_retries, window=budget.window)
            if budget is not None
            else None
        )
        self.pools: list[tuple[Pool, list[UpstreamClient]]] = [
            ("primary", [c for c in self.clients.values() if c.upstream.role == "primary"]),
            ("backup", [c for c in self.clients.values() if c.upstream.role == "backup"]),
        ]
        canary = [c for c in self.clients.values() if c.upstream.role == "canary"]
        self.canary: tuple[Pool, list[UpstreamClient]] | None = (
            ("canary", canary) if canary and config.canary is not None else None
        )
        self._draw = random.Random()

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.clients.values()))

    async def probe_open_breakers(self, interval: float = 0.5) -> None:
        """Probe every upstream whose breaker waits for a probe, without waiting for traffic.

        Without this, an upstream that only gets traffic when others fail (the backup model)
        would keep its breaker open after the incident, and the next incident would skip it.
        The probe is the engine's ``/health`` through the same hop, bounded by the first-token
        timeout; its result closes or reopens the breaker like any call's.
        """
        while True:
            await asyncio.sleep(interval)
            for name, breaker in self.breakers.items():
                if breaker.enabled and breaker.is_probe_due() and breaker.acquire():
                    ok = await self.clients[name].healthy(self.config.timeouts.first_token)
                    self.metrics.attempts.labels(name, "probe_ok" if ok else "probe_failed").inc()
                    if ok:
                        breaker.record_success()
                    else:
                        breaker.record_failure()

    def _breaker_changed(self, name: str, old: BreakerState, new: BreakerState) -> None:
        self.metrics.breaker_changed(name, old, new)

    def breaker_header(self) -> str:
        return ", ".join(f"{name}={b.state}" for name, b in self.breakers.items())

    def _pick(self, pool: list[UpstreamClient], tried: set[str]) -> UpstreamClient | None:
        """Least-loaded available upstream, untried ones first; an upstream whose breaker waits
        for a probe goes first so that recovery is noticed as soon as it happens."""
        available = [c for c in pool if self.breakers[c.upstream.name].available()]
        if not available:
            return None
        untried = [c for c in available if c.upstream.name not in tried] or available
        probes = [c for c in untried if self.breakers[c.upstream.name].is_probe_due()]
        candidates = probes or untried
        # Least in flight; among equals the one picked longest ago (round robin when idle).
        chosen = min(candidates, key=lambda c: (c.inflight, c.last_picked))
        self._picks += 1
        chosen.last_picked = self._picks
        return chosen

    def _pools(self, canary: bool) -> list[tuple[Pool, list[UpstreamClient]]]:
        """The pools to try, in order: the canary first for its share of chat requests."""
        policy = self.config.canary
        if not canary or self.canary is None or policy is None:
            return self.pools
        return [self.canary, *self.pools] if self._draw.random() < policy.share else self.pools

    def _canary_payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The call the canary gets: its own sampling and system prompt over the client's."""
        policy = self.config.canary
        assert policy is not None
        body = dict(payload)
        if policy.min_tokens is not None:
            body["min_tokens"] = policy.min_tokens
            if isinstance(body.get("max_tokens"), int):
                body["max_tokens"] = max(body["max_tokens"], policy.min_tokens)
        if policy.system_prompt is not None:
            body["messages"] = [
                {"role": "system", "content": policy.system_prompt},
                *(m for m in body["messages"] if m.get("role") != "system"),
            ]
        return body

    async def route(
        self, payload: dict[str, Any], traceparent: str, deadline: float, canary: bool = False
    ) -> Routed:
        """Find an upstream that produces a first token before ``deadline`` (monotonic);
        ``canary``: the request may be drawn for the canary route (chat requests)."""
        # Long on purpose: The routing decision in order (budget, admission, breakers, primaries,
        # backup, fallback): the order is the policy, so it is kept in one place.
        if self.budget is not None:
            self.budget.record_request()
        retries_policy = self.config.retries
        attempts = 0
        failures: list[str] = []
        for pool_name, pool in self._pools(canary):
            body = self._canary_payload(payload) if pool_name == "canary" else payload
            tried: set[str] = set()
            pool_attempts = 0
            while time.monotonic() < deadline:
                if not any(self.breakers[c.upstream.name].available() for c in pool):
                    break
                if pool_attempts > 0:
                    if pool_name == "canary":
                        break  # one try; a failing canary falls through to the primaries
                    limit = retries_policy.max_attempts
                    if limit is not None and pool_attempts >= limit:
                        break
                    if self.budget is not None and not self.budget.try_acquire():
                        self.metrics.budget_exhausted.inc()
                        break
                    self.metrics.retries.labels(pool_name).inc()
                    delay = full_jitter_backoff(
                        pool_attempts, retries_policy.backoff_base, retries_policy.backoff_max
                    )
                    if delay > 0:
                        await asyncio.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))
                    if time.monotonic() >= deadline:
                        break
                client = self._pick(pool, tried)
                if client is None:
                    break
                name = client.upstream.name
                breaker = self.breakers[name]
                if not breaker.acquire():
                    tried.add(name)
                    continue
                pool_attempts += 1
                attempts += 1
                client.inflight += 1
                try:
                    stream = await client.start(body, traceparent, deadline)
                except RetryableFailure as exc:
                    client.inflight -= 1
                    breaker.record_failure()
                    self.metrics.attempts.labels(name, exc.reason).inc()
                    failures.append(f"{name}:{exc.reason}")
                    tried.add(name)
                    logger.info("attempt on %s failed: %s", name, exc)
                    continue
                except RejectedByUpstream as exc:
                    client.inflight -= 1
                    breaker.release()
                    self.metrics.attempts.labels(name, f"http_{exc.status}").inc()
                    return Routed("error", attempts, rejection=exc, failures=failures)
                except DeadlineReached:
                    client.inflight -= 1
                    breaker.release()
                    self.metrics.attempts.labels(name, "deadline").inc()
                    failures.append(f"{name}:deadline")
                    return Routed("fallback", attempts, last_failure="deadline", failures=failures)
                except BaseException:
                    client.inflight -= 1
                    breaker.release()
                    raise
                return Routed(pool_name, attempts, stream=stream, failures=failures)
        last = failures[-1].split(":", 1)[1] if failures else "no_upstream_available"
        if time.monotonic() >= deadline:
            last = "deadline"
        return Routed("fallback", attempts, last_failure=last, failures=failures)

    def finish(self, stream: AttemptStream, failure: str | None) -> None:
        """Account for a stream that has ended, well or not."""
        client = self.clients[stream.upstream.name]
        client.inflight -= 1
        breaker = self.breakers[stream.upstream.name]
        if failure is None:
            breaker.record_success()
            self.metrics.attempts.labels(stream.upstream.name, "ok").inc()
        elif failure == "client_gone":
            breaker.release()
            self.metrics.attempts.labels(stream.upstream.name, "client_gone").inc()
        else:
            breaker.record_failure()
            self.metrics.attempts.labels(stream.upstream.name, failure).inc()
