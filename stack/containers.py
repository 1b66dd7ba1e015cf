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
    if docker.has_image(IMAGE):
        return
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("tmp", "root", "proc", "sys", "dev"):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
    docker.import_image(buffer.getvalue(), IMAGE)


def start_engine_container(
    spec: dict[str, Any], argv: list[str], env: dict[str, str], log: Path
) -> str:
    """Create and start the engine's container (replacing a stale one of the same name);
    return its id."""
    try:
        with DockerClient(spec["host"]) as docker:
            ensure_image(docker)
            for stale in docker.containers(name=spec["name"]):
                docker.remove(stale["Id"])
            cid = docker.create(
                spec["name"],
                IMAGE,
                argv,
                env={"HOME": "/tmp", **env},
                labels=spec["labels"],
                healthcheck={
                    "test": ["CMD", *spec["healthcheck"]],
                    "interval": 1_000_000_000,
                    "timeout": 3_000_000_000,
                    "start_period": 300_000_000_000,
                    "retries": 3,
                },
                host_config={
                    "network_mode": "host",
                    "restart_policy": {"Name": spec["restart"]},
                    # Read-only, but for the folders the engine writes and keeps (its vLLM
                    # cache), mounted over them: Docker mounts the deeper path last.
                    "binds": [f"{m}:{m}:ro" for m in spec["mounts"]]
                    + [f"{m}:{m}:rw" for m in spec.get("writable", [])],
                    "tmpfs": {"/tmp": "rw,exec"},
                    "shm_size": 1 << 30,
                },
            )
            docker.start(cid)
    except DockerError as exc:
        raise StackError(f"cannot start the container {spec['name']}: {exc}") from None
    log.write_text(f"runs in container {spec['name']} ({cid[:12]}): docker logs it\n")
    logger.info("started container %s (%s)", spec["name"], cid[:12])
    return cid


def remove_container(host: str | None, container: str) -> None:
    try:
        with DockerClient(host) as docker:
            docker.remove(container)
    except DockerError as exc:
        if not exc.not_found:
            logger.warning("could not remove container %s: %s", container[:12], exc)
