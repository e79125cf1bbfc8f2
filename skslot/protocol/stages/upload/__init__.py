"""Stage "upload": each client's summary and, for statistics heads, its statistics.

The request (:class:`UploadRequest`) gives a client its position, the seed
of its validation split and the run's summary settings; the reply
(:class:`Upload`) carries its summary (or, where the head's statistics
determine it, its shrinkage) and its row counts.

* the messages: :class:`UploadRequest`, :class:`Upload`;
* the wire format, read and checked before allocation: :class:`UploadCodec`;
* the client's step (:meth:`UploadStage.answer`), the server's
  (:func:`collect`) and the meaning of one upload (:func:`check`, which runs
  the consistency checks of :mod:`skslot.consistency`);
* what the client releases: :class:`ExactRelease` without a budget,
  :class:`PrivateRelease` wrapping its ledger (:func:`upload_release`), so
  the client's step has no privacy branch; a private client's part:
  :func:`private_upload_problem` (the requests its plan answers),
  :func:`head_releases`, :func:`private_run`, :func:`released_summary`,
  :func:`released_class_counts`, and the server's
  :func:`private_shrinkage_problem`.

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
from ._privacy import (
    derived_settings_problem,
    head_releases,
    private_run,
    private_shrinkage_problem,
    private_summary_problem,
    private_upload_problem,
    released_class_counts,
    released_summary,
)
from ._release import ExactRelease, PrivateRelease, UploadRelease, upload_release
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
    "ExactRelease",
    "PrivateRelease",
    "Upload",
    "UploadCodec",
    "UploadRelease",
    "UploadRequest",
    "UploadStage",
    "as_decoded",
    "check",
    "class_counts_problem",
    "class_sums_problem",
    "collect",
    "derived_settings_problem",
    "form_problem",
    "head_releases",
    "private_run",
    "private_shrinkage_problem",
    "private_summary_problem",
    "private_upload_problem",
    "released_class_counts",
    "released_summary",
    "run_dimension",
    "upload_release",
]
