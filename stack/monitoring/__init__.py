"""The stack's monitoring: a real Prometheus that scrapes the stack and evaluates its alert
rules (``rules.yml`` beside this file), and a real Alertmanager that routes what fires to a
webhook receiver (the harness's pager, ``drills.engine.pager``).

Both are Debian's binaries, unpacked into the cache (``stack.provision``), started here as
child processes with their state in a folder of their own and stopped by their pid. This is
what a team runs beside its own stack; the tests use it as the team's monitoring in attach
mode (``--prometheus``, ``--alertmanager``, ``--pager``).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from drills.common.errors import StackError
from drills.common.ports import free_port
from stack import control
from stack.provision import ensure_alertmanager, ensure_prometheus

__all__ = [
    "RULES",
    "Monitoring",
    "alertmanager_config",
    "prometheus_config",
    "stack_targets",
    "start_monitoring",
    "wait_ready",
]

RULES = Path(__file__).with_name("rules.yml")
"""The embedded stack's alert rules (each with a ``runbook_url`` into the shipped runbooks)."""


def stack_targets(state_dir: Path) -> dict[str, list[str]]:
    """The scrape jobs of the embedded stack kept in ``state_dir``, by the names its rules use:
    ``vllm`` (each engine, directly: not through its hop, as a team scrapes its pods) and
    ``gateway``. ``StackError`` if the stack is not running."""

    jobs: dict[str, list[str]] = {"vllm": [], "gateway": []}
    for component in control.status(state_dir).components:
        job = {"engine": "vllm", "gateway": "gateway"}.get(component.kind)
        if job is not None and component.endpoint:
            jobs[job].append(component.endpoint.split("://", 1)[-1].rstrip("/"))
    return {job: hosts for job, hosts in jobs.items() if hosts}


def prometheus_config(
    targets: dict[str, list[str]],
    rules: list[Path],
    alertmanager: str | None,
    interval: str = "1s",
) -> dict[str, Any]:
    """Prometheus's configuration: one scrape job per entry of ``targets`` (``host:port``),
    scraped and evaluated every ``interval``, alerts sent to ``alertmanager`` (``host:port``)."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        # Absolute: Prometheus reads a relative path beside its own config file, and a glob
        # that matches nothing loads no rules without a word.
        "rule_files": [str(Path(r).resolve()) for r in rules],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": hosts}]}
            for job, hosts in targets.items()
        ],
    }
    if alertmanager is not None:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return config


def alertmanager_config(
    pager_url: str, group_wait: str = "1s", drop_pages: bool = False
) -> dict[str, Any]:
    """Alertmanager's configuration: every alert, each in a group of its own, sent to the
    webhook at ``pager_url`` after ``group_wait``, and again when it resolves. With
    ``drop_pages`` the route sends them to ``nowhere``, a receiver with no integration: the
    route that swallows the page, which a detection drill's twin must catch."""
    return {
        "route": {
            "receiver": "nowhere" if drop_pages else "pager",
            "group_by": ["alertname"],
            "group_wait": group_wait,
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {"name": "pager", "webhook_configs": [{"url": pager_url, "send_resolved": True}]},
            {"name": "nowhere"},
        ],
    }


@dataclass
class Monitoring:
    """A running Prometheus and Alertmanager: their URLs, processes and folder."""

    prometheus: str
    alertmanager: str
    home: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        """Stop both, by their pids (SIGTERM, then SIGKILL after 20 s)."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def wait_scraped(self, timeout: float = 30.0) -> None:
        """Wait until Prometheus has scraped every target once (``StackError`` after
        ``timeout`` seconds naming those it has not): ready is not yet scraped, and a question
        about which metrics exist asked before the first scrape finds none."""
        deadline = time.monotonic() + timeout
        while True:
            pending = []
            try:
                reply = httpx.get(f"{self.prometheus}/api/v1/targets?state=active", timeout=5)
                active = reply.json()["data"]["activeTargets"]
                pending = [t["scrapeUrl"] for t in active if t.get("health") == "unknown"]
                if active and not pending:
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise StackError(
                    f"Prometheus at {self.prometheus} had not scraped "
                    f"{', '.join(pending) or 'any target'} in {timeout:.0f}s"
                )
            time.sleep(0.3)

    def __enter__(self) -> Monitoring:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_monitoring(
    home: Path,
    targets: dict[str, list[str]],
    pager_url: str,
    rules: list[Path] | None = None,
    interval: str = "1s",
    group_wait: str = "1s",
    ready_timeout: float = 60.0,
    drop_pages: bool = False,
) -> Monitoring:
    """Start an Alertmanager that pages ``pager_url`` (``drop_pages``: its route drops the
    pages) and a Prometheus that scrapes ``targets`` (job name to ``host:port`` list),
    evaluates ``rules`` (default: the stack's) and sends to it; return once both answer
    ready. ``StackError`` (with the tail of its log) if one exits or is not ready in
    ``ready_timeout`` seconds."""
    home.mkdir(parents=True, exist_ok=True)
    am_port, prom_port = free_port(), free_port()
    (home / "alertmanager.yml").write_text(
        yaml.safe_dump(alertmanager_config(pager_url, group_wait, drop_pages))
    )
    config = prometheus_config(
        targets, rules if rules is not None else [RULES], f"127.0.0.1:{am_port}", interval
    )
    (home / "prometheus.yml").write_text(yaml.safe_dump(config))
    monitoring = Monitoring(f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}", home)
    commands = {
        "alertmanager": [
            str(ensure_alertmanager()),
            f"--config.file={home / 'alertmanager.yml'}",
            f"--storage.path={home / 'alertmanager-data'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",  # one Alertmanager: no gossip port to collide on
        ],
        "prometheus": [
            str(ensure_prometheus()),
            f"--config.file={home / 'prometheus.yml'}",
            f"--storage.tsdb.path={home / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
    }
    try:
        for name, command in commands.items():
            with (home / f"{name}.log").open("wb") as log:
                monitoring.processes.append(
                    subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
                )
        for (name, _), process, url in zip(
            commands.items(),
            monitoring.processes,
            (monitoring.alertmanager, monitoring.prometheus),
            strict=True,
        ):
            wait_ready(name, f"{url}/-/ready", process, home / f"{name}.log", ready_timeout)
    except BaseException:
        monitoring.stop()
        raise
    return monitoring


def wait_ready(
    name: str, url: str, process: subprocess.Popen[bytes], log: Path, timeout: float
) -> None:
    """Wait until ``url`` answers 200 (``StackError`` if ``process`` exits first, or after
    ``timeout`` seconds, with the end of its ``log``)."""
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise StackError(
                f"{name} exited ({process.returncode}): {log.read_text(errors='replace')[-2000:]}"
            )
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise StackError(f"{name} was not ready in {timeout:.0f}s at {url} (log: {log})")
        time.sleep(0.3)
