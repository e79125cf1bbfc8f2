"""FedCGS's covariance and ridge: each setting judged in every cell against the reference.

The study of FedCGS's covariance.  :class:`skslot.heads.FedCGSClassifier` builds its head from
a shared covariance ``S`` (``covariance="total"``: of all rows about the global
mean, FedCGS's; ``"within"``: pooled within classes, classic LDA) with the
ridge ``S + shrinkage * (tr S / m) I``.  Every setting is compared with the
reference (total, 1e-3): ``covariance="total", shrinkage=1e-3``, a fixed
small ridge.  Settings:

* **fixed**: ``covariance`` in {total, within} x ``shrinkage`` in SHRINKAGES;
* **OAS**: ``covariance`` in {total, within} with ``shrinkage="oas"``, the
  library's automatic ridge (FedCGS's default, with ``covariance="total"``):
  the server computes the oracle approximating shrinkage intensity ``rho`` of
  the federation's own ``S`` from its ``N`` rows
  (:func:`skslot.ledoit_wolf.oas_shrinkage`; ``S`` and ``N`` come from
  FedCGS's statistics, so no new message) and uses the ridge
  ``rho / (1 - rho)``: the OAS covariance ``(1 - rho) S + rho (tr S / m) I``
  up to the overall factor ``1 / (1 - rho)``, which weighs the class prior a
  little less than OAS would.  Ledoit-Wolf's own intensity needs each row's
  fourth moment, which FedCGS's statistics do not hold: it would be a new
  message, so it is not measured;
* **the federation's choice** (measured beside the settings, not one of
  them): :class:`skslot.FederatedTauSearch` with
  ``head_grid={"covariance": [total, within], "shrinkage": SHRINKAGES}`` and
  ``tau`` held at the case's default (one candidate ``tau``): each client
  holds out 20 % of each class, the candidates are scored by the clients'
  balanced validation accuracy, the earliest candidate within one standard
  error of the best is chosen (the grid's order: total before within,
  shrinkage ascending, so the reference comes first) and refitted on all
  rows.  Nothing is chosen on pooled or test rows; the search's maps are
  those of each client's fitting rows (as the search deploys them).

Every head is fitted on the harness's runs (:func:`skslot_bench.evaluate_run`:
:func:`skslot.datasets.dirichlet_partition`, one client per domain, a 70/30
split per domain) and scored in both of its cases (:data:`skslot_bench.CASES`):
``"domain"``, the paper's (every class of each domain served, the heads on the
federation's label mix) and ``"own mix"`` (each client's test rows weighted to
its own training mix, the heads on each client's mix).  Features: raw (the
rows as they are) and behind SLOT with the harness's defaults for each case
(``SLOTTransformer(label_mix="federation")``, ``tau`` 0.6 scaled by each
client's label shift with the means moved fully, in the domain case;
``SLOTTransformer(label_mix="client")``, each client's domain offset measured
within classes, in the own-mix case).  Data: the embedded digits (256-d, a fixed
projection of the 1280-d features), the embedded Office-Caltech10 (800-d
SURF), the four hospitals of ``benchmarks/label_mix.py`` (its
``hospitals(seed)``) and, where ``../shared/data/digits_effnet_lite0.npz``
exists, the full 1280-d EfficientNet-Lite0 digits features, each at Dirichlet
alpha 0.1, 0.5 and none.  A cell is one (data, alpha, case, features); its
accuracy is the macro accuracy over domains, mean over seeds.

**The rule.**  Among all settings measured, fixed and OAS, other than the
reference itself (0 in every cell by definition), keep those that meet
(a) every cell is at least the reference - 0.5 points and (b) the mean gain
at alpha 0.1 in the paper's case behind SLOT is at least +3 points on the
1280-d digits and on Office-Caltech10 each (where the 1280-d digits are
absent, on the digits sets present; the report says so).  Of those, pick the
one whose worst cell loses least against the reference (worst differences
compared at 0.1 points), ties broken by the mean gain over all cells.  If no
setting meets (a) and (b), the pick is the one whose worst cell loses least
(the same comparison and ties) and the report says that none met (b).  The
gain in the same cell (alpha 0.1, paper's case, SLOT) on the embedded 256-d
digits is reported beside it for every setting; it is not part of (b).  The
federation's choice is reported by the same test, outside the pick.

Run (from the repository root)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/fedcgs_covariance.py

writes docs/results/fedcgs_covariance.md (``--out`` elsewhere) and prints it.
``--data``: the data sets, of embedded-digits, office-caltech10, hospitals,
digits-1280 (default: all that are available; the report names those skipped
and why); ``--seeds N``: seeds 0 .. N-1 (default 5); ``--data-seeds NAME=N``:
fewer seeds for one data set (the report says so); ``--jobs``: runs in
parallel (default 1, each run's BLAS on one thread); ``--shrinkages``: the
grid; ``--smoke``: one seed of the first data set (the embedded digits) at
alpha 0.1, printed only.  Each run (data set, alpha, seed) is kept in
``results/fedcgs_covariance/`` (ignored by git) and reused by later runs with
the same grid and the same library sources, so one data set can be rerun and
merged with the others' kept runs (``--fresh``: recompute all).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from label_mix import hospitals
from skslot_bench import (
    CASES,
    LABEL_MIX_SELECTION,
    BenchmarkConfig,
    accuracy_by_case,
    case_predictions,
    evaluate_run,
    training_mixes,
)
from threadpoolctl import threadpool_limits

from skslot import FederatedTauSearch, SLOTTransformer
from skslot.datasets import dirichlet_partition, load_dataset, load_npz
from skslot.defaults import TAU, default_tau
from skslot.heads import FedCGSClassifier
from skslot.selection import NoValidationRowsError

COVARIANCES = ("total", "within")
SHRINKAGES = (1e-3, 0.01, 0.05, 0.1, 0.2, 0.5)
#: The reference every setting is compared with: a fixed small ridge on the total covariance.
REFERENCE = ("total", 1e-3)
#: The data sets by their ``--data`` names, in the report's order.
DATA = ("embedded-digits", "office-caltech10", "hospitals", "digits-1280")
ALPHAS = (0.1, 0.5, None)
FEATURES = ("raw", "SLOT")
#: Each case's label mix (the heads' and SLOT's ``label_mix``).
CASE_MIX = {"domain": "federation", "own mix": "client"}
#: The harness's records of each case's default alignment: tau 0.6 (``label_mix="federation"``)
#: in the domain case, ``SLOTTransformer(label_mix="client")`` in the own-mix case.
SLOT_RECORDS = (("domain", "fixed"), ("own mix", LABEL_MIX_SELECTION))
CASE_NAMES = {"domain": "every class (paper's)", "own mix": "own mix"}
FEDERATION = "federation's choice"
#: The reference fitted on the federated search's maps (a diagnostic, not a setting).
SAME_MAPS = "reference, search's maps"
REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "results" / "fedcgs_covariance.md"
#: The full 1280-d digits features (``../shared/data`` beside the repository).
SHARED_DIGITS = REPO.parent / "shared" / "data" / "digits_effnet_lite0.npz"
#: Each run's result, kept for later runs to merge (``/results/`` is ignored by git).
CACHE = REPO / "results" / "fedcgs_covariance"
#: Bump when :func:`run`'s records change meaning: the kept runs are then recomputed.
RECORDS_VERSION = 1
#: What a kept run must match besides the grid: the library's and the harness's sources.
SOURCES = (
    sorted((REPO / "skslot").rglob("*.py"))
    + sorted((REPO / "benchmarks" / "skslot_bench").glob("*.py"))
    + [REPO / "benchmarks" / "label_mix.py"]
)


def name_of(covariance: str, shrinkage: float | str) -> str:
    """A candidate's column name: ``"total 0.001"``, ``"within OAS"``."""
    return f"{covariance} {shrinkage if isinstance(shrinkage, str) else f'{shrinkage:g}'}"


def unavailable(name: str) -> str | None:
    """Why the data set ``name`` cannot run here; ``None`` when it can."""
    if name == "digits-1280" and not SHARED_DIGITS.exists():
        return f"../shared/data/{SHARED_DIGITS.name} is absent"
    return None


def _load(name: str, seed: int):
    if name == "hospitals":
        return hospitals(seed)
    if name == "digits-1280":
        return load_npz(SHARED_DIGITS)
    return load_dataset("digits" if name == "embedded-digits" else name)


def _searched(data, X, alpha, seed, shrinkages) -> tuple[list[dict], list[dict], int]:
    """The federation's choice over ``head_grid``, per case and features, on the harness's
    partition; records, the choices, and how many searches could not choose."""
    part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
    keep = ~np.isin(part.train_client, part.empty_clients)
    train_rows, train_client = part.train_index[keep], part.train_client[keep]
    X_train, y_train = X[train_rows], data.y[train_rows]
    X_test, y_test = X[part.test_index], data.y[part.test_index]
    classes = np.unique(y_train)
    mixes = training_mixes(y_train, train_client, classes)
    grid = {"covariance": list(COVARIANCES), "shrinkage": list(shrinkages)}
    records, choices, failed = [], [], 0
    for case in CASES:
        mix = CASE_MIX[case]
        for features in FEATURES:
            if features == "raw":  # no transport: each map the identity
                slot, taus = SLOTTransformer(label_mix=mix, tau=0.0, mean_tau=0.0), (0.0,)
            else:  # the case's defaults
                slot, taus = SLOTTransformer(label_mix=mix), (default_tau(mix),)
            search = FederatedTauSearch(
                FedCGSClassifier(
                    covariance=REFERENCE[0], shrinkage=REFERENCE[1], label_mix=mix
                ),  # the grid sets both
                taus=taus,
                head_grid=grid,
                slot=slot,
                unknown_client="identity",
                random_state=seed,
            )
            try:
                search.fit(X_train, y_train, client=train_client)
            except NoValidationRowsError:
                failed += 1
                continue
            Z_test = search.slot_.transform(X_test, client=part.test_client)
            # the reference on the search's own maps (those of each client's fitting rows):
            # what the choice of the head's parameters alone adds, the maps held the same
            Z_train = search.slot_.transform(X_train, client=train_client)
            same_maps = FedCGSClassifier(
                covariance=REFERENCE[0], shrinkage=REFERENCE[1], label_mix=mix
            ).fit(Z_train, y_train, client=train_client)
            key = {"data": data.name, "alpha": alpha, "seed": seed, "case": case}
            for name, head in (
                (FEDERATION, search.best_estimator_.with_client_counts(mixes)),
                (SAME_MAPS, same_maps),
            ):
                by_case = accuracy_by_case(
                    case_predictions(head, Z_test, part.test_client),
                    y_test,
                    part.test_client,
                    part.client_domain,
                    mixes,
                    classes,
                )
                accuracy = 100 * float(np.mean(list(by_case[case].values())))
                records.append({**key, "features": features, "head": name, "accuracy": accuracy})
            params = search.best_params_
            chosen = name_of(params["covariance"], params["shrinkage"])
            choices.append({**key, "features": features, "chosen": chosen})
    return records, choices, failed


def run(name: str, alpha, seed: int, shrinkages) -> dict:
    """Every candidate on one (data, alpha, seed): macro accuracy per case and features."""
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # empty clients are counted below, not warned
        start, wall = time.process_time(), time.perf_counter()
        data = _load(name, seed)
        X = data.X.astype(np.float64)
        factories = {
            name_of(cov, s): (lambda seed, c=cov, r=s: FedCGSClassifier(covariance=c, shrinkage=r))
            for cov in COVARIANCES
            for s in shrinkages
        }
        for cov in COVARIANCES:
            factories[name_of(cov, "OAS")] = lambda seed, c=cov: FedCGSClassifier(
                covariance=c, shrinkage="oas"
            )
        config = BenchmarkConfig(
            alphas=(alpha,),
            taus=(0.0, TAU),
            seeds=(seed,),
            heads=tuple(factories),
            auto=False,
            baselines=False,
        )
        per_domain = evaluate_run(data, X, alpha, seed, config, factories)
        groups: dict[tuple, list[float]] = {}
        for r in per_domain:
            if r["selection"] == "fixed" and r["tau"] == 0.0:
                features = "raw"
            elif (r["case"], r["selection"]) in SLOT_RECORDS:
                features = "SLOT"  # the case's default alignment
            else:
                continue
            groups.setdefault((r["case"], features, r["head"]), []).append(r["accuracy"])
        records = [
            {
                "data": data.name,
                "alpha": alpha,
                "seed": seed,
                "case": case,
                "features": features,
                "head": head,
                "accuracy": 100 * float(np.mean(accuracies)),
            }
            for (case, features, head), accuracies in groups.items()
        ]
        searched, choices, failed = _searched(data, X, alpha, seed, shrinkages)
        part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
        return {
            "records": records + searched,
            "choices": choices,
            "failed": failed,
            "empty": len(part.empty_clients),
            "data": data.name,
            "option": name,
            "alpha": alpha,
            "seed": seed,
            "dim": int(X.shape[1]),
            "cpu": time.process_time() - start,
            "wall": time.perf_counter() - wall,
        }


def _sources_digest() -> str:
    """A digest of the sources a kept run depends on besides this script."""
    digest = hashlib.sha256(str(RECORDS_VERSION).encode())
    for path in SOURCES:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _kept_path(cache: Path, name: str, alpha, seed: int) -> Path:
    return cache / f"{name}_alpha-{_alpha(alpha)}_seed-{seed}.json"


def load_kept(cache: Path, name: str, alpha, seed: int, shrinkages, digest: str) -> dict | None:
    """A kept run with the same grid and sources, or ``None``."""
    path = _kept_path(cache, name, alpha, seed)
    if not path.exists():
        return None
    kept = json.loads(path.read_text())
    same = kept.get("sources") == digest and kept.get("shrinkages") == list(shrinkages)
    return kept["result"] if same else None


def keep(cache: Path, result: dict, shrinkages, digest: str) -> None:
    """Write one run's result for later runs to merge."""
    cache.mkdir(parents=True, exist_ok=True)
    path = _kept_path(cache, result["option"], result["alpha"], result["seed"])
    kept = {"sources": digest, "shrinkages": list(shrinkages), "result": result}
    path.write_text(json.dumps(kept))


def _alpha(alpha) -> str:
    return "none" if alpha is None else f"{alpha:g}"


def cell_means(records: list[dict]) -> dict[tuple, dict[str, float]]:
    """(data, alpha, case, features) to each head's mean accuracy over seeds."""
    groups: dict[tuple, dict[str, list[float]]] = {}
    for r in records:
        cell = (r["data"], _alpha(r["alpha"]), r["case"], r["features"])
        groups.setdefault(cell, {}).setdefault(r["head"], []).append(r["accuracy"])
    return {
        cell: {head: float(np.mean(v)) for head, v in heads.items()}
        for cell, heads in groups.items()
    }


def summary(
    cells: dict,
    heads: list[str],
    shown_sets: list[str],
    b_sets: list[str],
    reference: str | None = None,
) -> list[dict]:
    """Per head: worst difference to ``reference`` (default: the reference (total, 1e-3)),
    mean gain, the gains at alpha 0.1 in the paper's case behind SLOT on each of
    ``shown_sets``, and the rule's tests: (a) every cell >= -0.5, (b) each gain on
    ``b_sets`` >= +3 (not met where ``b_sets`` is empty)."""
    reference = reference or name_of(*REFERENCE)
    rows = []
    for head in heads:
        diffs = {
            cell: v[head] - v[reference]
            for cell, v in cells.items()
            if head in v and reference in v
        }
        worst_cell = min(diffs, key=diffs.get)
        gains = {data: diffs.get((data, "0.1", "domain", "SLOT")) for data in shown_sets}
        every = diffs[worst_cell] >= -0.5
        skew = bool(b_sets) and all(gains[n] is not None and gains[n] >= 3.0 for n in b_sets)
        rows.append(
            {
                "head": head,
                "worst": diffs[worst_cell],
                "worst_cell": worst_cell,
                "mean": float(np.mean(list(diffs.values()))),
                "n_cells": len(diffs),
                "gains": gains,
                "every": every,
                "skew": skew,
                "meets": every and skew,
            }
        )
    return rows


def _signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f}"


def _cell(cell: tuple) -> str:
    data, alpha, case, features = cell
    return f"{data}, alpha {alpha}, {CASE_NAMES[case]}, {features}"


def _seeds(n: int) -> str:
    return "0" if n == 1 else f"0-{n - 1}"


def _setting(head: str) -> str:
    """A setting's parameters: ``covariance="total", shrinkage="oas"``."""
    covariance, shrinkage = head.split()
    shrinkage = '"oas"' if shrinkage == "OAS" else shrinkage
    return f'covariance="{covariance}", shrinkage={shrinkage}'


def _library_default() -> str:
    """:class:`FedCGSClassifier`'s default setting, as a column name."""
    params = FedCGSClassifier().get_params()
    shrinkage = params["shrinkage"]
    return name_of(params["covariance"], "OAS" if shrinkage == "oas" else float(shrinkage))


def report(
    results: list[dict],
    shrinkages,
    n_seeds: int,
    seconds: float,
    jobs: int,
    skipped: dict[str, str],
    computed: int,
) -> str:
    """The markdown report over ``results`` (in the data sets' order); ``skipped``: the data
    sets left out and why; ``computed``: how many runs this invocation computed."""
    records = [r for res in results for r in res["records"]]
    cells = cell_means(records)
    reference = name_of(*REFERENCE)
    fixed = [name_of(c, s) for c in COVARIANCES for s in shrinkages]
    settings = fixed + [name_of(c, "OAS") for c in COVARIANCES]
    heads = [*settings, FEDERATION]
    shown_heads = [*heads, SAME_MAPS]
    names = list(dict.fromkeys(res["data"] for res in results))
    option = {res["data"]: res["option"] for res in results}
    label = {res["data"]: f"{res['data']} ({res['dim']}-d)" for res in results}
    seeds_of = {n: len({res["seed"] for res in results if res["data"] == n}) for n in names}
    digits = [n for n in names if "digits" in option[n]]
    full = [n for n in digits if option[n] == "digits-1280"]
    embedded = [n for n in digits if option[n] == "embedded-digits"]
    office = [n for n in names if option[n] == "office-caltech10"]
    shown_sets = digits + office
    b_sets = (full or digits) + office  # (b): the 1280-d digits, or the digits present
    rows = {r["head"]: r for r in summary(cells, heads, shown_sets, b_sets)}
    (same,) = summary(cells, [FEDERATION], shown_sets, b_sets, reference=SAME_MAPS)
    candidates = [h for h in settings if h != reference]  # the reference: 0 everywhere
    meeting = [h for h in candidates if rows[h]["meets"]]
    pick = max(meeting or candidates, key=lambda h: (round(rows[h]["worst"], 1), rows[h]["mean"]))
    p = rows[pick]
    library = _library_default()
    b_text = " and ".join(label[n] for n in b_sets) or "no data set in this study"
    b_notes = []
    if not full:
        why = skipped.get("digits-1280", "not in this run")
        b_notes.append(
            f"the 1280-d digits are not in this study ({why}): (b) uses "
            + (" and ".join(label[n] for n in digits) or "no digits set")
        )
    if not office:
        b_notes.append("Office-Caltech10 is not in this study: (b) has no Office-Caltech10 gain")
    if not b_sets:
        b_notes.append("no setting can meet (b)")
    yes = {True: "yes", False: "no"}
    # the embedded digits' place in (b): beside it, unless the 1280-d digits are absent
    beside = "not in (b)" if not embedded or embedded[0] not in b_sets else "in (b) here"

    def gains_text(r: dict, sets: list[str]) -> str:
        return ", ".join(f"{_signed(r['gains'][n])} on {label[n]}" for n in sets)

    out = ["# FedCGS: covariance and ridge against the reference (total, 1e-3)", ""]
    out.append(
        f"**The rule's pick: {pick}** (`{_setting(pick)}`; FedCGSClassifier's default, "
        f"`{_setting(library)}`, "
        + ("is this setting" if library == pick else f"is {library}, not the pick")
        + ")."
    )
    out += [
        "",
        f"- worst cell against the reference: {p['worst']:+.2f} ({_cell(p['worst_cell'])})",
        f"- mean gain over all {p['n_cells']} cells: {p['mean']:+.2f}",
        "- gain at alpha 0.1 in the paper's case behind SLOT: "
        + (gains_text(p, b_sets) + " (in (b))" if b_sets else "no (b) set")
        + (
            f"; {gains_text(p, embedded)} (not in (b))"
            if embedded and embedded[0] not in b_sets
            else ""
        ),
        f"- (a) every cell >= the reference - 0.5: {yes[p['every']]}; (b) +3 on "
        f"{b_text} each: {yes[p['skew']]}"
        + ("" if meeting else " (no setting meets (a) and (b): picked by (a)'s worst cell alone)"),
        "- settings that meet (a) and (b): " + (", ".join(meeting) if meeting else "none"),
    ]
    if embedded:
        best = max(candidates, key=lambda h: rows[h]["gains"][embedded[0]] or -np.inf)
        reach = [h for h in candidates if (rows[h]["gains"][embedded[0]] or -np.inf) >= 3.0]
        out.append(
            f"- the same cell on {label[embedded[0]]} ({beside}): "
            + (f"{', '.join(reach)} reach(es) +3" if reach else "no setting reaches +3")
            + f" (the most: {best}, {_signed(rows[best]['gains'][embedded[0]])})"
        )
    out += [f"- note: {note}" for note in b_notes]
    out.append("")
    out += [__doc__.split("\n\n", 1)[1].split("\nRun (from", 1)[0].strip(), ""]
    cpu = sum(res["cpu"] for res in results)
    run_wall = sum(res["wall"] for res in results)
    empty = sum(res["empty"] for res in results)
    failed = sum(res["failed"] for res in results)
    fewer = [f"{label[n]}: seeds {_seeds(seeds_of[n])}" for n in names if seeds_of[n] < n_seeds]
    seeds = f"Seeds {_seeds(n_seeds)}" + (
        f" ({'; '.join(fewer)}, fewer by --data-seeds to bound the run time)" if fewer else ""
    )
    per_data = ", ".join(
        f"{label[n]} {sum(res['wall'] for res in results if res['data'] == n):.0f} s" for n in names
    )
    out += [
        f"Data sets: {', '.join(label[n] for n in names)}; skipped: "
        + ("; ".join(f"{k} ({why})" for k, why in skipped.items()) if skipped else "none")
        + ".",
        "",
        f"{seeds}; shrinkage grid {', '.join(f'{s:g}' for s in shrinkages)}; "
        f"{len(results)} runs ({computed} computed in this invocation, {seconds:.0f} s wall on "
        f"{jobs} worker(s) with one BLAS thread each; {len(results) - computed} kept from "
        f"earlier invocations with the same grid and sources).  The runs' own times: "
        f"{run_wall:.0f} s wall ({per_data}), {cpu:.0f} CPU s.  Clients the skew left without "
        f"training rows: {empty} (their test rows scored unaligned, as the harness does); "
        f"searches that could not choose (no validation rows): {failed}.",
        "",
        "## Summary: each setting against the reference (total, 1e-3)",
        "",
        "Differences in points of macro accuracy, over all "
        f"{len(cells)} cells (data x alpha x case x features); the columns after the mean gain: "
        "the mean gain at alpha 0.1 in the paper's case behind SLOT; (a): every cell >= the "
        f"reference - 0.5; (b): +3 on {b_text} each.",
        "",
        "| setting | worst cell | where | mean gain | "
        + " | ".join(
            f"{label[n]}, 0.1, paper's, SLOT" + ("" if n in b_sets else " (not in (b))")
            for n in shown_sets
        )
        + " | (a) every cell >= -0.5 | (b) each >= +3 | meets (a) and (b) |",
        "|---|---|---|---|" + "---|" * len(shown_sets) + "---|---|---|",
    ]
    for head, r in [(head, rows[head]) for head in heads] + [(SAME_MAPS, same)]:
        if head == SAME_MAPS:
            name = "federation's choice against the reference on the search's maps (*)"
        elif head == FEDERATION:
            name = f"{head} (not a setting of the rule)"
        else:
            tags = [t for h, t in ((reference, "the reference"), (pick, "the pick")) if h == head]
            name = head + "".join(f" ({t})" for t in tags)
        where = "-" if head == reference else _cell(r["worst_cell"])
        gains = " | ".join(_signed(g) for g in r["gains"].values())
        out.append(
            f"| {name} | {r['worst']:+.2f} | {where} | {r['mean']:+.2f} | {gains} | "
            f"{yes[r['every']]} | {yes[r['skew']]} | {yes[r['meets']]} |"
        )
    out += [
        "",
        "(*) The federated search deploys the maps of each client's fitting rows (80 %), the "
        "settings the maps of all their training rows; this row holds the maps the same (the "
        "reference refitted on the search's aligned rows) and so measures the choice of the "
        "head's parameters alone.  It is a diagnostic, not a setting.",
    ]
    out += ["", "## The rule's outcome", ""]
    if meeting:
        text = (
            f"Settings that meet (a) and (b): {', '.join(meeting)}.  Of these, the one whose "
            f"worst cell loses least is **{pick}** (`{_setting(pick)}`)"
        )
    else:
        text = (
            "No setting meets (a) and (b).  By (a)'s worst cell alone the pick is "
            f"**{pick}** (`{_setting(pick)}`)"
        )
    out.append(
        text + f": worst cell {p['worst']:+.2f} ({_cell(p['worst_cell'])}), mean gain "
        f"{p['mean']:+.2f}; at alpha 0.1 in the paper's case behind SLOT "
        f"{gains_text(p, shown_sets)}.  (a): {yes[p['every']]}; (b): {yes[p['skew']]}."
    )
    if p["worst"] <= -0.005:  # below the reference as printed
        out.append(
            f"(Its worst cell is below the reference by {-p['worst']:.2f}: the reference, "
            "worst 0 by definition, loses no cell to itself and gains nothing, so it cannot "
            "meet (b).)"
        )
    for note in b_notes:
        out += ["", f"Note: {note}."]
    if embedded:
        n = embedded[0]
        reach = [h for h in candidates if (rows[h]["gains"][n] or -np.inf) >= 3.0]
        out += [
            "",
            f"On {label[n]} ({beside}) the gains in the same cell: "
            + ", ".join(f"{h} {_signed(rows[h]['gains'][n])}" for h in candidates)
            + ".  "
            + (
                f"{', '.join(reach)} reach(es) +3 there."
                if reach
                else "No setting reaches +3 there."
            ),
        ]
    f = rows[FEDERATION]
    out.append("")
    out.append(
        f"The federation's choice (head_grid, not a setting of the rule): worst cell "
        f"{f['worst']:+.2f} ({_cell(f['worst_cell'])}), mean gain {f['mean']:+.2f}, "
        f"{gains_text(f, shown_sets)} at alpha 0.1 in the paper's case behind SLOT: it "
        + ("meets" if f["meets"] else "does not meet")
        + " (a) and (b)."
        f"  Against the reference on its own maps: worst cell {same['worst']:+.2f} "
        f"({_cell(same['worst_cell'])}), mean gain {same['mean']:+.2f}, "
        f"{gains_text(same, shown_sets)}."
    )
    out += [
        "",
        f"FedCGSClassifier's default is `{_setting(library)}` ({library}); "
        + (
            "it is the rule's pick."
            if library == pick
            else f"the rule picks {pick}; "
            + (
                "the default's row in the summary gives its numbers."
                if library in rows
                else "the default is not among the settings measured here."
            )
        ),
        "",
    ]

    out += ["## Mean accuracy per cell (%)", ""]
    out.append(
        "Macro accuracy over domains, mean over the data set's seeds; columns: covariance and "
        "shrinkage; 'OAS': shrinkage=\"oas\"; then the federation's choice, and the reference "
        "on the search's maps (*)."
    )
    for data in names:
        out += ["", f"### {label[data]}", "", f"Seeds {_seeds(seeds_of[data])}.", ""]
        out.append("| alpha | case | features | " + " | ".join(shown_heads) + " |")
        out.append("|---|---|---|" + "---|" * len(shown_heads))
        for alpha in ("0.1", "0.5", "none"):
            for case in CASES:
                for features in FEATURES:
                    v = cells.get((data, alpha, case, features))
                    if v is None:
                        continue
                    shown = [f"{v[h]:.1f}" if h in v else "-" for h in shown_heads]
                    out.append(
                        f"| {alpha} | {CASE_NAMES[case]} | {features} | " + " | ".join(shown) + " |"
                    )
    out += ["", "## What the federation chose", ""]
    out.append("Chosen (covariance, shrinkage), times over the seeds, per cell.")
    out += ["", "| data | alpha | case | features | chosen |", "|---|---|---|---|---|"]
    chosen: dict[tuple, Counter] = {}
    for res in results:
        for c in res["choices"]:
            cell = (c["data"], _alpha(c["alpha"]), c["case"], c["features"])
            chosen.setdefault(cell, Counter())[c["chosen"]] += 1
    for cell in sorted(chosen, key=lambda c: (names.index(c[0]), c[1], c[2], c[3])):
        data, alpha, case, features = cell
        text = ", ".join(f"{k} x{n}" for k, n in chosen[cell].most_common())
        out.append(f"| {label[data]} | {alpha} | {CASE_NAMES[case]} | {features} | {text} |")
    return "\n".join(out) + "\n"


def _data_seeds(text: str) -> tuple[str, int]:
    name, _, n = text.partition("=")
    if name not in DATA or not n.isdigit() or int(n) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=N with NAME one of {', '.join(DATA)}")
    return name, int(n)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--data",
        nargs="+",
        choices=DATA,
        default=None,
        help="the data sets (default: all that are available)",
    )
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default 5)")
    parser.add_argument(
        "--data-seeds",
        nargs="+",
        type=_data_seeds,
        default=[],
        metavar="NAME=N",
        help="seeds 0 .. N-1 for the data set NAME (fewer than --seeds: said in the report)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (default 1)")
    parser.add_argument(
        "--shrinkages",
        type=lambda s: tuple(float(v) for v in s.split(",")),
        default=SHRINKAGES,
        help="comma-separated ridge grid (must include 0.001, the reference's)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="one seed of the first data set at 0.1"
    )
    parser.add_argument("--out", type=Path, default=None, help=f"the report (default {OUT})")
    parser.add_argument(
        "--cache", type=Path, default=CACHE, help=f"the kept runs (default {CACHE})"
    )
    parser.add_argument("--fresh", action="store_true", help="recompute the kept runs")
    args = parser.parse_args(argv)
    if REFERENCE[1] not in args.shrinkages:
        parser.error("--shrinkages must include 0.001 (the reference's ridge)")
    requested = args.data or DATA
    skipped = {d: "not in --data" for d in DATA if d not in requested}
    skipped |= {d: why for d in requested if (why := unavailable(d)) is not None}
    names = [d for d in DATA if d in requested and d not in skipped]
    if not names:
        parser.error("no data set to run: " + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    for d, why in skipped.items():
        print(f"skipping {d}: {why}", file=sys.stderr)
    seeds_of = {d: args.seeds for d in names} | {d: n for d, n in args.data_seeds if d in names}
    if args.smoke:
        runs, out, cache = [(names[0], 0.1, 0)], args.out, None
    else:
        runs = [(d, a, s) for d in names for a in ALPHAS for s in range(seeds_of[d])]
        out, cache = args.out or OUT, args.cache
    digest = _sources_digest()
    start = time.perf_counter()
    kept, todo = {}, []
    for d, a, s in runs:
        result = None
        if cache is not None and not args.fresh:
            result = load_kept(cache, d, a, s, args.shrinkages, digest)
        if result is None:
            todo.append((d, a, s))
        else:
            kept[d, a, s] = result
    todo.sort(key=lambda r: r[0] != "digits-1280")  # the longest runs first: even workers
    print(f"{len(kept)} runs kept, {len(todo)} to compute", file=sys.stderr, flush=True)
    jobs = [delayed(run)(d, a, s, args.shrinkages) for d, a, s in todo]
    computed = {}
    for done, result in enumerate(Parallel(n_jobs=args.jobs, return_as="generator")(jobs), 1):
        computed[result["option"], result["alpha"], result["seed"]] = result
        if cache is not None:
            keep(cache, result, args.shrinkages, digest)
        print(
            f"[{done}/{len(jobs)}] {result['option']}, alpha {_alpha(result['alpha'])}, "
            f"seed {result['seed']}: {result['wall']:.0f} s "
            f"({time.perf_counter() - start:.0f} s in all)",
            file=sys.stderr,
            flush=True,
        )
    seconds = time.perf_counter() - start
    results = [kept.get(key) or computed[key] for key in runs]
    text = report(results, args.shrinkages, args.seeds, seconds, args.jobs, skipped, len(todo))
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
