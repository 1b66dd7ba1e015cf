"""What the drill's chain looked like before the drill, and whether it looks the same after.

Every fault reverts itself, and the ledger keeps what a revert could not undo. That still
trusts each injector to restore what it found. So the runner also reads the chain itself before
the first fault and after the last revert, and compares the two:

- each Toxiproxy proxy: enabled or not, its listen and upstream addresses, its toxics;
- each hop of the L7 hop: its faults;
- each process of the embedded stack: stopped (SIGSTOP) or not.

A proxy left disabled, a toxic or a hop fault left behind, a process left frozen: the run says
what differs and exits 3, as it does for a failed revert. The comparison is of state, not of
identity: a replaced engine has a new pid, which is what a replacement is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drills.common.hop import HopClient
from drills.common.toxiproxy import ToxiproxyClient

__all__ = ["ChainState", "differences", "read_chain"]


@dataclass(frozen=True)
class ChainState:
    """The parts of the chain a fault can change, as read at one moment; ``None`` for a part
    that could not be read (then it is not compared)."""

    proxies: dict[str, dict[str, Any]] | None = None
    hop_faults: dict[str, list[str]] | None = None
    stopped: dict[str, bool] | None = None
    unread: list[str] = field(default_factory=list)
    """Why a part could not be read."""


def _proxies(url: str) -> dict[str, dict[str, Any]]:
    with ToxiproxyClient(url) as client:
        return {
            name: {
                "enabled": proxy.enabled,
                "listen": proxy.listen,
                "upstream": proxy.upstream,
                "toxics": sorted(
                    f"{t.name} ({t.type}, {t.stream}, toxicity {t.toxicity:g}, "
                    f"{dict(sorted(t.attributes.items()))})"
                    for t in proxy.toxics
                ),
            }
            for name, proxy in client.proxies().items()
        }


def _hop_faults(url: str) -> dict[str, list[str]]:
    with HopClient(url) as hop:
        names = sorted(hop.hops())
        return {name: sorted(str(f.get("name")) for f in hop.faults(name)) for name in names}


def _stopped(components: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """Each component with a live pid: whether the kernel has it stopped (state ``T``)."""
    stopped: dict[str, bool] = {}
    for name, info in components.items():
        pid = info.get("pid")
        if not isinstance(pid, int):
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # gone: a kill drill's target, replaced by now or not (the checks judge)
        # The state follows the command name, which is in parentheses and may hold spaces.
        stopped[name] = stat[stat.rindex(")") + 2] in "Tt"
    return stopped


def read_chain(
    toxiproxy: str | None, hop: str | None, components: dict[str, dict[str, Any]] | None
) -> ChainState:
    """Read what can be read now: Toxiproxy at ``toxiproxy``, the L7 hop at ``hop``, and the
    embedded stack's ``components`` (its state's pids)."""
    unread: list[str] = []
    proxies = hop_faults = None
    if toxiproxy:
        try:
            proxies = _proxies(toxiproxy)
        except Exception as exc:  # a chain that cannot be read is said, not fatal
            unread.append(f"Toxiproxy at {toxiproxy}: {type(exc).__name__}: {exc}")
    if hop:
        try:
            hop_faults = _hop_faults(hop)
        except Exception as exc:
            unread.append(f"the L7 hop at {hop}: {type(exc).__name__}: {exc}")
    stopped = _stopped(components) if components is not None else None
    return ChainState(proxies, hop_faults, stopped, unread)


def _proxy_differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    lines = []
    for name in sorted(before.keys() - after.keys()):
        lines.append(f"proxy {name}: there before the drill, gone after it")
    for name in sorted(after.keys() - before.keys()):
        lines.append(f"proxy {name}: not there before the drill, there after it")
    for name in sorted(before.keys() & after.keys()):
        was, now = before[name], after[name]
        for key in ("enabled", "listen", "upstream"):
            if was[key] != now[key]:
                lines.append(f"proxy {name}: {key} was {was[key]}, is {now[key]}")
        for toxic in sorted(set(now["toxics"]) - set(was["toxics"])):
            lines.append(f"proxy {name}: toxic left behind: {toxic}")
        for toxic in sorted(set(was["toxics"]) - set(now["toxics"])):
            lines.append(f"proxy {name}: toxic there before the drill is gone: {toxic}")
    return lines


def differences(before: ChainState, after: ChainState) -> list[str]:
    """One line per way the chain after the drill differs from the chain before it."""
    lines: list[str] = []
    if before.proxies is not None and after.proxies is not None:
        lines += _proxy_differences(before.proxies, after.proxies)
    if before.hop_faults is not None and after.hop_faults is not None:
        for name, faults in sorted(after.hop_faults.items()):
            left = sorted(set(faults) - set(before.hop_faults.get(name, [])))
            if left:
                lines.append(f"L7 hop {name}: fault(s) left behind: {', '.join(left)}")
    if before.stopped is not None and after.stopped is not None:
        for name, stopped in sorted(after.stopped.items()):
            if stopped and not before.stopped.get(name, False):
                lines.append(f"process {name}: stopped (SIGSTOP) after the drill, running before")
    return lines
