"""The Docker Engine API, through the official SDK (``docker``'s low-level ``APIClient``).

Which daemon, as the ``docker`` CLI picks it: the host given (a fault's ``host``), else
``$DOCKER_HOST``, else the current context (``$DOCKER_CONTEXT`` or ``currentContext`` in
``~/.docker/config.json``), else the local socket. ``unix://``, ``tcp://`` (TLS from
``$DOCKER_TLS_VERIFY`` and ``$DOCKER_CERT_PATH``, or the context's) and ``ssh://`` (through the
``ssh`` client on PATH, so keys and ``~/.ssh/config`` work as for ``docker -H ssh://...``) are
spoken; the API version is negotiated with the daemon.

What is here is what the docker injector and the stack's container runtime need: list and
inspect containers, kill / stop / start / restart / pause / unpause them, disconnect and
reconnect networks, read events, import an image and create and remove a container. Every
failure is a ``DockerError`` naming the daemon and carrying the daemon's own message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import docker
import docker.errors
from docker.context import ContextAPI
from docker.utils import kwargs_from_env

from drills.common.errors import DockerError

__all__ = ["DockerClient", "DockerError", "docker_host"]

LOCAL = "unix:///var/run/docker.sock"
T = TypeVar("T")


class _API(docker.APIClient):
    """The SDK's client, keeping the CA it was given (a context's, ``DOCKER_CERT_PATH``'s).

    requests lets ``REQUESTS_CA_BUNDLE`` (set on many machines, these included) replace a
    session's CA for each request, so a daemon with its own CA fails verification
    (docker/docker-py#2433, open since 2019)."""

    def merge_environment_settings(
        self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> Any:
        settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if verify is None and isinstance(self.verify, str):
            settings["verify"] = self.verify
        return settings


def _context() -> tuple[str, Any] | None:
    """The current Docker context's host and TLS settings (``None``: the default context)."""
    name = os.environ.get("DOCKER_CONTEXT")
    try:
        context = ContextAPI.get_context(name) if name else ContextAPI.get_current_context()
    except docker.errors.DockerException as exc:
        raise DockerError(f"Docker context {name or '(current)'}: {exc}") from None
    if context is None:
        raise DockerError(
            f"Docker context {name!r} does not exist (`docker context ls`; contexts are read "
            "beside the config.json of DOCKER_CONFIG, default ~/.docker)"
        )
    if context.Name == "default" or not context.Host:
        return None
    return context.Host, context.TLSConfig or False


def docker_host(explicit: str | None = None) -> str:
    """The daemon a client of ``explicit`` would speak to (for messages and the ledger)."""
    if explicit or os.environ.get("DOCKER_HOST"):
        return explicit or os.environ["DOCKER_HOST"]
    context = _context()
    return context[0] if context else LOCAL


class DockerClient:
    def __init__(self, host: str | None = None, timeout: float = 30.0) -> None:
        env = kwargs_from_env()
        tls: Any = env.get("tls", False)
        if host is None and "base_url" not in env:
            context = _context()
            if context is not None:
                host, tls = context
        self.host = host or env.get("base_url") or LOCAL
        try:
            self._api = _API(
                base_url=self.host,
                version="auto",  # negotiated: the daemon's own API version, capped by the SDK's
                timeout=int(timeout),
                tls=tls,
                use_ssh_client=self.host.startswith("ssh://"),
            )
        except docker.errors.DockerException as exc:
            raise DockerError(f"Docker at {self.host}: cannot connect: {_why(exc)}") from None

    def close(self) -> None:
        self._api.close()

    def __enter__(self) -> DockerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _do(self, what: str, call: Callable[[], T]) -> T:
        with self._errors(what):
            return call()

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except docker.errors.APIError as exc:
            raise DockerError(
                f"Docker at {self.host}: {what}: {_why(exc)}",
                status_code=exc.status_code,
            ) from None
        except (docker.errors.DockerException, OSError) as exc:
            raise DockerError(f"Docker at {self.host}: {what}: {_why(exc)}") from None

    @property
    def api_version(self) -> str:
        """The API version agreed with the daemon."""
        return str(self._api.api_version)

    def ping(self) -> None:
        self._do("ping", self._api.ping)

    def containers(
        self, *, name: str | None = None, labels: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Containers (running or not) whose name is exactly ``name`` / that carry ``labels``."""
        filters: dict[str, Any] = {}
        if labels:
            filters["label"] = [f"{k}={v}" for k, v in labels.items()]
        if name:
            filters["name"] = [f"^/{name}$"]
        found = self._do("list containers", lambda: self._api.containers(all=True, filters=filters))
        return sorted(found, key=lambda c: c["Names"][0] if c.get("Names") else c["Id"])

    def inspect(self, container: str) -> dict[str, Any]:
        data: dict[str, Any] = self._do(
            f"inspect {container[:12]}", lambda: self._api.inspect_container(container)
        )
        return data

    def kill(self, container: str, signal: str = "SIGKILL") -> None:
        self._do(f"kill {container[:12]}", lambda: self._api.kill(container, signal=signal))

    def stop(self, container: str, grace: float) -> None:
        self._do(f"stop {container[:12]}", lambda: self._api.stop(container, timeout=int(grace)))

    def start(self, container: str) -> None:
        self._do(f"start {container[:12]}", lambda: self._api.start(container))

    def restart(self, container: str, grace: float) -> None:
        self._do(
            f"restart {container[:12]}", lambda: self._api.restart(container, timeout=int(grace))
        )

    def pause(self, container: str) -> None:
        self._do(f"pause {container[:12]}", lambda: self._api.pause(container))

    def unpause(self, container: str) -> None:
        self._do(f"unpause {container[:12]}", lambda: self._api.unpause(container))

    def disconnect(self, network: str, container: str) -> None:
        self._do(
            f"disconnect {container[:12]} from {network}",
            lambda: self._api.disconnect_container_from_network(container, network, force=True),
        )

    def connect(self, network: str, container: str, endpoint: dict[str, Any] | None) -> None:
        """Reconnect ``container`` with the aliases, addresses and links it had."""
        endpoint = endpoint or {}
        ipam = endpoint.get("IPAMConfig") or {}
        self._do(
            f"connect {container[:12]} to {network}",
            lambda: self._api.connect_container_to_network(
                container,
                network,
                aliases=endpoint.get("Aliases") or None,
                links=endpoint.get("Links") or None,
                ipv4_address=ipam.get("IPv4Address") or None,
                ipv6_address=ipam.get("IPv6Address") or None,
            ),
        )

    def events(self, since: float, until: float, container: str) -> list[dict[str, Any]]:
        """Events of one container between two wall-clock times (``until`` in the past)."""
        filters = {"container": [container], "type": ["container"]}
        with self._errors(f"events of {container[:12]}"):
            # The daemon takes fractional seconds; the SDK's datetime path would drop them.
            stream = self._api.events(
                since=cast(Any, f"{since:.3f}"),
                until=cast(Any, f"{until:.3f}"),
                filters=filters,
                decode=True,
            )
            return list(stream)

    def watch_events(
        self,
        since: float,
        event: str,
        *,
        name: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> Any:
        """A live stream of ``event`` events from ``since`` on (decoded dicts; ``close()`` ends
        it) of the containers named ``name`` (the daemon matches a name or an id) or carrying
        ``labels``: those of a selector, so a replacement with a new id is in it too. The
        daemon keeps only its last 256 events for ``events``; a stream opened early misses
        none."""
        filters: dict[str, list[str]] = {"type": ["container"], "event": [event]}
        if name:
            filters["container"] = [name]
        if labels:
            filters["label"] = [f"{k}={v}" for k, v in labels.items()]
        with self._errors(f"events of {name or labels}"):
            return self._api.events(since=cast(Any, f"{since:.3f}"), filters=filters, decode=True)

    def has_image(self, image: str) -> bool:
        try:
            self._api.inspect_image(image)  # type: ignore[no-untyped-call]
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.DockerException as exc:
            raise DockerError(
                f"Docker at {self.host}: inspect image {image}: {_why(exc)}"
            ) from None
        return True

    def import_image(self, tar: bytes, image: str) -> None:
        """Import a root filesystem tarball as ``image`` (``repo:tag``)."""
        repo, tag = image.rsplit(":", 1)
        self._do(
            f"import {image}",
            lambda: self._api.import_image_from_data(tar, repository=repo, tag=tag),
        )

    def create(
        self,
        name: str,
        image: str,
        command: list[str] | None = None,
        *,
        env: dict[str, str],
        labels: dict[str, str],
        healthcheck: dict[str, Any],
        host_config: dict[str, Any],
    ) -> str:
        """Create a container; its id. ``host_config``: ``create_host_config``'s arguments."""

        def create() -> str:
            created = self._api.create_container(
                image,
                command=command,
                name=name,
                environment=env,
                labels=labels,
                healthcheck=healthcheck,
                host_config=self._api.create_host_config(**host_config),
            )
            return str(created["Id"])

        return self._do(f"create container {name}", create)

    def remove(self, container: str) -> None:
        """Remove a container, running or not (``not_found`` on the error if it was gone)."""
        self._do(
            f"remove {container[:12]}", lambda: self._api.remove_container(container, force=True)
        )


def _why(exc: BaseException) -> str:
    """The daemon's own message (``No such container: ...``), else the error's."""
    if isinstance(exc, docker.errors.APIError) and exc.explanation:
        return str(exc.explanation)
    return str(exc) or type(exc).__name__
