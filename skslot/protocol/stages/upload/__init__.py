"""Stage "upload": each client's summary and, for statistics heads, its statistics.

The request (:class:`UploadRequest`) gives a client its position, the seed
of its validation split and the run's summary settings; the reply
(:class:`Upload`) carries its summary (or, where the head's statistics
determine it, its shrinkage) and its row counts.

* the messages: :class:`UploadRequest`, :class:`Upload`;
* the wire format, read and checked before allocation: :class:`UploadCodec`;
* the client's step (:meth:`UploadStage.answer`), the server's
  (:func:`collect`) and the meaning of one upload against its request
  (:func:`check`, which runs the consistency checks of
  :mod:`skslot.defence.consistency`);
* what the client sends it asks of the client's release
  (:meth:`~skslot.protocol.party.Party.release`), exact or under a budget,
  so the client's step has one path.

Comparing clients with each other is the defence's (:mod:`skslot.defence`).
"""

from ._codec import UploadCodec
from ._messages import CLASS_SUMS, STATISTICS, VALIDATION_STATISTICS, Upload, UploadRequest
from ._steps import STAGE, UploadStage, check, class_counts_problem, collect

__all__ = [
    "CLASS_SUMS",
    "STAGE",
    "STATISTICS",
    "VALIDATION_STATISTICS",
    "Upload",
    "UploadCodec",
    "UploadRequest",
    "UploadStage",
    "check",
    "class_counts_problem",
    "collect",
]
