"""What sending a run as an OpenTelemetry trace costs at its end (``--otlp``): the export of a
synthetic one-hour drill (the journal of ``bench/journal_size.py``: 10 users, 36,000 requests)
to a real Jaeger over OTLP/HTTP, side by side with what every run already pays there, reading
its journal and rendering its three reports.

    .venv/bin/python bench/trace_export.py [--minutes 60] [--rounds 5]

Prints the median seconds of each, their ratio, the spans sent (the drill, its phases and
faults, and at most ``MAX_REQUEST_SPANS`` requests) and the spans Jaeger held afterwards.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from journal_size import synthetic, timed_render

from drills.engine.tracing import OtlpTarget, export_trace
from drills.model.journal import Journal
from stack.jaeger import running_jaeger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    journal = Journal.model_validate(synthetic(args.minutes))
    times: dict[str, list[float]] = {"render": [], "export": []}
    with tempfile.TemporaryDirectory() as tmp, running_jaeger() as jaeger:
        out = Path(tmp)
        journal.write(out / "journal.json")
        target = OtlpTarget(f"{jaeger.otlp}/v1/traces", timeout=30)
        sent = None
        for _ in range(args.rounds):  # interleaved: the machine's noise hits both alike
            times["render"].append(timed_render(out / "journal.json", out))
            started = time.perf_counter()
            sent = export_trace(journal, target).trace
            times["export"].append(time.perf_counter() - started)
            assert sent is not None and sent.exported, sent
        assert sent is not None
        held = len(jaeger.trace(sent.trace_id, sent.spans)["spans"])
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.minutes} min, {len(journal.records)} requests, {sent.spans} spans sent")
    print(f"read + render the reports: {medians['render']:6.2f} s (median of {args.rounds})")
    print(f"export the trace:          {medians['export']:6.2f} s (median of {args.rounds})")
    print(f"export/render: {medians['export'] / medians['render']:.2f}; Jaeger held {held} spans")


if __name__ == "__main__":
    main()
