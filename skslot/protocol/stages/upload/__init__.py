"""Stage "upload": each client's summary and, for statistics heads, its statistics.

The request (:class:`UploadRequest`) gives a client its position, the seed
of its validation split and the run's summary settings; the reply
(:class:`Upload`) carries its summary (or, where the head's statistics
determine it, its shrinkage) and its row counts.

* the messages: :class:`UploadRequest`, :class:`Upload`;
* the wire format, read and checked before allocation: :class:`UploadCodec`;
* the client's step (:meth:`UploadStage.answer`), the server's
  (:func:`collect`) and the meaning of one upload (:func:`check`, which runs
  the consistency checks of :mod:`skslot.defence.consistency`);
* what the client releases it asks of the client's release
  (:meth:`~skslot.protocol.party.Party.release`), so the client's step has no
  privacy branch.

Comparing clients with each other is the defence's (:mod:`skslot.defence`).
"""

from ._codec import UploadCodec, as_decoded
from ._messages import (
    CLASS_SUMS,
    STATISTICS,
    VALIDATION_STATISTICS,
    Upload,
    UploadRequest,
)
from ._steps import (
    STAGE,
    UploadStage,
    check,
    class_counts_problem,
    class_sums_problem,
    collect,
    form_problem,
    run_dimension,
)

__all__ = [
    "CLASS_SUMS",
    "STAGE",
    "STATISTICS",
    "VALIDATION_STATISTICS",
    "Upload",
    "UploadCodec",
    "UploadRequest",
    "UploadStage",
    "as_decoded",
    "check",
    "class_counts_problem",
    "class_sums_problem",
    "collect",
    "form_problem",
    "run_dimension",
]
