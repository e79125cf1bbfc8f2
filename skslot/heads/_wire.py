"""Old import path of the head messages' wire helpers (kept for its importers).

The helpers live in :mod:`skslot.wire.arrays`, the errors in
:mod:`skslot.wire`, and :class:`~skslot.heads.LinearScores` in
:mod:`skslot.heads._linear_scores`.
"""

from ..wire import StatisticsFormatError, message_bytes, read_array
from ..wire.arrays import ArrayMessage
from ._linear_scores import LinearScores

__all__ = ["ArrayMessage", "LinearScores", "StatisticsFormatError", "message_bytes", "read_array"]
