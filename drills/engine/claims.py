"""What a run claims, so that two drills never drill the same thing at once.

A claim is a line that names one thing a run drills: the stack (its Toxiproxy, its gateway, its
L7 hop, its state directory) and each fault's target, by its family, named where the fault says
it is (a Docker host, a Kubernetes context and namespace) or else on the drilled stack. Two runs
whose claims meet cannot run at once (``drills.engine.safety.register_run``). URLs are compared
by scheme, host and port, with ``localhost`` as ``127.0.0.1``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from drills.model.scenario import Attach, Scenario
from stack.config import load_stack_config
from stack.state import default_state_dir

__all__ = ["run_claims"]


def _url(url: str) -> str:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = (parts.hostname or "").lower()
    if host in ("localhost", "::1", "ip6-localhost"):
        host = "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme or 'http'}://{host}:{port}"


def run_claims(
    scenario: Scenario, attach: Attach | None, profile: str, state_dir: Path | None
) -> list[str]:
    """The claims of a run of ``scenario`` on the attached stack ``attach``, or else on the
    embedded stack of ``profile`` kept in ``state_dir``."""
    claims: set[str] = set()
    toxiproxy: str | None
    if attach is not None:
        toxiproxy = _url(attach.toxiproxy) if attach.toxiproxy else None
        claims.add(f"gateway {_url(attach.gateway)}")
        if attach.hop:
            claims.add(f"hop {_url(attach.hop)}")
    else:
        config = load_stack_config(profile)
        host = config.host
        toxiproxy = _url(f"{host}:{config.toxiproxy.api_port}")
        claims.add(f"gateway {_url(f'{host}:{config.gateway.port}')}")
        if config.hop is not None:
            claims.add(f"hop {_url(f'{host}:{config.hop.control_port}')}")
        claims.add(f"stack {(state_dir or default_state_dir()).resolve()}")
    if toxiproxy is not None:
        claims.add(f"toxiproxy {toxiproxy}")
    for phase in scenario.phases:
        for fault in phase.inject:
            where = [
                str(value)
                for name in ("host", "context", "namespace")
                if (value := getattr(fault, name, None))
            ]
            family = fault.kind.split(".", 1)[0]
            claims.add(f"{family} {fault.target} @{' '.join(where) or toxiproxy}")
    return sorted(claims)
