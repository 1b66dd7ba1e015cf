"""Gateway overhead per request: through the gateway vs straight to the same proxies, side by side.

Attaches to a running stack (``drills stack up`` first) and sends the same short prompt, alternating
between three paths so that all of them see the same machine load:

  gateway   client -> gateway -> Toxiproxy -> vLLM   (what users get)
  proxy     client -> Toxiproxy -> vLLM              (the same hops minus the gateway)
  engine    client -> vLLM                            (no hop at all)

The gateway's overhead is ``gateway - proxy`` at the median. vLLM answers deterministically here
(same seed, same prompt, same tokens), so the engine's own time cancels out.

    .venv/bin/python bench/gateway_overhead.py --rounds 60
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import httpx
from benchlib import timed

from stack.config import load_stack_config
from stack.state import default_state_dir


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", type=Path, default=default_state_dir())
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=4)
    args = parser.parse_args()
    config = load_stack_config(args.state_dir / "stack.yaml")
    host = config.host
    body = {
        "model": config.engine.served_name,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": args.max_tokens,
        "stream": True,
    }
    replicas = config.replicas
    paths = {
        "gateway": [f"http://{host}:{config.gateway.port}/v1/chat/completions"],
        "proxy": [f"http://{host}:{r.proxy_port}/v1/chat/completions" for r in replicas],
        "engine": [f"http://{host}:{r.port}/v1/chat/completions" for r in replicas],
    }
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    with httpx.Client(timeout=60) as client:
        for urls in paths.values():  # warm every connection pool and code path
            for url in urls:
                timed(client, url, body)
        for i in range(args.rounds):
            for name, urls in paths.items():
                samples[name].append(timed(client, urls[i % len(urls)], body))

    def median(name: str, index: int) -> float:
        return statistics.median(s[index] for s in samples[name])

    print(f"rounds={args.rounds} max_tokens={args.max_tokens} (medians, ms)")
    print(f"{'path':8} {'ttft':>8} {'e2e':>8}")
    for name in paths:
        print(f"{name:8} {median(name, 0):8.2f} {median(name, 1):8.2f}")
    for index, label in ((0, "ttft"), (1, "e2e")):
        pairs = [
            g[index] - p[index] for g, p in zip(samples["gateway"], samples["proxy"], strict=True)
        ]
        print(
            f"gateway overhead ({label}): median of paired differences "
            f"{statistics.median(pairs):.2f} ms; difference of medians "
            f"{median('gateway', index) - median('proxy', index):.2f} ms"
        )
    print(f"toxiproxy hop (e2e): {median('proxy', 1) - median('engine', 1):.2f} ms")


if __name__ == "__main__":
    main()
