"""What travels between the parties: byte formats, ``.npy`` records, their errors.

Nothing here needs Flower.  Every decoder raises a subclass of
:class:`WireFormatError` (itself a :class:`ValueError`):

================================  ============================================
:class:`SummaryFormatError`       a Gaussian summary's payload, in either
                                  form (:mod:`skslot.wire.summary_codec`)
:class:`StatisticsFormatError`    a head message of named arrays
                                  (:mod:`skslot.wire.arrays`)
:class:`MessageFormatError`       a transport message or its ``.npy`` buffers
                                  (:mod:`skslot.wire.npy`)
================================  ============================================
"""

from ._errors import (
    MessageFormatError,
    StatisticsFormatError,
    SummaryFormatError,
    WireFormatError,
)
from .arrays import (
    check_psd_up_to_rounding,
    message_bytes,
    read_array,
    read_count,
    read_sample_count,
    sample_count_problem,
)
from .npy import npy_header, read_npy_arrays
from .summary_codec import (
    decode_summary,
    encode_summary,
    summary_dimension,
    summary_payload_size,
)

__all__ = [
    "MessageFormatError",
    "StatisticsFormatError",
    "SummaryFormatError",
    "WireFormatError",
    "check_psd_up_to_rounding",
    "decode_summary",
    "encode_summary",
    "message_bytes",
    "npy_header",
    "read_array",
    "read_count",
    "read_npy_arrays",
    "read_sample_count",
    "sample_count_problem",
    "summary_dimension",
    "summary_payload_size",
]
