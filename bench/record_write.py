"""What writing one request record costs the load process: the typed, validated write the
locustfile does (``Record.model_validate(...).model_dump_json()``) against the plain
``json.dumps`` it replaced, side by side in one run, on a realistic streamed record.

    .venv/bin/python bench/record_write.py [--rounds 20] [--records 2000]

Prints the median microseconds per record of each and their ratio; at 1,000 requests a second
(one Locust process near its ceiling here) the difference is that many microseconds of one
core's second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from drills.model.records import Record


def sample() -> dict[str, object]:
    record = Record.begin("ab" * 16, "chat").model_dump()
    record.update(
        status=200,
        ttft=0.21,
        itl=[0.05] * 16,
        e2e=1.02,
        tokens=16,
        finish_reason="length",
        route="primary",
        upstream="vllm-0",
        text="hello " * 40,
    )
    return record


def per_record_us(write: object, record: dict[str, object], n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        write(record)  # type: ignore[operator]
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--records", type=int, default=2000)
    args = parser.parse_args()
    record = sample()

    def typed(r: dict[str, object]) -> str:
        return Record.model_validate(r).model_dump_json()

    def plain(r: dict[str, object]) -> str:
        return json.dumps(r)

    typed_us, plain_us = [], []
    for _ in range(args.rounds):  # interleaved: the machine's noise hits both alike
        typed_us.append(per_record_us(typed, record, args.records))
        plain_us.append(per_record_us(plain, record, args.records))
    t, p = statistics.median(typed_us), statistics.median(plain_us)
    print(f"records per round {args.records}, rounds {args.rounds}; microseconds per record")
    print(f"typed (validate + dump): median {t:.1f}")
    print(f"plain json.dumps:        median {p:.1f}")
    print(f"ratio {t / p:.2f}; extra {t - p:.1f} us per record")


if __name__ == "__main__":
    main()
