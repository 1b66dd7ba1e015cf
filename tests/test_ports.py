"""Ports for the tests' stacks and servers never collide: within a process, across live
processes, and with the kernel's own choices (the ephemeral range)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from drills.common.ports import free_port, port_range
from tests.conftest import relocated_profile

DRAW = (
    "import json, sys, drills.common.ports as p\n"
    "p._next = 0\n"  # every child starts at the same place: only the claims keep them apart
    "print(json.dumps([p.free_port() for _ in range(20)]), flush=True)\n"
    "sys.stdin.read()\n"
)


def _drawer(tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", DRAW],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={"DRILLS_PORT_LOCKS": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )


def _ports(proc: subprocess.Popen[str]) -> list[int]:
    assert proc.stdout is not None
    return list(json.loads(proc.stdout.readline()))


def _ports_of(profile: dict) -> list[int]:
    found: list[int] = []

    def walk(node: object, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
        elif key.endswith("port") and isinstance(node, int):
            found.append(node)

    walk(profile)
    return found


def test_relocated_profiles_never_hold_one_port_twice(tmp_path: Path) -> None:
    """The failure this replaced: bind-to-0 ports repeated within one profile in 9 of 300."""
    seen: list[int] = []
    for i in range(100):
        data = yaml.safe_load(relocated_profile("sound", tmp_path / f"{i}.yaml").read_text())
        ports = _ports_of(data)
        assert len(ports) >= 10 and len(set(ports)) == len(ports), ports
        seen += ports
    assert len(set(seen)) == len(seen)  # nor across profiles of one process


def test_live_processes_are_never_given_the_same_port(tmp_path: Path) -> None:
    first, second = _drawer(tmp_path), _drawer(tmp_path)
    try:
        a, b = _ports(first), _ports(second)
        assert not set(a) & set(b), (a, b)
        assert len(set(a)) == len(a) == 20
    finally:
        for proc in (first, second):
            proc.communicate("")
    # The claims end with their processes: a new one gets the first ports back.
    third = _drawer(tmp_path)
    try:
        assert _ports(third) == sorted(a + b)[:20]
    finally:
        third.communicate("")


def test_ports_come_from_outside_the_kernels_ephemeral_range() -> None:
    assert port_range("32768\t60999\n") == range(10_000, 32_768)
    assert port_range("1024 65000") == range(65_001, 65_536)
    ephemeral = port_range()
    low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    port = free_port()
    assert port in ephemeral and not low <= port <= high
