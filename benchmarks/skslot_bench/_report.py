"""The benchmark's report: its records summed up, its tables, plot and files."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._cases import CASE_TITLES
from ._run import (
    BASELINES,
    CLIENT_TABLE_TITLE,
    LABEL_MIX_SELECTION,
    OWN_MIX_LABEL,
    BenchmarkConfig,
)

__all__ = [
    "format_client_table",
    "format_short_table",
    "format_table",
    "macro_accuracies",
    "plot_tau_sweep",
    "read_records",
    "slot_label",
    "summarise",
    "write_outputs",
]


#: The records' fields that hold integers and floats where they hold anything (the
#: others are text; ``alpha`` is ``"none"`` or a float; ``head_bytes`` is empty where a
#: head sends nothing of its own).
_INTEGER_FIELDS = (
    "seed", "n_train", "n_test", "n_clients", "n_empty_clients", "barycenter_iterations",
    "summary_bytes", "head_bytes",
)  # fmt: skip
_FLOAT_FIELDS = ("tau", "accuracy", "slot_cpu_seconds")


def read_records(path: str | os.PathLike) -> list[dict]:
    """The records of a results.csv (:func:`write_outputs`), with their numbers as numbers.

    Parameters
    ----------
    path : str or path-like
        A results.csv written by :func:`write_outputs` (``skslot bench``).

    Returns
    -------
    records : list of dict
        As :func:`~skslot_bench.run_benchmark` returned them.

    Raises
    ------
    ValueError
        If a record lacks a field of the benchmark's records or holds text where a
        number belongs (naming the line).

    Examples
    --------
    >>> import csv, os, tempfile
    >>> from skslot_bench import read_records
    >>> record = {"dataset": "d", "case": "domain", "alpha": "none", "seed": 0, "tau": 0.4,
    ...           "head": "FedCGS", "accuracy": 0.9, "head_bytes": 120, "summary_bytes": 64}
    >>> path = os.path.join(tempfile.mkdtemp(), "results.csv")
    >>> with open(path, "w", newline="") as f:
    ...     writer = csv.DictWriter(f, fieldnames=list(record))
    ...     _ = writer.writeheader(), writer.writerow(record)
    >>> read_records(path)[0]["tau"], read_records(path)[0]["alpha"]
    (0.4, 'none')
    """
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    records = []
    for line, row in enumerate(rows, 2):
        try:
            record: dict[str, Any] = dict(row)
            for key in ("alpha", "seed", "tau", "accuracy"):
                if row.get(key) in (None, ""):
                    raise ValueError(f"no {key!r}")
            if row["alpha"] != "none":
                record["alpha"] = float(row["alpha"])
            for key in _INTEGER_FIELDS:
                if row.get(key) not in (None, ""):
                    record[key] = int(float(row[key]))
            for key in _FLOAT_FIELDS:
                if row.get(key) not in (None, ""):
                    record[key] = float(row[key])
        except ValueError as exc:
            raise ValueError(f"{path}, line {line}: not a benchmark record ({exc})") from None
        records.append(record)
    return records


def macro_accuracies(records: list[dict], selection: str = "fixed") -> dict[tuple, float]:
    """Macro accuracy over domains per (alpha, head, tau, seed) of one kind of record.

    For ``selection="auto"`` the key's tau is the one the federation chose.

    Parameters
    ----------
    records : list of dict
        The records of :func:`~skslot_bench.run_benchmark`.
    selection : str, default="fixed"
        The kind of record (its ``selection``: ``"fixed"``, ``"auto"``, a
        baseline's name, ...).

    Returns
    -------
    dict of tuple to float
        By ``(alpha, head, tau, seed)``, the mean over domains of the accuracy.
    """
    groups: dict[tuple, list[float]] = {}
    for r in records:
        if r.get("selection", "fixed") == selection:
            key = (r["alpha"], r["head"], r["tau"], r["seed"])
            groups.setdefault(key, []).append(r["accuracy"])
    return {key: float(np.mean(v)) for key, v in groups.items()}


def summarise(records: list[dict], main_tau: float, case: str = "domain") -> list[dict]:
    """Per (alpha, head): accuracy without SLOT, at ``main_tau``, best fixed tau, auto.

    ``case`` is how the federation is judged (:data:`CASES`): in the
    ``"domain"`` case SLOT is the sweep's ``main_tau``; in the ``"own mix"``
    case it is the alignment that keeps each client's label mix (the records
    of :data:`LABEL_MIX_SELECTION`), and the spreads, bytes and per-client
    figures are the same kind of figures of that case.

    Mean and standard deviation over seeds of the macro accuracy (in %), the
    gain, the best tau of the sweep (``best_fixed``: its accuracy), the
    federated choice (``auto``, with the taus chosen per seed, when the
    records have it), the spread across domains (standard deviation of the
    seed-averaged per-domain accuracies), and the bytes each client sends at
    ``main_tau``: its head statistics (``head_bytes``, as Flower counts them)
    and its SLOT summary (``summary_bytes``, float32).  ``per_client``: by
    client (the records' ``domain``), its test rows (``n_test``) and its
    accuracy without SLOT and at ``main_tau`` (mean and standard deviation
    over seeds, in %).  Where the records have the baselines, ``centre``,
    ``z_score`` and ``coral`` (with their ``_std``) are theirs.

    Parameters
    ----------
    records : list of dict
        The records of :func:`run_benchmark`.
    main_tau : float
        The ``tau`` reported as "with SLOT"; one of the sweep's.
    case : {"domain", "own mix"}, default="domain"

    Returns
    -------
    summary : list of dict
        One row per (alpha, head), in the records' order.
    """
    records = [r for r in records if r.get("case", "domain") == case]
    macro = macro_accuracies(records)
    for kind in (LABEL_MIX_SELECTION, *BASELINES):  # each at a key of its own, for seeds_at
        found = macro_accuracies(records, kind)
        macro.update({(a, h, kind, s): v for (a, h, _, s), v in found.items()})
    # the federated choice runs the domain case's alignment: shown in that case alone
    kinds = ("auto", "auto-norefit") if case == "domain" else ()
    auto_macro = {kind: macro_accuracies(records, kind) for kind in kinds}
    rows = []
    alphas = list(dict.fromkeys(r["alpha"] for r in records))
    heads = list(dict.fromkeys(r["head"] for r in records))
    taus = sorted({r["tau"] for r in records if r.get("selection", "fixed") == "fixed"})
    for alpha in alphas:
        for head in heads:

            def seeds_at(tau: float | str, alpha: Any = alpha, head: str = head) -> np.ndarray:
                return 100 * np.array(
                    [v for (a, h, t, _), v in macro.items() if (a, h, t) == (alpha, head, tau)]
                )

            def fixed(tau: Any, alpha: Any = alpha, head: str = head) -> list[dict]:
                """The fixed-tau records of this (alpha, head) at ``tau`` (or SLOT's own)."""
                selection = LABEL_MIX_SELECTION if tau == LABEL_MIX_SELECTION else "fixed"
                return [
                    r
                    for r in records
                    if (r["alpha"], r["head"], r.get("selection", "fixed"))
                    == (alpha, head, selection)
                    and (selection != "fixed" or r["tau"] == tau)
                ]

            def per_domain(tau: float | str) -> dict[str, np.ndarray]:
                """Accuracy (%) of each domain at ``tau``, one value per seed."""
                found: dict[str, list[float]] = {}
                for r in fixed(tau):
                    found.setdefault(r["domain"], []).append(100 * r["accuracy"])
                return {domain: np.array(v) for domain, v in found.items()}

            def domain_spread(tau: float | str) -> float:
                return float(np.std([v.mean() for v in per_domain(tau).values()]))

            def bytes_at(tau: float | str, key: str) -> list:
                return [float(r[key]) for r in fixed(tau) if r.get(key, "") != ""] or [np.nan]

            slot_key = main_tau if case == "domain" else LABEL_MIX_SELECTION
            base, slot = seeds_at(0.0), seeds_at(slot_key)
            sweep = {tau: float(seeds_at(tau).mean()) for tau in taus}
            best_tau = max(sweep, key=lambda tau: sweep[tau])
            row = {
                "alpha": alpha,
                "head": head,
                "without_slot": float(base.mean()),
                "without_slot_std": float(base.std()),
                "with_slot": float(slot.mean()),
                "with_slot_std": float(slot.std()),
                "gain": float(slot.mean() - base.mean()),
                "best_tau": best_tau,
                "best_fixed": sweep[best_tau],
                "spread_without": domain_spread(0.0),
                "spread_with": domain_spread(slot_key),
                "head_bytes": float(np.mean(bytes_at(slot_key, "head_bytes"))),
                "summary_bytes": float(np.mean(bytes_at(slot_key, "summary_bytes"))),
                "tau_sweep": sweep,
                "n_seeds": int(base.shape[0]),
                "per_client": _per_client(fixed(0.0), per_domain(0.0), per_domain(slot_key)),
            }
            for name in BASELINES:
                values = seeds_at(name)
                if values.size:
                    key = name.lower().replace("-", "_")
                    row[key], row[f"{key}_std"] = float(values.mean()), float(values.std())
            for kind, key in (("auto", "auto"), ("auto-norefit", "auto_norefit")):
                if kind not in auto_macro:
                    continue
                chosen = sorted(
                    (seed, tau, v)
                    for (a, h, tau, seed), v in auto_macro[kind].items()
                    if (a, h) == (alpha, head)
                )
                if chosen:
                    values = 100 * np.array([v for _, _, v in chosen])
                    row[key] = float(values.mean())
                    row[f"{key}_std"] = float(values.std())
                    row[f"{key}_taus"] = [tau for _, tau, _ in chosen]
            rows.append(row)
    return rows


def _per_client(records: list[dict], without: dict, with_slot: dict) -> dict[str, dict]:
    """Each client's test rows and accuracy without SLOT and at the main tau."""
    n_test = {r["domain"]: r.get("n_test", "") for r in records}
    return {
        client: {
            "n_test": n_test[client],
            "without_slot": float(values.mean()),
            "without_slot_std": float(values.std()),
            "with_slot": float(with_slot[client].mean()),
            "with_slot_std": float(with_slot[client].std()),
            "gain": float(with_slot[client].mean() - values.mean()),
        }
        for client, values in without.items()
        if client in with_slot
    }


def format_client_table(summary: list[dict], main_tau: float, label: str | None = None) -> str:
    """A markdown table of the accuracy per client, without SLOT and with it.

    Parameters
    ----------
    summary : list of dict
        :func:`summarise`'s rows, of one case.
    main_tau : float
        The ``tau`` reported as "with SLOT".
    label : str, optional
        The SLOT column's heading (default ``"SLOT (tau=<main_tau>)"``).

    Returns
    -------
    str
    """
    label = label or f"SLOT (tau={main_tau:g})"
    lines = [
        f"| alpha | head | client | test rows | without SLOT | {label} | gain |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in summary:
        for client, c in r.get("per_client", {}).items():
            cells = [
                str(r["alpha"]),
                r["head"],
                client,
                str(c["n_test"]),
                f"{c['without_slot']:.2f} +- {c['without_slot_std']:.2f}",
                f"{c['with_slot']:.2f} +- {c['with_slot_std']:.2f}",
                f"{c['gain']:+.2f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def slot_label(config: BenchmarkConfig) -> str:
    """The SLOT column's heading: its tau and, where set, how each client's fractions follow.

    Parameters
    ----------
    config : BenchmarkConfig
        The benchmark's configuration: its ``main_tau``, ``client_tau``,
        ``mean_tau`` and ``summary_covariance``.

    Returns
    -------
    label : str
        ``"SLOT (tau=...)"``, with the settings that differ from the paper's.

    Examples
    --------
    >>> slot_label(BenchmarkConfig(main_tau=0.4, mean_tau=None, client_tau="uniform"))
    'SLOT (tau=0.4)'
    >>> slot_label(BenchmarkConfig(main_tau=0.6, mean_tau=1.0, client_tau="label-shift"))
    'SLOT (tau=0.6, label-shift, mean_tau=1)'
    """
    parts = [f"tau={config.main_tau:g}"]
    if config.client_tau != "uniform":
        parts.append(config.client_tau)
    if config.mean_tau is not None:
        parts.append(f"mean_tau={config.mean_tau:g}")
    if config.summary_covariance != "total":
        parts.append(f"{config.summary_covariance} covariance")
    return f"SLOT ({', '.join(parts)})"


def _mean_std(r: dict, key: str) -> str:
    return f"{r[key]:.2f} +- {r[key + '_std']:.2f}"


def format_table(summary: list[dict], main_tau: float, label: str | None = None) -> str:
    """A markdown table in the layout of the paper's Table 1, with the baselines and auto.

    Where the summary has the baselines, they stand beside "without SLOT",
    and "SLOT - centre" gives SLOT's gain over each client's own centring.

    Parameters
    ----------
    summary : list of dict
        The rows of :func:`summarise`.
    main_tau : float
        The ``tau`` the summary reports as "with SLOT".
    label : str, default=None
        The SLOT column's heading (``None``: ``SLOT (tau=main_tau)``;
        :func:`slot_label` names the whole configuration).

    Returns
    -------
    table : str
        The markdown table, one line per row of ``summary``.
    """
    auto = any("auto" in r for r in summary)
    baselines = all("centre" in r for r in summary)
    shown = ["centre", "z-score", "CORAL"] if baselines else []
    columns = ["alpha", "head", "without SLOT", *shown]
    columns += [label or f"SLOT (tau={main_tau:g})", "gain"]
    columns += ["SLOT - centre"] if baselines else []
    columns += ["best fixed tau"] + (["auto (taus chosen)"] if auto else [])
    columns += ["domain spread (without -> with)", "KB per client (head + SLOT summary)"]
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join(["---"] * len(columns)) + " |"]
    for r in summary:
        cells = [str(r["alpha"]), r["head"], _mean_std(r, "without_slot")]
        cells += [_mean_std(r, name.lower().replace("-", "_")) for name in shown]
        cells += [_mean_std(r, "with_slot"), f"{r['gain']:+.2f}"]
        if baselines:
            cells.append(f"{r['with_slot'] - r['centre']:+.2f}")
        cells.append(f"{r['best_fixed']:.2f} ({r['best_tau']:g})")
        if auto:
            taus = ",".join(f"{t:g}" for t in r.get("auto_taus", []))
            cells.append(f"{r['auto']:.2f} +- {r['auto_std']:.2f} ({taus})" if "auto" in r else "")
        cells.append(f"{r['spread_without']:.1f} -> {r['spread_with']:.1f}")
        cells.append(f"{r['head_bytes'] / 1e3:.1f} + {r['summary_bytes'] / 1e3:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_short_table(summary: list[dict], label: str = "SLOT") -> str:
    """The printed table: mean accuracy per row, SLOT beside what each client does alone.

    One decimal, means over seeds; the full table (spreads, CORAL, the best
    fixed tau, bytes) is :func:`format_table`'s, in summary.md.  "SLOT - best
    alone" is SLOT's gain over the better of each client's own centring and
    z-scoring, where the summary has them.

    Parameters
    ----------
    summary : list of dict
        The rows of :func:`summarise`.
    label : str, default="SLOT"
        The SLOT column's heading.

    Returns
    -------
    table : str
        A markdown table, one line per row of ``summary``.
    """
    alone = all("centre" in r for r in summary)
    auto = any("auto" in r for r in summary)
    columns = ["alpha", "head", "without SLOT"] + (["centre", "z-score"] if alone else [])
    columns += [label] + (["SLOT - best alone"] if alone else []) + (["auto"] if auto else [])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in summary:
        cells = [str(r["alpha"]), r["head"], f"{r['without_slot']:.1f}"]
        if alone:
            cells += [f"{r['centre']:.1f}", f"{r['z_score']:.1f}"]
        cells.append(f"{r['with_slot']:.1f}")
        if alone:
            cells.append(f"{r['with_slot'] - max(r['centre'], r['z_score']):+.1f}")
        if auto:
            cells.append(f"{r['auto']:.1f}" if "auto" in r else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_tau_sweep(summary: list[dict], path: str, name: str) -> None:
    """Mean accuracy over seeds against tau, one panel per head, one line per alpha.

    Parameters
    ----------
    summary : list of dict
        :func:`summarise`'s rows.
    path : str
        The image file to write (PNG; needs matplotlib).
    name : str
        The data set's name, in the title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = list(dict.fromkeys(r["head"] for r in summary))
    fig, axes = plt.subplots(1, len(heads), figsize=(4.2 * len(heads), 3.4), squeeze=False)
    for ax, head in zip(axes[0], heads, strict=True):
        for r in (r for r in summary if r["head"] == head):
            taus = sorted(r["tau_sweep"])
            ax.plot(
                taus, [r["tau_sweep"][t] for t in taus], marker="o", label=f"alpha={r['alpha']}"
            )
        ax.set_title(head)
        ax.set_xlabel("tau")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("macro accuracy over domains (%)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(f"{name}: macro accuracy over domains against tau (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(
    records: list[dict],
    summary: list[dict],
    out_dir: str,
    *,
    main_tau: float,
    title: str,
    label: str | None = None,
    data: Mapping[str, object] | None = None,
    own_mix: list[dict] | None = None,
) -> dict[str, str]:
    """Write results.csv, summary.json, summary.md (titled ``title``) and tau_sweep.png.

    summary.json holds ``{"data": data, "rows": summary}``: what was run on
    (the data set's name, its feature columns, ...) and the summary's rows.

    summary.md holds the table of :func:`format_table` (its SLOT column headed
    ``label``), then the accuracy per client (:func:`format_client_table`).

    Parameters
    ----------
    records : list of dict
        The records of :func:`run_benchmark`, written to results.csv.
    summary : list of dict
        The rows of :func:`summarise`, written to summary.json, summary.md and
        tau_sweep.png.
    out_dir : str
        The folder, created if needed; existing files are overwritten.
    main_tau : float
        The ``tau`` the summary reports as "with SLOT".
    title : str
        The heading of summary.md.
    label : str, default=None
        The SLOT column's heading (see :func:`format_table`).
    data : mapping, optional
        What the run used, written to summary.json (e.g. ``{"name": ...,
        "features": [...]}``).
    own_mix : list of dict, optional
        The rows of :func:`summarise` in the ``"own mix"`` case, written
        beside (summary.md's first table, summary.json's ``own_mix_rows``).

    Returns
    -------
    paths : dict of str to str
        Each file's path, by its name.
    """
    os.makedirs(out_dir, exist_ok=True)
    paths = {
        name: os.path.join(out_dir, name)
        for name in ("results.csv", "summary.json", "summary.md", "tau_sweep.png")
    }
    with open(paths["results.csv"], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    with open(paths["summary.json"], "w") as f:
        rows = {"data": dict(data or {}), "rows": summary}
        if own_mix is not None:
            rows["own_mix_rows"] = own_mix
        json.dump(rows, f, indent=1)
    with open(paths["summary.md"], "w") as f:
        f.write(f"# {title}\n\n")
        if own_mix is not None:
            own_mix_table = format_table(own_mix, main_tau, OWN_MIX_LABEL)
            f.write(f"## {CASE_TITLES['own mix']}\n\n{own_mix_table}\n\n")
            f.write(f"## {CASE_TITLES['domain']}\n\n")
        f.write(f"{format_table(summary, main_tau, label)}\n\n")
        if own_mix is not None:
            f.write(f"## {CLIENT_TABLE_TITLE}: {CASE_TITLES['own mix']}\n\n")
            f.write(f"{format_client_table(own_mix, main_tau, OWN_MIX_LABEL)}\n\n")
        f.write(f"## {CLIENT_TABLE_TITLE}: {CASE_TITLES['domain']}\n\n")
        f.write(f"{format_client_table(summary, main_tau, label)}\n")
    plot_tau_sweep(summary, paths["tau_sweep.png"], records[0]["dataset"])
    return paths
