"""The gateway's own cost per request, measured against a deliberately fast stub upstream.

With vLLM behind it the gateway's cost (about a millisecond) drowns in the engine's own
variation (tens of milliseconds; see bench/gateway_overhead.py for that side-by-side run). Here
the upstream answers in well under a millisecond, so the difference is the gateway: routing,
admission, breaker and budget bookkeeping, the extra HTTP hop, SSE re-framing.

Runs the stub and a gateway (the sound profile's policy, pointed straight at the stub) as
separate processes, then alternates requests: client -> stub vs client -> gateway -> stub.

    .venv/bin/python bench/gateway_overhead_stub.py --rounds 500
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from benchlib import alternate, free_port, report, stop, wait_until_up

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--stream", action="store_true", help="clients ask for a stream")
    args = parser.parse_args()
    stub_ports, gateway_port = [free_port(), free_port()], free_port()
    stub_port = stub_ports[0]
    profile = yaml.safe_load((ROOT / "stack" / "profiles" / "sound.yaml").read_text())
    # Each "replica" is a stub process; no Toxiproxy in this measurement.
    profile["replicas"] = [
        {"name": f"stub-{i}", "port": free_port(), "proxy_port": port}
        for i, port in enumerate(stub_ports)
    ]
    profile["backup"] = None
    profile.pop("hop", None)  # the gateway alone: no L7 hop in this measurement
    profile["gateway"]["port"] = gateway_port
    profile["toxiproxy"]["api_port"] = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "stub.yaml"
        config.write_text(yaml.safe_dump(profile))
        procs = [
            *(
                subprocess.Popen(
                    [sys.executable, str(ROOT / "bench" / "stub_upstream.py"), str(port)]
                )
                for port in stub_ports
            ),
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "stack.gateway",
                    "--config",
                    str(config),
                    "--log-level",
                    "warning",
                ],
                cwd=ROOT,
            ),
        ]
        try:
            for port in stub_ports:
                wait_until_up(f"http://127.0.0.1:{port}/health")
            wait_until_up(f"http://127.0.0.1:{gateway_port}/health")
            body = {
                "model": "smollm2",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "stream": args.stream,
            }
            paths = {
                "direct": f"http://127.0.0.1:{stub_port}/v1/chat/completions",
                "gateway": f"http://127.0.0.1:{gateway_port}/v1/chat/completions",
            }
            samples = alternate(paths, {**body, "stream": True}, args.rounds)
        finally:
            stop(procs)
    print(f"rounds={args.rounds} (medians, ms; stub upstream, streamed)")
    report(samples, "direct", "gateway")


if __name__ == "__main__":
    main()
