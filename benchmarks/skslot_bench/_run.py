"""The benchmark's runs: its configuration, one run per (alpha, seed), and all of them."""

from __future__ import annotations

import shutil
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from joblib import Parallel, delayed
from sklearn.base import clone
from threadpoolctl import threadpool_limits

from skslot.barycenter import BuresBarycenter
from skslot.baselines import ClientStandardScaler
from skslot.datasets import DomainDataset, FeatureTable, dirichlet_partition
from skslot.defaults import CLIENT_TAU, MEAN_TAU, TAU, VALIDATION_FRACTION
from skslot.exceptions import ClassCoverageWarning, UnknownClientWarning, lone_classes, lone_text
from skslot.heads import HEADS, OneShotHead, make_head
from skslot.selection import NoValidationRowsError
from skslot.summary import FORMS
from skslot.tau_search import FederatedTauSearch
from skslot.transformer import SLOTTransformer

from ._cases import CASES, accuracy_by_case, case_predictions, training_mixes

__all__ = [
    "BASELINES",
    "CLIENT_TABLE_TITLE",
    "DEFAULT_HEADS",
    "LABEL_MIX_SELECTION",
    "OWN_MIX_LABEL",
    "PREPROCESS",
    "SHRINKAGE_BYTES",
    "BenchmarkConfig",
    "BenchmarkWarning",
    "DataWarning",
    "evaluate_run",
    "run_benchmark",
]


#: Head factories by name (the registry's heads, :data:`skslot.heads.HEADS`); each
#: takes the run's seed as ``random_state`` where the head has one.
def _factory(name: str) -> Callable[[int], OneShotHead]:
    """The registry's head ``name``, seeded by the run."""

    def make(seed: int) -> OneShotHead:
        return make_head(name, seed=seed)

    return make


DEFAULT_HEADS: dict[str, Callable[[int], OneShotHead]] = {name: _factory(name) for name in HEADS}

PREPROCESS = {
    "none": lambda X: X.astype(np.float64),
    "sqrt": lambda X: np.sqrt(np.maximum(X.astype(np.float64), 0.0)),
    "l2": lambda X: X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12),
}


SPLITS = ("random", "given")
#: The baselines printed beside SLOT, by the record's ``selection``: each client alone
#: (its own mean; its own mean and standard deviation) and SLOT's covariance part alone.
BASELINES = ("centre", "z-score", "CORAL")
#: The record's ``selection`` of the own-mix case's alignment
#: (``SLOTTransformer(label_mix="client")``), and its key among the sweep's taus in
#: :func:`summarise`.
LABEL_MIX_SELECTION = "label-mix"
#: The baselines a client computes alone (no summary sent).
LOCAL_BASELINES = {
    "centre": ClientStandardScaler(with_std=False, unknown_client="identity"),
    "z-score": ClientStandardScaler(unknown_client="identity"),
}
#: What a FedCGS client sends for SLOT: its Ledoit-Wolf shrinkage, one float64 (the server
#: derives its summary from its statistics: :meth:`skslot.heads.ClassStatistics.summary`).
SHRINKAGE_BYTES = 8
CLIENT_TABLE_TITLE = "Accuracy per client (%), mean +- std over seeds"
#: The SLOT column of the own-mix case.
OWN_MIX_LABEL = "SLOT (label_mix='client')"


class DataWarning(UserWarning):
    """What a run's data give the federation too little of, once per cause.

    A client left with fewer than two training rows (it takes no part in
    training; its test rows are scored unaligned), or a class one client's
    rows alone train.  :func:`run_benchmark` issues one per distinct message,
    with the runs it held in, after the runs.
    """


class BenchmarkWarning(UserWarning):
    """The warnings raised inside the benchmark's runs, counted, in one message.

    :func:`run_benchmark` records every warning of its runs (in each worker,
    so none interleaves with the progress lines) and issues one of these at
    the end, e.g. ``"3 warnings from the runs: ConvergenceWarning x3 (lbfgs
    failed to converge ...)"``.  Filters set before the call still apply
    inside the runs: an ignored category is neither shown nor counted.
    """


@dataclass(frozen=True)
class BenchmarkConfig:
    """What :func:`run_benchmark` runs; the defaults are the paper's full protocol.

    Parameters
    ----------
    alphas : sequence of float or None, default=(0.1, 0.05, 0.01, None)
        Dirichlet label-skew levels of the partition
        (:func:`~skslot.datasets.dirichlet_partition`'s ``alpha``); ``None``
        keeps every training row (no label skew: the clients as they are).
    taus : sequence of float, default=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
        The sweep's ``tau`` values, also the candidates of the federated
        choice; ``tau = 0`` is the head without SLOT, whatever ``mean_tau``.
    seeds : sequence of int, default=(0, 1, 2, 3, 4)
        One run per ``(alpha, seed)``; the seed of the partition, the heads and
        the validation splits.
    heads : sequence of str, default=("O-FedAvg", "FedCGS", "FedPFT")
        The heads, by name (:data:`DEFAULT_HEADS`, or the ``factories`` of
        :func:`run_benchmark`).
    main_tau : float, default=0.6
        The ``tau`` reported as "with SLOT" (:func:`summarise`'s ``main_tau``,
        :func:`slot_label`); the default is :class:`~skslot.SLOTTransformer`'s.
    clients_per_domain : int, default=1
        Clients each domain's training rows are dealt into.
    preprocess : {"none", "sqrt", "l2"}, default="none"
        Applied to the features first: none, the square root of the features
        clipped at 0, or each row scaled to unit norm.
    n_jobs : int, default=1
        Runs in parallel (joblib's convention).  Each run's BLAS uses one
        thread, and the records come in the order of the runs, so the
        results are the same for every ``n_jobs``.
    auto : bool, default=True
        Also run each head with ``tau`` chosen by
        :class:`~skslot.FederatedTauSearch` over ``taus``.
    validation_fraction : float, default=0.2
        The :class:`~skslot.FederatedTauSearch`'s ``validation_fraction``.
    split : {"random", "given"} or None, default=None
        ``"random"``: the paper's per-domain 70/30 split; ``"given"``: the
        rows a :class:`~skslot.datasets.FeatureTable`'s ``is_test`` marks are
        the test rows, the others train; ``None``: given when the data carry
        a test mask, random otherwise.
    summary_covariance : {"total", "within"}, default="total"
        The clients' summaries: of all their rows (the paper's) or of their
        class-centred rows (label-aware; see
        :class:`~skslot.GaussianSummaryEstimator`).
    client_tau : {"uniform", "label-shift"}, default="label-shift"
        Every client moves ``tau`` (the paper's) or ``tau`` times its
        label-shift distance (:mod:`skslot.label_shift`); the default is
        :class:`~skslot.SLOTTransformer`'s.
    mean_tau : float or None, default=1.0
        The mean's fraction of the transport, every client alike (``None``:
        the mean follows ``tau``, the paper's geodesic); the default is
        :class:`~skslot.SLOTTransformer`'s.
    baselines : bool, default=True
        Also run the heads after each client's own centring and
        standardisation and after CORAL-style alignment (:data:`BASELINES`).
    form : {"dense", "low-rank"}, default="dense"
        The summaries' form (:class:`~skslot.SLOTTransformer`'s ``form``):
        ``"low-rank"`` holds each client's summary in factor form, exactly,
        without an ``m x m`` matrix (for clients with fewer rows than
        features); the same alignment to rounding, the federated search's
        messages included.
    """

    alphas: Sequence[float | None] = (0.1, 0.05, 0.01, None)
    taus: Sequence[float] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    seeds: Sequence[int] = (0, 1, 2, 3, 4)
    heads: Sequence[str] = ("O-FedAvg", "FedCGS", "FedPFT")
    main_tau: float = TAU
    clients_per_domain: int = 1
    preprocess: str = "none"
    n_jobs: int = 1
    auto: bool = True
    validation_fraction: float = VALIDATION_FRACTION
    split: str | None = None
    summary_covariance: str = "total"
    client_tau: str = CLIENT_TAU
    mean_tau: float | None = MEAN_TAU
    baselines: bool = True
    form: str = "dense"

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {self.form!r}")


def evaluate_run(
    data: DomainDataset,
    X: np.ndarray,
    alpha: float | None,
    seed: int,
    config: BenchmarkConfig,
    factories: Mapping[str, Callable[[int], Any]] | None = None,
    *,
    test_mask: np.ndarray | None = None,
) -> list[dict]:
    """Every (tau, head) of one partition; one record per domain.

    Parameters
    ----------
    data : DomainDataset
        The data set (its labels and domains).
    X : ndarray of shape (n_samples, n_features)
        Its rows, preprocessed (:data:`PREPROCESS`).
    alpha : float or None
        The Dirichlet label skew; ``None``: none.
    seed : int
        Seeds the partition and the heads.
    config : BenchmarkConfig
    factories : mapping of str to callable, optional
        Head constructors taking the seed, by name (default:
        :data:`DEFAULT_HEADS`, restricted to ``config.heads``).
    test_mask : ndarray of bool, optional
        The given split (:func:`~skslot.datasets.dirichlet_partition`'s);
        ``None``: the random one.

    Returns
    -------
    list of dict
        One record per (tau or baseline, head, domain, case) (the columns of
        ``results.csv``).
    """
    if factories is None:
        factories = {name: DEFAULT_HEADS[name] for name in config.heads}
    part = dirichlet_partition(
        data.y,
        data.domain,
        alpha=alpha,
        clients_per_domain=config.clients_per_domain,
        test_mask=test_mask,
        random_state=seed,
    )

    def client_name(k: Any) -> str:
        domain = str(data.domains[part.client_domain[k]])
        return domain if config.clients_per_domain == 1 else f"{domain}[{k}]"

    given = "as given" if alpha is None else f"after the skew (alpha {alpha:g})"
    for k in part.empty_clients:  # said, not dropped silently
        warnings.warn(
            f"client {client_name(k)!r} has {int(np.sum(part.train_client == k))} training row(s) "
            f"{given}: it takes no part in training, its test rows are scored unaligned",
            DataWarning,
            stacklevel=2,
        )
    keep = ~np.isin(part.train_client, part.empty_clients)
    train_rows, train_client = part.train_index[keep], part.train_client[keep]
    X_train, y_train = X[train_rows], data.y[train_rows]
    X_test, y_test = X[part.test_index], data.y[part.test_index]
    test_domain = part.client_domain[part.test_client]
    # clients with < 2 training rows have no map: their test rows stay unaligned
    start = time.process_time()
    slot = SLOTTransformer(  # the domain case's alignment; label_mix switches after fit
        label_mix="federation",
        unknown_client="identity",
        covariance=config.summary_covariance,
        client_tau=config.client_tau,
        mean_tau=config.mean_tau,
        barycenter=BuresBarycenter(form=config.form),
    )
    slot.fit(X_train, y_train, client=train_client)
    # CPU time of every client's summary, the server's barycenter and the maps, in one
    # process: unlike the wall time, not inflated by other work on the machine
    slot_seconds = time.process_time() - start
    records = []
    # the classes the heads learn: those of the training rows (under strong skew with many
    # clients, a class may have no training row left)
    classes = np.unique(y_train)
    # each client's training mix: the label mix of its future rows in the "own mix" case
    mixes = training_mixes(y_train, train_client, classes)
    named = np.asarray(data.classes)[classes].tolist()  # the classes' names, not codes
    lone = lone_classes({client_name(k): mix for k, mix in mixes.items()}, np.asarray(named))
    if lone:  # the heads' own warning names clients by number: this one, by name
        warnings.warn(
            f"class(es) trained by one client only {given}: {lone_text(lone)}; the heads "
            "learn each from that client's domain",
            DataWarning,
            stacklevel=2,
        )

    # what each client sends for SLOT: its summary, float32 on the wire (Flower's default),
    # or, where the head's statistics determine the summary (FedCGS), its shrinkage alone
    payload = int(
        np.mean([summary.payload_size("float32") for summary in slot.summaries_.values()])
    )

    def record(
        predictions: dict[str, np.ndarray],
        tau: float,
        name: str,
        selection: str,
        head_bytes: float | None = None,
        *,
        derived: bool,
    ) -> None:
        """Two records per domain, one per case (:func:`case_predictions`)."""
        summary_bytes = SHRINKAGE_BYTES if derived else payload
        if selection in LOCAL_BASELINES or (selection == "fixed" and tau == 0):
            summary_bytes = 0  # nothing sent for alignment
        by_case = accuracy_by_case(
            predictions, y_test, part.test_client, part.client_domain, mixes, classes
        )
        for d in np.unique(test_domain):
            rows = test_domain == d
            for case in CASES:
                if d not in by_case[case]:  # no client of this domain has a label mix to follow
                    continue
                accuracy = by_case[case][d]
                records.append(
                    {
                        "dataset": data.name,
                        "case": case,
                        "alpha": "none" if alpha is None else alpha,
                        "seed": seed,
                        "tau": tau,
                        "covariance": config.summary_covariance,
                        "client_tau": config.client_tau,
                        "selection": selection,
                        "head": name,
                        "domain": str(data.domains[d]),
                        "accuracy": accuracy,
                        "n_train": int(train_rows.shape[0]),
                        "n_test": int(rows.sum()),
                        "n_clients": len(slot.clients_),
                        "n_empty_clients": len(part.empty_clients),
                        "slot_cpu_seconds": round(slot_seconds, 3),
                        "barycenter_iterations": slot.n_iter_,
                        # bytes per client: the head's statistics, the SLOT summary (none at tau 0)
                        "head_bytes": "" if head_bytes is None else round(head_bytes),
                        "summary_bytes": summary_bytes,
                    }
                )

    def fit_heads(aligner: Any, tau: float, selection: str) -> None:
        """Every head on the rows ``aligner`` transforms (``None``: the rows as they are)."""
        Z_train, Z_test = X_train, X_test
        if aligner is not None:
            Z_train = np.asarray(aligner.transform(X_train, client=train_client))
            Z_test = np.asarray(aligner.transform(X_test, client=part.test_client))
        for name, factory in factories.items():
            head = factory(seed).fit(Z_train, y_train, client=train_client)
            record(
                case_predictions(head, Z_test, part.test_client),
                tau,
                name,
                selection,
                float(np.mean(head.upload_bytes_)),
                derived=head.strategy.derives_summary,
            )

    for tau in config.taus:  # tau 0: without SLOT, the rows as they are, whatever mean_tau
        if tau != 0:
            slot.set_params(tau=tau)
        fit_heads(slot if tau != 0 else None, tau, "fixed")
    # the own-mix case's alignment, the library's default whatever the domain case's settings:
    # each client's domain offset (measured within classes) moved fully, its covariance kept
    domain_case = {"mean_tau": slot.mean_tau, "client_tau": slot.client_tau}
    slot.set_params(label_mix="client", tau=None, mean_tau=MEAN_TAU, client_tau=CLIENT_TAU)
    fit_heads(slot, slot.tau_value, LABEL_MIX_SELECTION)
    slot.set_params(label_mix="federation", **domain_case)
    if config.baselines:
        for name, baseline in LOCAL_BASELINES.items():
            fit_heads(clone(baseline).fit(X_train, client=train_client), 0.0, name)
        # the covariance part alone, every client alike, on the fitted reference and summaries
        coral = SLOTTransformer.from_reference(
            slot.reference_,
            slot.summaries_,
            tau=1.0,
            mean_tau=0.0,
            client_tau="uniform",
            unknown_client="identity",
            barycenter=BuresBarycenter(form=config.form),
        )
        fit_heads(coral, 1.0, "CORAL")
    if config.auto:
        for name, factory in factories.items():
            head = factory(seed)
            if "label_mix" in head.get_params():  # the domain case's choice, as its alignment
                head.set_params(label_mix="federation")
            search = FederatedTauSearch(
                head,
                taus=config.taus,
                validation_fraction=config.validation_fraction,
                slot=clone(slot),  # its own maps, of each client's fitting rows
                unknown_client="identity",
                random_state=seed,
            )
            try:
                search.fit(X_train, y_train, client=train_client)
            except NoValidationRowsError:  # clients too small to hold any row out
                break  # this run has no auto records, for any head; summaries count the runs
            Z_test = search.slot_.transform(X_test, client=part.test_client)
            derived = search.head.strategy.derives_summary
            # the search ran in the domain case: its heads learn each client's mix here, as
            # each client holds its own counts
            best = search.best_estimator_.with_client_counts(mixes)
            predictions = case_predictions(best, Z_test, part.test_client)
            record(predictions, search.best_tau_, name, "auto", derived=derived)
            if "refit" in search.stages_:  # a second local round (O-FedAvg): what it buys
                chosen = search.candidate_heads_[search.best_index_].with_client_counts(mixes)
                record(
                    case_predictions(chosen, Z_test, part.test_client),
                    search.best_tau_,
                    name,
                    "auto-norefit",
                    derived=derived,
                )
    return records


def _pattern(regex: Any) -> str:
    return "" if regex is None else regex.pattern


def _evaluate_in_worker(
    *args: Any, threads: int | None, filters: list[tuple], **kwargs: Any
) -> tuple[list[dict], list[tuple[str, str]]]:
    """One run, its warnings recorded (category name, first line), never printed.

    ``filters`` are the caller's warning filters: ``ignore`` and ``error`` keep
    their effect; every other action records each occurrence.
    """
    with threadpool_limits(threads), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for action, message, category, module, lineno in reversed(filters):
            if action in ("ignore", "error"):
                warnings.filterwarnings(
                    action, _pattern(message), category, _pattern(module), lineno
                )
        # the benchmark maps a client without training rows by the identity, by design
        warnings.filterwarnings("ignore", category=UnknownClientWarning)
        warnings.filterwarnings("ignore", category=ClassCoverageWarning)  # a DataWarning
        records = evaluate_run(*args, **kwargs)
    text = [(w.category.__name__, (str(w.message).strip().splitlines() or [""])[0]) for w in caught]
    return records, text


def data_warnings(caught: Sequence[tuple[str, str]], runs: int) -> list[str]:
    """Each distinct :class:`DataWarning` of the runs once, with how many runs it held in.

    >>> data_warnings([("DataWarning", "client 'a' has 1 training row(s)")] * 2, 5)
    ["client 'a' has 1 training row(s) (2 of 5 runs)"]
    """
    counts = Counter(message for category, message in caught if category == DataWarning.__name__)
    return [f"{message} ({n} of {runs} runs)" for message, n in counts.items()]


def describe_warnings(caught: Sequence[tuple[str, str]], width: int = 60) -> str:
    """One line counting warnings by category, with the first message of each (shortened).

    >>> describe_warnings([("ConvergenceWarning", "lbfgs failed to converge")] * 3)
    '3 warnings from the runs: ConvergenceWarning x3 (lbfgs failed to converge)'
    """
    counts = Counter(category for category, _ in caught)
    first = dict(reversed(caught))  # each category's first message
    shown = []
    for category, n in counts.items():
        message = first[category]
        if len(message) > width:
            message = message[: width - 4].rstrip() + " ..."
        shown.append(f"{category} x{n} ({message})")
    plural = "" if len(caught) == 1 else "s"
    return f"{len(caught)} warning{plural} from the runs: " + "; ".join(shown)


class _Progress:
    """Progress of the runs on ``stream``: one "[i/n]" line per finished run, or, in a
    terminal, one line with a bar that rewrites itself."""

    def __init__(self, total: int, name: str, stream: Any) -> None:
        self.total, self.name, self.stream = total, name, stream
        isatty = getattr(stream, "isatty", None)
        self.terminal = bool(isatty and isatty())
        self.start = time.perf_counter()
        self.shown = 0  # characters of the line in place (terminal)

    def update(self, done: int, alpha: Any, seed: int) -> None:
        elapsed = time.perf_counter() - self.start
        line = f"[{done}/{self.total}] {self.name} alpha={alpha} seed={seed} ({elapsed:.0f}s"
        if not self.terminal:
            print(line + ")", file=self.stream, flush=True)
            return
        filled = round(20 * done / self.total)
        left = elapsed / done * (self.total - done)
        line = f"{'#' * filled}{'.' * (20 - filled)} {line}, ~{left:.0f}s left)"
        line = line[: shutil.get_terminal_size().columns - 1]
        self.stream.write("\r" + line.ljust(self.shown))
        self.stream.flush()
        self.shown = len(line)

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = 0


def _test_mask(data: DomainDataset | FeatureTable, split: str | None) -> np.ndarray | None:
    """The given split's test rows, None for the random split."""
    mask = data.is_test if isinstance(data, FeatureTable) else None
    if split is None:
        return mask
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or None, got {split!r}")
    if split == "given" and mask is None:
        raise ValueError(
            "split='given' needs the data's own train/test column: load the table with "
            "load_table(..., split=COLUMN)"
        )
    return mask if split == "given" else None


def run_benchmark(
    data: DomainDataset | FeatureTable,
    config: BenchmarkConfig,
    *,
    progress: bool = True,
    factories: Mapping[str, Callable[[int], Any]] | None = None,
    skip: Collection[tuple[Any, int]] = (),
) -> list[dict]:
    """Run every (alpha, seed); returns per-domain accuracy records.

    Warnings raised in the runs end as one :class:`BenchmarkWarning`, issued
    after the last run.

    Parameters
    ----------
    data : DomainDataset or FeatureTable
        A :class:`~skslot.datasets.DomainDataset` (one client per domain) or
        a :class:`~skslot.datasets.FeatureTable` (its clients are the
        domains; its ``is_test``, if any, is the split unless
        ``config.split`` is ``"random"``).
    config : BenchmarkConfig
        What to run.
    progress : bool, default=True
        Write "[i/n]" lines on stderr (a self-rewriting bar in a terminal).
    factories : dict of str to callable, default=None
        Head constructors by name, taking the seed, for the names of
        ``config.heads`` that are not in :data:`DEFAULT_HEADS` or to replace
        one.
    skip : collection of (alpha, seed), default=()
        Runs not to run (done already; ``alpha`` as the records write it:
        ``"none"`` or a float).

    Returns
    -------
    records : list of dict
        One record per (alpha, seed, tau, head, kind of run, domain): its
        settings, the domain's test ``accuracy``, the row counts, and the
        bytes each client sends (``head_bytes``, ``summary_bytes``).

    Raises
    ------
    ValueError
        For a head name without a constructor, or a ``split`` the data
        cannot give.
    """
    heads = {**DEFAULT_HEADS, **(factories or {})}
    unknown = [name for name in config.heads if name not in heads]
    if unknown:
        raise ValueError(f"unknown heads {unknown}; choose from {list(heads)}")
    chosen = {name: heads[name] for name in config.heads}
    test_mask = _test_mask(data, config.split)
    if isinstance(data, FeatureTable):
        data = data.to_domain_dataset()
    X = PREPROCESS[config.preprocess](data.X)
    done = set(skip)
    jobs = [
        (alpha, seed)
        for alpha in config.alphas
        for seed in config.seeds
        if ("none" if alpha is None else alpha, seed) not in done
    ]
    if not jobs:
        return []
    filters = list(warnings.filters)
    finished_runs: dict[tuple, tuple[list[dict], list[tuple[str, str]]]] = {}
    shown = _Progress(len(jobs), data.name, sys.stderr) if progress else None
    worker = delayed(_evaluate_in_worker)
    # one BLAS thread per run, whatever n_jobs: a thread count changes the last bits of
    # the arithmetic, and a printed digit at a rounding boundary with them
    options = {"threads": 1, "filters": filters, "test_mask": test_mask}
    results = Parallel(n_jobs=config.n_jobs, return_as="generator_unordered")(
        worker(data, X, alpha, seed, config, chosen, **options) for alpha, seed in jobs
    )
    try:
        for finished, (run, run_warnings) in enumerate(results, 1):
            finished_runs[run[0]["alpha"], run[0]["seed"]] = run, run_warnings
            if shown is not None:
                shown.update(finished, run[0]["alpha"], run[0]["seed"])
    finally:
        if shown is not None:
            shown.close()
    in_order = [finished_runs["none" if a is None else a, seed] for a, seed in jobs]
    records = [r for run, _ in in_order for r in run]
    caught = [w for _, run_warnings in in_order for w in run_warnings]
    for message in data_warnings(caught, len(jobs)):
        warnings.warn(message, DataWarning, stacklevel=2)
    others = [(category, text) for category, text in caught if category != DataWarning.__name__]
    if others:
        warnings.warn(describe_warnings(others), BenchmarkWarning, stacklevel=2)
    return records
