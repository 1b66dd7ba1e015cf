"""One stack start-up for drills whose profiles differ only in their gateway.

Bringing a profile up starts every engine (about a minute each on a CPU). When a drill's
profile differs from the stack already running only in its gateway and in which of the stack's
upstreams it routes to (``stack.beside.refusal``: a canary route, another retry policy, one
replica instead of two), its gateway runs beside the running stack instead, as its own process
in front of the same hops: what the client sees is what that profile's stack would show it.
Twins use it (``drills.engine.twins``), and so does a drill run while the user's own stack is up
(``drills stack up``), which would otherwise be refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from drills.engine.options import RunOptions, attach_of, base_profile, resolve_stack
from drills.engine.parts import needed_parts
from drills.model.scenario import Attach, Scenario
from stack import control
from stack.beside import gateway_beside, refusal
from stack.config import load_stack_config, parts_of, profile_path
from stack.state import default_state_dir, read_state

__all__ = ["base_profile", "beside", "cannot_share", "running_host"]


def cannot_share(scenario: Scenario, options: RunOptions, base: str, profile: str) -> str | None:
    """Why ``profile`` needs a stack of its own (``None``: its gateway can run beside
    ``base``'s stack)."""

    if options.keep_stack:
        return "--keep-stack: the stack is started whole, as the profile says"
    return refusal(load_stack_config(base), load_stack_config(profile))


def running_host(scenario: Scenario, options: RunOptions) -> Path | None:
    """The profile file of the user's running stack (``drills stack up``) when the drill's own
    profile is another one whose gateway can run beside it, with every part the drill needs;
    ``None`` otherwise (the stack is brought up, or found up, as the profile says)."""

    if attach_of(scenario, options) is not None or options.keep_stack:
        return None
    state_dir = options.state_dir or default_state_dir()
    running = state_dir / control.PROFILE_COPY
    if not running.exists() or control.owner(state_dir) != "user":
        return None
    if not control.supervisor_alive(read_state(state_dir)):
        return None
    wanted = base_profile(scenario, options)
    if profile_path(wanted).read_text() == running.read_text():
        return None
    if cannot_share(scenario, options, str(running), wanted) is not None:
        return None
    have = parts_of(load_stack_config(running)) - control.left_out(state_dir)
    needs = set(needed_parts([scenario], load_stack_config(wanted)))
    return running if needs <= have else None


@contextlib.contextmanager
def beside(
    scenario: Scenario, options: RunOptions, base: str, profile: str, workdir: Path
) -> Iterator[RunOptions]:
    """``base``'s stack brought up (or found up), ``profile``'s gateway beside it in
    ``workdir``: the options that run the drill through that gateway."""

    state_dir = options.state_dir or default_state_dir()
    up = dataclasses.replace(options, profile=base, attach=None, state_dir=state_dir)
    endpoints = resolve_stack(scenario, up)
    with gateway_beside(state_dir / "stack.yaml", profile, workdir) as url:
        metrics = {k: v for k, v in endpoints.metrics.items() if k not in ("gateway", "toxiproxy")}
        attach = Attach(
            gateway=url, toxiproxy=endpoints.toxiproxy, hop=endpoints.hop, metrics=metrics
        )
        yield dataclasses.replace(
            options,
            profile=None,
            attach=attach,
            state_dir=state_dir,
            stack_config=profile,
            # Its own supervisor runs it (and restarts it when a drill kills it).
            component_states={**options.component_states, "gateway": workdir},
        )
