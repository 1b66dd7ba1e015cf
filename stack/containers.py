"""Engine replicas as Docker containers (``runtime: docker``), without a registry.

The image is an empty root filesystem imported once (``drills/host-root:1``); the container gets
the host's system directories, the cached engine environment and the model as read-only bind
mounts, a private ``/tmp``, the host network (the engine listens on its usual port, behind its
Toxiproxy proxy) and a restart policy: when the engine dies, Docker brings it back, and the
supervisor only watches. A health check (the engine's ``/health``) tells Docker, and a drill,
when the replacement is ready.
"""

from __future__ import annotations

import io
import logging
import tarfile
from pathlib import Path
from typing import Any

from drills.common.docker import DockerClient, DockerError
from drills.common.errors import StackError

__all__ = ["IMAGE", "ensure_image", "remove_container", "start_engine_container"]

logger = logging.getLogger(__name__)

IMAGE = "drills/host-root:1"


def ensure_image(docker: DockerClient) -> None:
    """Import the empty root image once."""
    try:
        docker._call("GET", f"/images/{IMAGE}/json")
        return
    except DockerError:
        pass
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("tmp", "root", "proc", "sys", "dev"):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
    repo, tag = IMAGE.split(":")
    docker._call(
        "POST",
        "/images/create",
        params={"fromSrc": "-", "repo": repo, "tag": tag},
        content=buffer.getvalue(),
        headers={"Content-Type": "application/x-tar"},
    )


def start_engine_container(
    spec: dict[str, Any], argv: list[str], env: dict[str, str], log: Path
) -> str:
    """Create and start the engine's container (replacing a stale one of the same name);
    return its id."""
    try:
        with DockerClient(spec["host"]) as docker:
            ensure_image(docker)
            for stale in docker.containers(name=spec["name"]):
                docker._call("DELETE", f"/containers/{stale['Id']}", params={"force": "1"})
            created = docker._call(
                "POST",
                "/containers/create",
                params={"name": spec["name"]},
                json={
                    "Image": IMAGE,
                    "Cmd": argv,
                    "Env": [f"{k}={v}" for k, v in {"HOME": "/tmp", **env}.items()],
                    "Labels": spec["labels"],
                    "Healthcheck": {
                        "Test": ["CMD", *spec["healthcheck"]],
                        "Interval": 1_000_000_000,
                        "Timeout": 3_000_000_000,
                        "StartPeriod": 300_000_000_000,
                        "Retries": 3,
                    },
                    "HostConfig": {
                        "NetworkMode": "host",
                        "RestartPolicy": {"Name": spec["restart"]},
                        "Binds": [f"{m}:{m}:ro" for m in spec["mounts"]],
                        "Tmpfs": {"/tmp": "rw,exec"},
                        "ShmSize": 1 << 30,
                    },
                },
            ).json()
            docker.start(created["Id"])
    except DockerError as exc:
        raise StackError(f"cannot start the container {spec['name']}: {exc}") from None
    log.write_text(f"runs in container {spec['name']} ({created['Id'][:12]}): docker logs it\n")
    logger.info("started container %s (%s)", spec["name"], created["Id"][:12])
    return str(created["Id"])


def remove_container(host: str | None, container: str) -> None:
    try:
        with DockerClient(host) as docker:
            docker._call("DELETE", f"/containers/{container}", params={"force": "1"})
    except DockerError as exc:
        if "No such container" not in str(exc):
            logger.warning("could not remove container %s: %s", container[:12], exc)
