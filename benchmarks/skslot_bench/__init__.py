"""The reproduction benchmark: the paper's protocol, heads with and without SLOT.

For each label-skew level ``alpha`` and seed, the data set is partitioned with
:func:`~skslot.datasets.dirichlet_partition` (one client per domain by
default), :class:`~skslot.SLOTTransformer` is fitted once on the clients'
training rows, and for every ``tau`` of the sweep each head is trained on the
aligned rows; each client's full test set is aligned with its own map and the
accuracy per domain is recorded.  ``tau = 0`` is the head without SLOT.
Beside them run the baselines (:data:`BASELINES`): each client's own
centring and standardisation, and CORAL-style alignment.

One's own table (:func:`~skslot.datasets.load_table`) runs the same way, its
clients as the domains; with a train/test column (``split=``) the benchmark
uses that split instead of the random one (``BenchmarkConfig.split``).
Warnings raised inside the runs (a solver's ``ConvergenceWarning``, ...) are
collected there and reported once, at the end, as one :class:`BenchmarkWarning`.
"""

from ._cases import (
    CASE_TITLES,
    CASES,
    accuracy_by_case,
    case_predictions,
    macro_accuracy_by_case,
    own_mix_rows,
    training_mixes,
)
from ._report import (
    format_client_table,
    format_short_table,
    format_table,
    macro_accuracies,
    plot_tau_sweep,
    read_records,
    slot_label,
    summarise,
    write_outputs,
)
from ._run import (
    BASELINES,
    DEFAULT_HEADS,
    LABEL_MIX_SELECTION,
    PREPROCESS,
    BenchmarkConfig,
    BenchmarkWarning,
    evaluate_run,
    run_benchmark,
)

__all__ = [
    "BASELINES",
    "CASES",
    "CASE_TITLES",
    "DEFAULT_HEADS",
    "LABEL_MIX_SELECTION",
    "PREPROCESS",
    "BenchmarkConfig",
    "BenchmarkWarning",
    "accuracy_by_case",
    "case_predictions",
    "evaluate_run",
    "format_client_table",
    "format_short_table",
    "format_table",
    "macro_accuracies",
    "macro_accuracy_by_case",
    "own_mix_rows",
    "plot_tau_sweep",
    "read_records",
    "run_benchmark",
    "slot_label",
    "summarise",
    "training_mixes",
    "write_outputs",
]
