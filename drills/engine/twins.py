"""Runs on a drill's twins: the broken stacks a drill must fail on (``Scenario.twins``).

A drill that cannot fail proves nothing. Its twin is a stack broken on purpose (a profile
without breakers or fallback text, the user's gateway with a config that lacks them), with the
checks that must catch it. ``run_twin`` runs the drill there and says whether the twin held:
the run completed and exactly the checks it names failed. A twin on which the drill passes is
the loudest failure there is: the drill cannot tell a broken stack from a sound one.

How the twin's stack is had:

- ``attach``: the drill's own attach fields, the twin's over them;
- ``monitoring``: the drill's own stack, its monitoring started with the twin's alert rules
  (and a route that drops the page, when it says so);
- ``kubernetes``: the drill's stack (or the twin's ``attach`` fields over it), its kubernetes
  faults moved to the twin's namespace and context, where the stack is deployed broken;
- ``profile``: when the twin's profile differs from the drill's only in its gateway and in
  which upstreams it routes to, the drill's stack is brought up (or found running) and the
  twin's gateway runs beside it (``stack.beside``): drill and twin share one start-up;
- otherwise the twin's profile is brought up as a drill's own would be.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from drills.common.errors import InputError
from drills.common.yamlsrc import YamlDocument, format_path
from drills.engine.options import RunOptions, attach_of
from drills.engine.runner import Runner
from drills.engine.sharing import base_profile, beside, cannot_share, running_host
from drills.engine.twin_plan import TwinPlan, twin_outcome
from drills.model.faults import KubernetesFault
from drills.model.journal import Journal
from drills.model.scenario import Attach, Scenario
from drills.model.twins import Twin, twin_litellm, twin_profile
from stack.config import load_stack_config
from stack.litellm import running, with_model_list
from stack.state import default_state_dir

__all__ = ["TwinPlan", "in_twin_cluster", "pick_twins", "run_twin", "twin_outcome"]


def pick_twins(scenario: Scenario, doc: YamlDocument | None, name: str | None) -> list[Twin]:
    """The twin called ``name``, or every twin (``None``); ``InputError`` when there is none."""
    where = f"{doc.path}: " if doc else ""
    if not scenario.twins:
        raise InputError(
            f"{where}drill {scenario.drill!r} declares no twins (a 'twins:' list: a broken "
            "stack and the checks that must fail on it)"
        )
    if name is None:
        return list(scenario.twins)
    try:
        return [scenario.twin(name)]
    except KeyError as exc:
        raise InputError(f"{where}--twin: {exc.args[0]}") from None


def in_twin_cluster(scenario: Scenario, twin: Twin) -> Scenario:
    """The scenario with its kubernetes faults in the twin's namespace and context (a
    ``kubernetes`` twin); the scenario itself otherwise."""
    where = twin.kubernetes
    if where is None or scenario.kubernetes is None:
        return scenario
    phases = []
    for phase in scenario.phases:
        inject = [
            fault.model_copy(update={"namespace": where.namespace})
            if isinstance(fault, KubernetesFault) and where.namespace is not None
            else fault
            for fault in phase.inject
        ]
        phases.append(phase.model_copy(update={"inject": inject}))
    scope = scenario.kubernetes
    if where.context is not None:
        scope = scope.model_copy(update={"context": where.context})
    return scenario.model_copy(update={"phases": phases, "kubernetes": scope})


def without_absent(scenario: Scenario, twin: Twin) -> tuple[Scenario, tuple[str, ...]]:
    """The scenario less the faults on what the twin's stack does not have (``absent``)."""
    phases, skipped = [], []
    for i, phase in enumerate(scenario.phases):
        keep = []
        for j, fault in enumerate(phase.inject):
            if fault.target in twin.absent:
                skipped.append(
                    f"{format_path(('phases', i, 'inject', j))} {fault.kind} on {fault.target} "
                    "(the twin's stack has none)"
                )
            else:
                keep.append(fault)
        phases.append(phase.model_copy(update={"inject": keep}))
    return scenario.model_copy(update={"phases": phases}), tuple(skipped)


def run_twin(
    scenario: Scenario, doc: YamlDocument | None, twin: Twin, options: RunOptions
) -> Journal:
    """Run ``scenario`` on ``twin``; the journal's ``twin`` says whether it held."""
    on_twin, skipped = without_absent(in_twin_cluster(scenario, twin), twin)
    with twin_stack(on_twin, doc, twin, options) as (twin_options, how):
        plan = TwinPlan(twin, how, skipped)
        return Runner(on_twin, doc, dataclasses.replace(twin_options, twin=plan)).run()


@contextlib.contextmanager
def twin_stack(
    scenario: Scenario, doc: YamlDocument | None, twin: Twin, options: RunOptions
) -> Iterator[tuple[RunOptions, str]]:
    """The options that run the drill on the twin's stack, and how that stack was had."""
    if twin.litellm is not None:
        with _litellm(scenario, doc, twin, options) as (on_litellm, how):
            yield on_litellm, how
        return
    if twin.monitoring is not None:
        # The drill's own stack; the runner starts its monitoring with the twin's rules and
        # route (``drills.engine.monitoring``).
        rules = ", ".join(twin.monitoring.rules)
        dropped = "; Alertmanager drops every page" if twin.monitoring.route == "dropped" else ""
        yield options, f"the drill's stack, its monitoring with the rules {rules}{dropped}"
        return
    moved = ""
    if twin.kubernetes is not None:
        moved = "its kubernetes faults in " + ", ".join(
            f"{field} {value!r}"
            for field, value in twin.kubernetes.model_dump(exclude_none=True).items()
        )
        if twin.attach is None:
            yield options, f"the drill's stack, {moved}"
            return
    if twin.attach is not None:
        own = attach_of(scenario, options)
        assert own is not None  # validated: an attach twin belongs to an attached drill
        attach = Attach.model_validate({**own.model_dump(exclude_unset=True), **twin.attach})
        yield (
            dataclasses.replace(options, attach=attach),
            f"attached: {attach.gateway}" + (f"; {moved}" if moved else ""),
        )
        return
    profile = twin_profile(twin, doc)
    assert profile is not None
    # The drill's own stack, or the user's running stack that it would run beside.
    base = str(running_host(scenario, options) or base_profile(scenario, options))
    why = cannot_share(scenario, options, base, profile)
    if why is not None:
        yield (
            dataclasses.replace(options, profile=profile, attach=None),
            f"profile {twin.profile!r}, brought up whole ({why})",
        )
        return
    work = Path(options.out_dir) / f"twin-gateway-{Path(profile).stem}"
    with beside(scenario, options, base, profile, work) as on_twin:
        yield (
            on_twin,
            f"profile {twin.profile!r}'s gateway beside the {base!r} stack's engines, "
            "Toxiproxy and hop (one start-up for the drill and its twins)",
        )


@contextlib.contextmanager
def _litellm(
    scenario: Scenario, doc: YamlDocument | None, twin: Twin, options: RunOptions
) -> Iterator[tuple[RunOptions, str]]:
    """LiteLLM started with the twin's config in front of the drill's stack, in place of
    the drill's gateway."""

    path = twin_litellm(twin, doc)
    assert path is not None
    data = yaml.safe_load(path.read_text())
    state_dir = options.state_dir or default_state_dir()
    work = Path(options.out_dir) / f"twin-litellm-{twin.key}"
    work.mkdir(parents=True, exist_ok=True)
    if not data.get("model_list"):
        stack_file = state_dir / "stack.yaml"
        if not stack_file.exists():
            raise InputError(
                f"{path}: has no model_list, and no embedded stack runs in {state_dir} to "
                "route to: start it (`drills stack up`), pass --state-dir, or give the "
                "config its own model_list"
            )
        data = with_model_list(load_stack_config(stack_file), data)
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    own = attach_of(scenario, options)
    assert own is not None  # validated: a LiteLLM twin belongs to an attached drill
    host = httpx.URL(own.gateway).host or "127.0.0.1"
    with running(config, work, host) as url:
        # LiteLLM reports on itself as LiteLLM does: the drill's adapter when it is one for
        # LiteLLM (the drill attaches to a LiteLLM of the user's), else the built-in one.
        adapter = own.adapter if own.adapter != "drills" else "litellm"
        attach = own.model_copy(update={"gateway": url, "adapter": adapter})
        yield (
            dataclasses.replace(options, attach=attach, state_dir=state_dir),
            f"LiteLLM proxy started with {path} at {url}, in place of {own.gateway}",
        )
