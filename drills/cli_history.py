"""``drills history``: a drill's last runs from the run history (``drills.engine.history``),
as a table of verdicts and one line per check across the runs, or as JSON."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from drills.common.errors import EXIT_OK, InputError
from drills.engine.history import Store, open_history
from drills.model.journal import PastRun
from drills.model.score import HALF_LIFE_DAYS, faded

__all__ = ["history_command"]


def history_command(args: argparse.Namespace) -> int:
    store = open_history(args.history)
    if store is None:
        raise InputError("--history none: there is no history to read")
    known = store.drills()
    if args.drill is None:
        return _list_drills(store, known, args.json)
    drill = _drill_name(args.drill)
    runs = store.runs(drill, twin=args.twin, label=args.label, last=args.last)
    if not runs:
        what = f"{drill!r}" + (f" on its twin {args.twin!r}" if args.twin else "")
        what += f" labelled {args.label!r}" if args.label else ""
        listed = ", ".join(f"{d} ({n})" for d, n in known.items()) or "none yet"
        raise InputError(f"no run of {what} in {store.location}; drills with runs: {listed}")
    if args.json:
        print(
            json.dumps(
                {
                    "store": store.location,
                    "drill": drill,
                    "twin": args.twin or None,
                    "runs": [r.model_dump(mode="json") for r in runs],
                    "score_now": (score_now(runs) or (None,))[0],
                },
                indent=2,
            )
        )
        return EXIT_OK
    _print_runs(store, drill, args.twin, runs)
    return EXIT_OK


def score_now(runs: list[PastRun]) -> tuple[float, float] | None:
    """The last scored run's score faded by its age (``drills.model.score.faded``), and that
    age in days; ``None`` when no run was scored."""
    last = next((r for r in reversed(runs) if r.score is not None), None)
    if last is None or last.score is None:
        return None
    age = time.time() - last.started_at
    return faded(last.score, age), age / 86400


def _drill_name(given: str) -> str:
    """A drill's name as given, or the name in the scenario file it names."""
    path = Path(given)
    if path.suffix in (".yaml", ".yml") and path.exists():
        # Imported here: the scenario model only when a history command is given a file.
        from drills.model.scenario import load_scenario

        return load_scenario(path)[0].drill
    return given


def _list_drills(store: Store, known: dict[str, int], as_json: bool) -> int:
    if as_json:
        print(json.dumps({"store": store.location, "drills": known}, indent=2))
    elif not known:
        print(f"no runs in {store.location} yet")
    else:
        print(f"drills with runs in {store.location}:")
        for drill, count in known.items():
            print(f"  {drill}: {count} run(s)")
    return EXIT_OK


def _print_runs(store: Store, drill: str, twin: str, runs: list[PastRun]) -> None:
    on = f" on its twin {twin}" if twin else ""
    print(f"{drill}{on}: the last {len(runs)} run(s) in {store.location}, oldest first")
    for n, run in enumerate(runs, 1):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(run.started_at))
        print(f"  #{n:<3} {run.run_id}  {when}  {run.verdict:<11} {run.label or ''}".rstrip())
    labels: list[str] = []
    for run in runs:
        labels += [c.label for c in run.checks if c.label not in labels]
    width = max(len(label) for label in labels) if labels else 0
    print(f"checks (#1 ... #{len(runs)}; ! failed, ? inconclusive, - not run):")
    for label in labels:
        cells = []
        for run in runs:
            check = next((c for c in run.checks if c.label == label), None)
            if check is None:
                cells.append("-")
                continue
            mark = "!" if not check.passed else "?" if check.conclusive is False else ""
            cells.append(f"{check.observed_text}{mark}")
        print(f"  {label:<{width}}  " + "  ".join(cells))
    scores = [r.score for r in runs]
    if any(v is not None for v in scores):
        shown = "  ".join("-" if v is None else f"{v:g}" for v in scores)
        print(f"resilience score (#1 ... #{len(runs)}; - not scored): {shown}")
        now = score_now(runs)
        if now is not None:
            value, days = now
            print(
                f"  now {value:g}: the last scored run was {days:.0f} day(s) ago, and a score "
                f"halves every {HALF_LIFE_DAYS:g} days without a run"
            )
