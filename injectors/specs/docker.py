"""Faults on Docker containers (``docker.*``).

The spec of the family whose injector is ``injectors.docker``: what a scenario may write
(validated by ``drills.model.faults.Fault``), what the family needs of the stack, how it
previews. It imports only the model's base and the low layer."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from drills.common.units import Duration
from drills.model.fault_spec import FaultSpec


class DockerFault(FaultSpec):
    """A fault on containers. ``target`` selects them: a container name, or
    ``label:KEY=VALUE[,KEY=VALUE]``; ``mode`` says how many of those matched are hit."""

    kills = frozenset({"docker.kill", "docker.stop"})
    replaced = frozenset({"docker.kill", "docker.restart"})
    orchestrator = "Docker"
    resolves = "containers matching the selector, at run time"

    kind: Literal[
        "docker.kill", "docker.stop", "docker.restart", "docker.pause", "docker.disconnect"
    ]
    mode: Literal["one", "all"] = "one"
    signal: str = Field(default="SIGKILL", pattern=r"^SIG[A-Z0-9]+$")
    """docker.kill: the signal."""
    grace: Duration = 10.0
    """docker.stop / docker.restart: time to exit after SIGTERM."""
    network: str | None = None
    """docker.disconnect: the network to cut (default: every network of the container)."""
    host: str | None = Field(default=None, pattern=r"^(unix|tcp|ssh|http|https)://.+")
    """The Docker daemon: ``unix:///path``, ``tcp://HOST:PORT`` (TLS from ``DOCKER_TLS_VERIFY``
    and ``DOCKER_CERT_PATH``) or ``ssh://USER@HOST``; its host must be in the safety policy's
    ``allowed_hosts``. Default: ``$DOCKER_HOST``, else the current Docker context, else the
    local socket."""

    @property
    def selector(self) -> tuple[str | None, dict[str, str]]:
        """``(name, labels)`` for the Docker API."""
        if not self.target.startswith("label:"):
            return self.target, {}
        labels: dict[str, str] = {}
        for pair in self.target.removeprefix("label:").split(","):
            key, _, value = pair.partition("=")
            labels[key.strip()] = value.strip()
        return None, labels

    @model_validator(mode="after")
    def _selector_syntax(self) -> DockerFault:
        if self.target.startswith("label:"):
            pairs = self.target.removeprefix("label:").split(",")
            if not all("=" in p and p.split("=", 1)[0].strip() for p in pairs):
                raise ValueError(
                    f"target {self.target!r}: a label selector is label:KEY=VALUE[,KEY=VALUE]"
                )
        if self.network is not None and self.kind != "docker.disconnect":
            raise ValueError("'network' applies to docker.disconnect only")
        return self

    @property
    def daemon(self) -> str | None:
        return self.host
