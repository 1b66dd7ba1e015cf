"""Free TCP ports for servers this process is about to start, that never collide.

The usual trick (bind port 0, read the port, close the socket) hands back a port that is free
*now*, drawn by the kernel from its ephemeral range (``net.ipv4.ip_local_port_range``). The
kernel may hand that same port out again to the next such call, or to any outgoing
connection, before the server binds it. Measured here: 9 of 300 stack profiles relocated
that way held one port twice, and the test session's stack config was refused.

``free_port`` draws instead from below the ephemeral range, where the kernel never picks a
port by itself. A port it returns:

- was not returned before by any process of this machine that is still alive: each one is
  claimed by a POSIX record lock on one byte of a shared lock file (``/tmp`` by default), held
  until the claiming process exits, when the kernel drops it;
- could be bound on ``host`` at that instant (nothing listens there, nothing lingers there).

A server that binds it later is the only race left, and it is a race with programs that choose
fixed ports outside the ephemeral range, not with the kernel.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import socket
import tempfile
import threading
from pathlib import Path

__all__ = ["free_port", "port_range"]

_LOCK_NAME = "drills-ports.lock"
_LOWEST = 10_000
_lock = threading.Lock()
_claims: int | None = None  # the lock file's descriptor, open for the life of the process
_claimed: set[int] = set()
_next: int | None = None


def port_range(spec: str | None = None) -> range:
    """The ports ``free_port`` draws from: below the kernel's ephemeral range (or above it,
    where fewer than 2,000 ports lie below), never a privileged one. ``spec`` is the content of
    ``ip_local_port_range`` (read from ``/proc`` when not given)."""
    if spec is None:
        try:
            spec = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        except OSError:  # not Linux: the IANA ephemeral range
            spec = "49152 65535"
    low, high = (int(part) for part in spec.split())
    if low - _LOWEST >= 2_000:
        return range(_LOWEST, low)
    return range(high + 1, 65_536)


def _claims_fd() -> int:
    global _claims
    if _claims is None:
        folder = Path(os.environ.get("DRILLS_PORT_LOCKS") or tempfile.gettempdir())
        path = folder / _LOCK_NAME
        # Everyone's claims go in one file; it must stay open (closing any descriptor of a file
        # drops every POSIX lock this process holds on it).
        _claims = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    return _claims


def _claim(port: int) -> bool:
    """Lock byte ``port`` of the shared file; False if another live process holds it."""
    try:
        fcntl.lockf(_claims_fd(), fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise
    return True


def _bindable(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that no server holds, that no live process was given by this
    function, and that the kernel will not give to an outgoing connection."""
    global _next
    ports = port_range()
    with _lock:
        if _next is None:  # each process starts somewhere else: fewer claims to step over
            _next = random.randrange(len(ports))
        for _ in range(len(ports)):
            port = ports[_next % len(ports)]
            _next += 1
            if port in _claimed or not _claim(port):
                continue
            _claimed.add(port)
            if _bindable(host, port):
                return port
    raise OSError(
        errno.EADDRINUSE,
        f"no free port on {host} in {ports.start}-{ports.stop - 1} "
        "(every one is taken or claimed by a live process)",
    )
