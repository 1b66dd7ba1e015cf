"""A drill's load: its shape (steady, steps, a spike), the open-loop arrivals, remote workers,
how agent tasks resume, ``LoadConfig`` over them, and how a fallback answer is recognised
(``FallbackRule``). Re-exported by ``drills.model.scenario``."""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from drills.common.units import Duration
from drills.model.spec import SpecModel as _Model

# -- load -----------------------------------------------------------------------------------


class SteadyShape(_Model):
    kind: Literal["steady"] = "steady"


class StepShape(_Model):
    """Start with ``start`` users and add ``step`` every ``every`` up to the load's ``users``."""

    kind: Literal["step"]
    start: int = Field(default=1, ge=1)
    step: int = Field(default=1, ge=1)
    every: Duration


class SpikeShape(_Model):
    """``base`` users, jumping to the load's ``users`` at ``at`` (from the drill's start) for
    ``for``."""

    kind: Literal["spike"]
    base: int = Field(default=1, ge=0)
    at: Duration
    for_: Duration = Field(alias="for")

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, use_attribute_docstrings=True
    )


STREAMS_PER_WORKER = 100
"""Streams one Locust process carries before a drill adds another by default: measured, one
process kept vLLM bench serve's request rate to 64 streams and fell to 0.59 of it at 256."""


class RemoteWorkers(_Model):
    """Load workers elsewhere, connecting to this run's master over Locust's own protocol."""

    workers: int = Field(ge=1, le=1000)
    """How many must connect before the load starts."""
    bind: str = Field(default="0.0.0.0:5557", pattern=r"^[^\s:]+:[0-9]{1,5}$")
    """Where the master listens (HOST:PORT), reachable from the workers."""
    wait: Duration = Field(default=120.0, gt=0)
    """How long the master waits for them; past it the run is aborted, naming how many came."""


def _field_error(field: str, message: str, value: Any) -> ValidationError:
    """A validation error at ``field`` of the model being validated (pydantic puts the model's
    own place in front), so that a YAML error names that field's line rather than the model's:
    for cross-field rules, which pydantic would otherwise place at the model."""
    return ValidationError.from_exception_data(
        "field",
        [
            InitErrorDetails(
                type=PydanticCustomError("value_error", "{message}", {"message": message}),
                loc=(field,),
                input=value,
            )
        ],
    )


class ResumePolicy(_Model):
    """How the load resumes an agent task that did not finish: sent again with its
    ``task_id``, as a client (or a job runner) of an agent with checkpoints does."""

    attempts: int = Field(default=10, ge=1, le=100)
    """Sends after the first, at most, before the task is given up (unfinished)."""
    after: Duration = Field(default=1.0, ge=0)
    """The pause before each resend."""


class LoadConfig(_Model):
    """The load: closed loop (``users``, each sending its next request once its last answer
    came) or open loop (``rate``, requests sent on a schedule whether earlier answers came or
    not, as production traffic is). Exactly one of the two."""

    users: int | None = Field(default=None, ge=1, le=1000)
    """Closed loop: this many users, each waiting for its answer (and ``wait``) before sending
    again. A slow stack slows such a load down, which hides queueing."""
    rate: float | None = Field(default=None, gt=0, le=10000)
    """Open loop: requests per second, sent on schedule whatever the stack's answers do (as
    ``vllm bench serve --request-rate`` and GuideLLM do). Needs ``arrival``."""
    arrival: Literal["constant", "poisson", "gamma"] | None = None
    """Open loop: how the gaps between requests fall: ``constant`` (1/rate each), ``poisson``
    (exponential gaps) or ``gamma`` (gamma gaps of shape ``burstiness``)."""
    burstiness: float | None = Field(default=None, gt=0, le=100)
    """``gamma`` arrivals: the gaps' shape, as ``vllm bench serve --burstiness``: 1 is poisson,
    below 1 burstier (clumps and lulls), above 1 more even. The mean rate stays ``rate``."""
    max_in_flight: int = Field(default=32, ge=1, le=100000)
    """Open loop: at most this many requests in flight at once (the safety policy's
    ``max_users`` bounds it). An arrival that finds them all busy is not sent; it is counted,
    and the run says its load fell short. Size it to the rate times the slowest answer you
    expect."""
    workers: int | None = Field(default=None, ge=1, le=64)
    """Locust worker processes on this machine, under a master that merges their records onto
    its clock. Default: from the cores and the load's concurrency (one process up to
    ``STREAMS_PER_WORKER`` streams, then one more per as many, at most one per core); 1 is a
    single process, no master."""
    remote: RemoteWorkers | None = None
    """Locust workers on other hosts (``stack/deploy/load-workers.yaml`` runs
    them as a Job, each ``drills load-worker --master HOST:PORT``): the master listens at
    ``bind`` and waits ``wait`` for ``workers`` of them before the warm-up begins."""
    spawn_rate: float = Field(default=10.0, gt=0)
    shape: Annotated[SteadyShape | StepShape | SpikeShape, Field(discriminator="kind")] = Field(
        default_factory=SteadyShape
    )
    prompts: str | list[str] = Field(default_factory=lambda: ["Say hello in one short sentence."])
    """A JSONL file (one ``{"prompt": ...}`` or ``{"messages": [...]}`` per line), relative to
    the scenario file, or a list of prompts."""
    max_tokens: int = Field(default=8, ge=1, le=4096)
    pin_length: bool = False
    """Ask the engine for exactly ``max_tokens`` (vLLM's ``min_tokens``): a shorter answer is
    then a cut one (``truncated``), whatever clean end a gateway dressed it in. Chat only; the
    upstream must be vLLM (or honour ``min_tokens``)."""
    stream: bool = True
    wait: Duration = 1.0
    """Think time between one user's requests. Without it a user fires its next request the
    moment a fast fallback arrives, and the drill measures a flood instead of users."""
    wait_jitter: Duration = Field(default=0.0, ge=0)
    """A random extra think time, 0 to this, drawn for each wait: users started together
    otherwise run in step, and a fault at one instant meets all of them at the same point of
    their requests."""
    warmup: Duration = 10.0
    """Load runs this long before the first phase starts (from its processes' start, and at
    least until it has sent its first request); its requests count in no window."""
    timeout: Duration = 60.0
    """The client's own timeout for one request."""
    model: str | None = None
    endpoint: Literal["chat", "rag", "agent", "workflow"] = "chat"
    """``chat``: ``/v1/chat/completions``; ``rag``: ``/v1/rag/answer`` (the prompts are the
    questions); ``agent``: ``/v1/agent/run`` (the prompts are the tasks); ``workflow``:
    ``/v1/workflow/run`` (the prompts are the questions; the kinds interleaved by their
    ``workflows`` weights, the same every run)."""
    workflows: dict[Literal["brief", "lookup"], Annotated[float, Field(gt=0)]] | None = None
    """``endpoint: workflow``: the kinds of workflow sent, by weight (default: as many
    ``brief`` as ``lookup``)."""
    resume: ResumePolicy | None = None
    """Agent tasks: send a task that did not finish (an error, no answer, a status other than
    ``done``) again with its ``task_id`` until it does (``tasks_*`` checks); ``None``: each
    task is sent once."""
    client: Literal["requests", "geventhttpclient"] = "geventhttpclient"
    """The HTTP client each load process sends with: ``requests`` (urllib3), or
    ``geventhttpclient`` (its C parser; fewer CPU cycles per request, for more streams per
    process). Both time each token as its chunk arrives (``bench/load_capacity.py --client``
    measures them against vLLM's own bench client)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Sent with every request (an API key for a staging gateway, say). ``${NAME}`` is read
    from the environment, so secrets stay out of the file; journals and reports mask them."""

    @model_validator(mode="after")
    def _one_loop(self) -> LoadConfig:
        if self.resume is not None and self.endpoint != "agent":
            raise _field_error(
                "resume",
                "resuming is for agent tasks (a task_id to send again): set endpoint: agent, "
                "or leave 'resume' out",
                self.resume.model_dump(mode="json"),
            )
        if self.workflows is not None and self.endpoint != "workflow":
            raise _field_error(
                "workflows",
                "workflow kinds are for the workflow endpoint: set endpoint: workflow, or leave "
                "'workflows' out",
                dict(self.workflows),
            )
        if (self.users is None) == (self.rate is None):
            raise ValueError(
                "the load is closed loop ('users': N users waiting for their answers) or open "
                "loop ('rate': requests per second with an 'arrival' model): exactly one of "
                f"them (got {'both' if self.users is not None else 'neither'})"
            )
        if self.rate is None:
            for stray in ("arrival", "burstiness"):
                if getattr(self, stray) is not None:
                    raise _field_error(
                        stray,
                        f"{stray!r} shapes an open-loop load; give 'rate' (requests per second) "
                        "with it, or leave it out",
                        getattr(self, stray),
                    )
            return self
        if self.arrival is None:
            raise _field_error(
                "rate",
                "a rate needs an arrival model: 'arrival' is one of constant, poisson, gamma",
                self.rate,
            )
        if self.arrival == "gamma" and self.burstiness is None:
            raise _field_error(
                "arrival",
                "gamma arrivals need 'burstiness' (the gaps' shape: 1 is poisson, below 1 "
                "burstier, above 1 more even)",
                self.arrival,
            )
        if self.arrival != "gamma" and self.burstiness is not None:
            raise _field_error(
                "burstiness",
                f"burstiness shapes gamma arrivals, and arrival is {self.arrival!r}: use "
                "arrival: gamma, or leave burstiness out",
                self.burstiness,
            )
        if self.shape.kind != "steady":
            raise _field_error(
                "shape",
                f"a {self.shape.kind} shape varies the number of users; an open-loop load "
                "(rate) is steady: leave shape out, or use users",
                self.shape.kind,
            )
        return self

    @property
    def concurrency(self) -> int:
        """The most requests this load can have in flight at once."""
        return self.users if self.users is not None else self.max_in_flight

    def local_workers(self, cores: int | None = None) -> int:
        """Load processes on this machine: ``workers``, else 0 beside remote workers, else one
        per ``STREAMS_PER_WORKER`` streams, at most one per core."""
        if self.workers is not None:
            return self.workers
        if self.remote is not None:
            return 0
        cores = cores or os.cpu_count() or 1
        return max(1, min(cores, -(-self.concurrency // STREAMS_PER_WORKER)))

    def expected_workers(self) -> int:
        """Workers under a master (0: a single process, no master)."""
        local = self.local_workers()
        total = local + (self.remote.workers if self.remote else 0)
        return 0 if total == 1 and self.remote is None else total


class FallbackRule(_Model):
    """How a fallback answer is recognised: its text, or a response header's value. Without
    ``header``, the gateway adapter's fallback header (if it has one) is used."""

    contains: str | None = None
    header: str | None = None
    header_values: list[str] = Field(default_factory=lambda: ["fallback"])
