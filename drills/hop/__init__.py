"""The harness's L7 hop (HTTP and SSE), run as ``python -m drills.hop``; see
``drills.common.hop`` for its rules, records and control API."""

from drills.hop.server import HopServer, HopSpec

__all__ = ["HopServer", "HopSpec"]
