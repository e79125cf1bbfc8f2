"""The errors raised on reading what another party sent: one base class.

Every decoder of skslot (summaries, head statistics, Flower messages) raises
a subclass of :class:`WireFormatError`, so a server can reject one client's
payload, whatever its kind, with a single ``except WireFormatError``.  Each is
a :class:`ValueError`; :class:`SummaryFormatError` is also an
:class:`~skslot.exceptions.InvalidSummaryError`, the error of a summary's
invalid values, whether they were received or given.
"""

from __future__ import annotations

from ..exceptions import InvalidSummaryError


class WireFormatError(ValueError):
    """A received payload or message is malformed, inconsistent or hostile."""


class SummaryFormatError(WireFormatError, InvalidSummaryError):
    """A Gaussian summary's byte payload is malformed, inconsistent or decodes to invalid values.

    Raised by :meth:`GaussianSummary.from_bytes <skslot.GaussianSummary.from_bytes>`
    and :meth:`~skslot.GaussianSummary.to_bytes`; the constructor's own checks
    raise its base :class:`~skslot.exceptions.InvalidSummaryError`.
    """


class StatisticsFormatError(WireFormatError):
    """A received head message is malformed, inconsistent or hostile."""


class MessageFormatError(WireFormatError):
    """A received message lacks a part its stage needs, or a part is malformed."""
