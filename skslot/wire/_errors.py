"""The errors raised on reading what another party sent: one base class.

Every decoder of skslot (summaries, head statistics, Flower messages) raises
a subclass of :class:`WireFormatError`, so a server can reject one client's
payload, whatever its kind, with a single ``except WireFormatError``.  Each is
a :class:`ValueError`, as before the base class existed.
"""

from __future__ import annotations

__all__ = [
    "ProtocolError",
    "StatisticsFormatError",
    "SummaryFormatError",
    "WireFormatError",
]


class WireFormatError(ValueError):
    """A received payload or message is malformed, inconsistent or hostile."""


class SummaryFormatError(WireFormatError):
    """A Gaussian summary, or its byte payload, is malformed or inconsistent."""


class StatisticsFormatError(WireFormatError):
    """A received head message is malformed, inconsistent or hostile."""


class ProtocolError(WireFormatError):
    """A received message does not follow the protocol (missing or malformed parts)."""
