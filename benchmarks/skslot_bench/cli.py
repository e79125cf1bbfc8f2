"""The ``skslot bench`` command: the reproduction benchmark, on the embedded data or a table.

:func:`add_arguments` declares its options (those that are a run's settings,
:data:`SETTING_OPTIONS`, made from their declarations by
:meth:`skslot.flower.Setting.add_option`); :func:`run` runs it.  ``skslot bench``
(:mod:`skslot.cli`) is this command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import warnings
from collections import Counter

import numpy as np

from skslot._validation import check_client_size
from skslot.datasets import (
    EMBEDDED_DATASETS,
    DomainDataset,
    FeatureTable,
    load_dataset,
    load_table,
)
from skslot.datasets._tables import DEFAULT_SPLIT_COLUMN, table_columns, table_kind
from skslot.flower.config import DeploymentConfig

from . import (
    CASE_TITLES,
    DEFAULT_HEADS,
    PREPROCESS,
    BenchmarkConfig,
    BenchmarkWarning,
    format_client_table,
    format_short_table,
    read_records,
    run_benchmark,
    slot_label,
    summarise,
    write_outputs,
)
from ._run import CLIENT_TABLE_TITLE, OWN_MIX_LABEL, SPLITS

__all__ = ["DESCRIPTION", "HELP", "add_arguments", "run"]

#: The command's one line in ``skslot --help``.
HELP = "run the SLOT-Align reproduction benchmark"

#: What ``skslot bench --help`` says first.
DESCRIPTION = (
    "Paper protocol (per-domain 70/30 split, Dirichlet label skew, one client "
    "per domain): O-FedAvg, FedCGS and FedPFT heads without (tau=0) and with SLOT over a "
    "tau sweep, and with tau chosen by the federation (auto). Prints a table, writes "
    "CSV/JSON/markdown results (with the accuracy per client) and a PNG plot. The defaults "
    "(the embedded digits features, 4 alphas x 5 seeds x 6 taus) take a minute or two on "
    "2 idle cores (docs/results/readme_times.md). Your own table: --data "
    "my.csv --label COL --client COL [--split given --split-column COL] [--skew none]."
)

#: The options that are settings of a run: :class:`BenchmarkConfig`'s field to the setting
#: (:class:`~skslot.flower.DeploymentConfig`'s), whose declaration makes the option.
SETTING_OPTIONS = {
    "summary_covariance": "summary_covariance",
    "client_tau": "client_tau",
    "mean_tau": "mean_tau",
    "form": "summary_form",
    "validation_fraction": "validation_fraction",
    "clients_per_domain": "clients_per_domain",
}


def _alphas(text: str) -> tuple[float | None, ...]:
    try:
        values = tuple(None if a.strip().lower() == "none" else float(a) for a in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers or 'none', got {text!r}"
        ) from None
    if any(a is not None and not a > 0 for a in values):
        raise argparse.ArgumentTypeError(f"alphas must be > 0 (or 'none'), got {text!r}")
    return values


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers, comma-separated: {text!r}") from None
    if any(not 0.0 <= t <= 1.0 for t in values):
        raise argparse.ArgumentTypeError(f"taus must lie in [0, 1], got {text!r}")
    return values


def _heads(text: str) -> tuple[str, ...]:
    """Head names, case-insensitive, checked before any work starts."""
    names = {name.lower(): name for name in DEFAULT_HEADS}
    heads = []
    for part in text.split(","):
        name = names.get(part.strip().lower())
        if name is None:
            raise argparse.ArgumentTypeError(
                f"unknown head {part.strip()!r}; choose from {', '.join(DEFAULT_HEADS)}"
            )
        heads.append(name)
    return tuple(heads)


def _n_jobs(text: str) -> int:
    """joblib's n_jobs: a positive count, or -1 (every core), -2 (all but one), ..."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value == 0:
        raise argparse.ArgumentTypeError(
            f"expected a number of parallel runs >= 1, or -1 for every core (joblib's "
            f"convention), got {text!r}"
        )
    return value


def _features(text: str) -> str | list[str]:
    """Comma-separated column names (a list), or one prefix (no comma)."""
    if "," not in text:
        return text
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected column names, got {text!r}")
    return names


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``skslot bench``'s options on ``parser``.

    The defaults are :class:`BenchmarkConfig`'s, the paper's grid, on the
    embedded digits (its time: docs/results/readme_times.md).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The ``bench`` sub-command's parser.
    """
    names = ", ".join(EMBEDDED_DATASETS)
    parser.add_argument(
        "--data",
        metavar="NAME|PATH",
        default="digits",
        help=f"an embedded data set ({names}) or a .npz (arrays X, y, domain), .csv or .parquet "
        "file (default: digits, the embedded 256-d EfficientNet-Lite0 digits features)",
    )
    parser.add_argument(
        "--label", metavar="COL", help="the label column of a .csv or .parquet file (required)"
    )
    parser.add_argument(
        "--client",
        metavar="COL",
        help="the client column of a .csv or .parquet file (required); each client is a domain",
    )
    parser.add_argument(
        "--features",
        metavar="COLS|PREFIX",
        type=_features,
        help="feature columns: comma-separated names ('a,b,c'; one column: 'a,'), or a prefix "
        "('f' selects f0, f1, ...) (default: every other numeric column)",
    )
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default=None,
        help="'random': the paper's stratified 70/30 split per client; 'given': your own "
        "train/test column (--split-column), its test rows tested, all other rows trained on "
        "(default: random, or given with --split-column)",
    )
    parser.add_argument(
        "--split-column",
        metavar="COL",
        help="the train/test column of your table (values train/test, booleans or 0/1, "
        "True or 1: test; for an .npz, an array); implies --split given "
        f"(default with --split given: {DEFAULT_SPLIT_COLUMN!r})",
    )
    parser.add_argument(
        "--skew",
        choices=("dirichlet", "none"),
        default="dirichlet",
        help="'dirichlet': the label skew of --alphas; 'none': the clients as they are, every "
        "training row kept (the same as --alphas none) (default: dirichlet)",
    )
    for field, name in SETTING_OPTIONS.items():
        default = getattr(BenchmarkConfig, field)
        DeploymentConfig.setting(name).add_option(parser, field, default=default, check=True)
    parser.add_argument(
        "--alphas",
        type=_alphas,
        default=None,
        help="Dirichlet alphas, 'none' = no label skew (default: 0.1,0.05,0.01,none)",
    )
    parser.add_argument(
        "--taus",
        type=_floats,
        default=BenchmarkConfig.taus,
        help="tau sweep in [0, 1]; must include 0, the baseline; --main-tau is added if "
        "missing (default: 0,0.2,0.4,0.6,0.8,1)",
    )
    parser.add_argument(
        "--seeds",
        type=_positive_int,
        default=len(BenchmarkConfig.seeds),
        help=f"number of seeds (default: {len(BenchmarkConfig.seeds)})",
    )
    parser.add_argument(
        "--heads",
        type=_heads,
        default=tuple(DEFAULT_HEADS),
        help="comma-separated heads, any case: O-FedAvg, FedCGS, FedPFT (default: all three)",
    )
    parser.add_argument(
        "--main-tau",
        type=float,
        default=BenchmarkConfig.main_tau,
        help=f"tau reported in the table (default: {BenchmarkConfig.main_tau:g})",
    )
    parser.add_argument(
        "--preprocess",
        choices=sorted(PREPROCESS),
        default="none",
        help="per-row feature transform before federating (default: none)",
    )
    parser.add_argument(
        "--n-jobs",
        type=_n_jobs,
        default=2,
        help="parallel runs: a count, or -1 for every core (joblib's convention); each run "
        "uses one BLAS thread, so the results do not depend on it (default: 2)",
    )
    parser.add_argument(
        "--no-auto",
        dest="auto",
        action="store_false",
        help="skip the federated choice of tau by validation (the 'auto' column)",
    )
    parser.add_argument(
        "--out", default=None, help="output folder (default: skslot-results/<dataset>)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="run only the (alpha, seed) pairs --out's results.csv does not hold yet, and "
        "write the tables of all of them (a long benchmark in parts: the same settings "
        "each time, --alphas and --seeds choosing what a part runs)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="no progress lines (a bar in a terminal)"
    )


class _UsageError(Exception):
    """An option that cannot work, found before any work: exit status 2, one line."""


def _resolve(args: argparse.Namespace) -> None:
    """Check the bench options together and fill in what they imply (``args`` in place;
    ``args.notes``: what the user should hear of it)."""
    args.notes = []
    if 0.0 not in args.taus:
        raise _UsageError("--taus must include 0 (the head without SLOT)")
    if not 0.0 <= args.main_tau <= 1.0:
        raise _UsageError("--main-tau must lie in [0, 1]")
    if args.skew == "none":
        if args.alphas not in (None, (None,)):
            raise _UsageError("--skew none keeps the clients as they are: leave out --alphas")
        args.alphas = (None,)
    elif args.alphas is None:
        args.alphas = BenchmarkConfig.alphas
    column_options = [
        f"--{name}" for name in ("label", "client", "features") if getattr(args, name) is not None
    ]
    if args.data in EMBEDDED_DATASETS:
        if column_options:
            raise _UsageError(
                f"{' '.join(column_options)}: only for a .csv or .parquet file, not the "
                f"embedded {args.data!r}"
            )
        if args.split == "given" or args.split_column is not None:
            raise _UsageError(
                f"the embedded {args.data!r} has no train/test column: leave out --split given "
                "and --split-column"
            )
    if args.split_column is not None:
        if args.split == "random":
            raise _UsageError("--split-column names the given split: leave out --split random")
        args.split = "given"
    elif args.split == "given":
        args.split_column = DEFAULT_SPLIT_COLUMN
    if args.data in EMBEDDED_DATASETS:
        args.split = args.split or "random"
        return
    has_split = DEFAULT_SPLIT_COLUMN in table_columns(args.data)
    if args.split is None and has_split:  # the table's own split, said so
        args.split, args.split_column = "given", DEFAULT_SPLIT_COLUMN
        args.notes.append(
            f"--data {args.data} has a {DEFAULT_SPLIT_COLUMN!r} column: its test rows are "
            "tested, the others trained on (--split random draws the paper's 70/30 split "
            "instead)"
        )
    elif args.split == "random" and has_split:
        args.notes.append(
            f"--split random: the {DEFAULT_SPLIT_COLUMN!r} column of --data {args.data} is "
            "not used (the paper's 70/30 split is drawn per client)"
        )
    args.split = args.split or "random"
    kind = table_kind(args.data)
    if kind is None:
        names = ", ".join(EMBEDDED_DATASETS)
        raise _UsageError(
            f"--data {args.data}: neither an embedded data set ({names}) nor a .npz, .csv or "
            ".parquet file"
        )
    if not os.path.isfile(args.data):
        raise _UsageError(f"--data {args.data}: no such file")
    if kind == "npz":
        if column_options:
            raise _UsageError(
                f"{' '.join(column_options)}: only for a .csv or .parquet file; an .npz holds "
                "arrays X, y and domain"
            )
    elif args.label is None or args.client is None:
        missing = " and ".join(
            f"--{name} COL" for name in ("label", "client") if getattr(args, name) is None
        )
        raise _UsageError(f"--data {args.data} is a table: name its columns with {missing}")


def _load(args: argparse.Namespace) -> DomainDataset | FeatureTable:
    """The data set: a DomainDataset (embedded) or a FeatureTable (a file)."""
    if args.data in EMBEDDED_DATASETS:
        return load_dataset(args.data)
    return load_table(
        args.data,
        label=args.label,
        client=args.client,
        features=args.features,
        split=args.split_column,
    )


def _describe(data: DomainDataset | FeatureTable, config: BenchmarkConfig) -> str:
    if isinstance(data, FeatureTable):
        clients, classes = len(data.clients), len(data.classes)
        split = (
            f"given split ({int(data.is_test.sum())} test rows)"
            if config.split == "given" and data.is_test is not None
            else "random 70/30 split per client"
        )
    else:
        clients, classes, split = len(data.domains), len(data.classes), "random 70/30 split"
    return (
        f"skslot bench: {data.name}, {data.X.shape[0]} rows x {data.X.shape[1]} features, "
        f"{clients} clients (domains), {classes} classes, {split}; "
        f"{len(config.alphas)} alphas x {len(config.seeds)} seeds x {len(config.taus)} taus x "
        f"{len(config.heads)} heads"
    )


def _feature_names(data: DomainDataset | FeatureTable) -> list[str]:
    """The feature columns the run uses (``x0``, ``x1``, ... for arrays without names)."""
    if isinstance(data, FeatureTable):
        return [str(name) for name in data.feature_names]
    return [f"x{j}" for j in range(data.X.shape[1])]


def _leftover_columns(names: list[str]) -> tuple[str | None, list[str]]:
    """The prefix most feature columns share (``f`` of ``f0, f1, ...``), and the others."""
    prefixes = Counter(m.group(1) for n in names if (m := re.fullmatch(r"(.*?)[0-9]+", n)))
    if not prefixes:
        return None, []
    prefix, count = prefixes.most_common(1)[0]
    if count < 2:
        return None, []
    return prefix, [n for n in names if not re.fullmatch(re.escape(prefix) + r"[0-9]+", n)]


def _shown_names(names: list[str], most: int = 8) -> str:
    shown = ", ".join(names[:most])
    return shown + (f", ... ({len(names)} in all)" if len(names) > most else "")


def _warning_lines(caught: list[warnings.WarningMessage]) -> list[str]:
    """The warnings of a run, one line each: the benchmark's summary, then any other."""
    lines = []
    for w in caught:
        text = (str(w.message).strip().splitlines() or [""])[0]
        if not issubclass(w.category, BenchmarkWarning):
            text = f"{w.category.__name__}: {text}"
        lines.append(f"skslot bench: {text}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Run ``skslot bench`` with its parsed options.

    Parameters
    ----------
    args : argparse.Namespace
        The options :func:`add_arguments` declared, parsed.

    Returns
    -------
    status : int
        0 on success; 2 when the options or the data cannot work (the reason
        printed on stderr).
    """
    try:
        _resolve(args)
    except _UsageError as exc:
        print(f"skslot bench: {exc}", file=sys.stderr)
        return 2
    for note in args.notes:
        print(f"skslot bench: {note}", file=sys.stderr)
    try:
        data = _load(args)
        if isinstance(data, FeatureTable):  # the estimators' rule and message, before any fit
            labels, counts = np.unique(data.clients[data.client], return_counts=True)
            for label, n in zip(labels.tolist(), counts.tolist(), strict=True):
                check_client_size(n, label)
    except (OSError, ValueError, KeyError, TypeError, ImportError) as exc:
        print(f"skslot bench: cannot read --data {args.data}: {exc}", file=sys.stderr)
        return 2
    taus = tuple(sorted(set(args.taus) | {args.main_tau}))
    if args.main_tau not in args.taus:
        print(f"skslot bench: adding --main-tau {args.main_tau:g} to the sweep", file=sys.stderr)
    try:
        config = BenchmarkConfig(
            alphas=args.alphas,
            taus=taus,
            seeds=tuple(range(args.seeds)),
            heads=args.heads,
            main_tau=args.main_tau,
            preprocess=args.preprocess,
            n_jobs=args.n_jobs,
            auto=args.auto,
            split=args.split,
            **{field: getattr(args, field) for field in SETTING_OPTIONS},
        )
    except ValueError as exc:
        print(f"skslot bench: {exc}", file=sys.stderr)
        return 2
    print(_describe(data, config), file=sys.stderr)
    features = _feature_names(data)
    if isinstance(data, FeatureTable) and args.features is None and table_kind(args.data) != "npz":
        prefix, others = _leftover_columns(features)
        named = f"{prefix}0, {prefix}1, ..." if prefix is not None else _shown_names(features)
        extra = f", and {_shown_names(others)} besides" if others else ""
        print(
            f"skslot bench: --features not given: every numeric column besides --label, "
            f"--client and --split is one of the {len(features)} features ({named}{extra}); "
            "choose them with --features",
            file=sys.stderr,
        )
    else:
        print(f"skslot bench: features: {_shown_names(features)}", file=sys.stderr)
    kind = "" if args.summary_covariance == "total" else f"-{args.summary_covariance}"
    kind += "" if args.client_tau == BenchmarkConfig.client_tau else f"-{args.client_tau}"
    if args.mean_tau != BenchmarkConfig.mean_tau:
        kind += f"-mean-tau-{DeploymentConfig.setting('mean_tau').shown(args.mean_tau)}"
    kind += "" if args.form == BenchmarkConfig.form else f"-{args.form}"
    out = args.out or os.path.join("skslot-results", data.name + kind)
    used = {
        "name": data.name,
        "rows": int(data.X.shape[0]),
        "features": features,
        "settings": _settings(config),
    }
    previous: list[dict] = []
    done: set[tuple] = set()  # the (alpha, seed) pairs run already
    if args.resume:
        try:
            previous = _previous_records(out, used)
        except (OSError, ValueError) as exc:
            print(f"skslot bench: --resume: {exc}", file=sys.stderr)
            return 2
        done = {(r["alpha"], r["seed"]) for r in previous}
        print(f"skslot bench: --resume: {len(done)} runs in {out} already", file=sys.stderr)
    try:
        with warnings.catch_warnings(record=True) as caught:
            records = previous + run_benchmark(data, config, progress=not args.quiet, skip=done)
    except ValueError as exc:
        print(f"skslot bench: {exc}", file=sys.stderr)
        return 2
    summary = summarise(records, config.main_tau)
    own_mix = summarise(records, config.main_tau, case="own mix")
    n_seeds = len({r["seed"] for r in records})
    title = f"{data.name}: macro accuracy over domains (%), mean +- std over {n_seeds} seeds"
    label = slot_label(config)
    paths = write_outputs(
        records,
        summary,
        out,
        main_tau=config.main_tau,
        title=title,
        label=label,
        data=used,
        own_mix=own_mix,
    )
    print(f"{data.name}: macro accuracy over domains (%), mean over {n_seeds} seeds")
    print("centre, z-score: each client alone")
    if args.skew == "none":  # "none" is the skew drawn, not the clients' own mixes
        print(f"alpha none: no skew drawn; each client's label mix is the one {args.data} holds")
    print(f"\n{CASE_TITLES['own mix']}")
    print("SLOT = each client's domain offset, measured within classes, removed")
    print(format_short_table(own_mix))
    print(f"\n{CASE_TITLES['domain']}")
    print(f"SLOT = {label.removeprefix('SLOT ')}")
    print(format_short_table(summary))
    print(f"more (spreads, CORAL, bytes) in {paths['summary.md']}")
    if len({r["alpha"] for r in records}) == 1:  # one's own clients as they are: short
        for case, rows, slot in (("own mix", own_mix, OWN_MIX_LABEL), ("domain", summary, label)):
            print(f"\n{CLIENT_TABLE_TITLE}: {CASE_TITLES[case]}")
            print(format_client_table(rows, config.main_tau, slot))
    print("wrote " + ", ".join(paths.values()))
    for line in _warning_lines(caught):
        print(line, file=sys.stderr)
    return 0


def _settings(config: BenchmarkConfig) -> dict:
    """What a benchmark's records depend on besides the runs chosen (alphas, seeds) and
    the workers: the parts of a resumed benchmark must agree on it."""
    fields = dataclasses.asdict(config)
    for key in ("alphas", "seeds", "n_jobs"):
        fields.pop(key)
    return json.loads(json.dumps(fields))  # tuples as lists, as summary.json holds them


def _previous_records(out: str, used: dict) -> list[dict]:
    """The records of ``out``'s results.csv, if any, written with the same data and settings."""
    results = os.path.join(out, "results.csv")
    if not os.path.exists(results):
        return []
    with open(os.path.join(out, "summary.json")) as f:
        written = json.load(f).get("data", {})
    for key, now in used.items():
        if written.get(key) != now:
            raise ValueError(
                f"{out} holds a benchmark of other {key} ({written.get(key)!r}, now {now!r}); "
                "resume with the same data and settings, or choose another --out"
            )
    return read_records(results)
