"""What SLOT adds over a client alone: the baselines and the map's two parts.

For each data set, alpha and seed the paper's protocol (one client per
domain, 70/30 split per domain, Dirichlet label skew) is partitioned once;
every head (O-FedAvg, FedCGS, FedPFT) is then trained on the clients'
training rows

* as they are (``none``), centred by each client's own mean (``centre``) or
  standardised by its own mean and standard deviation (``z-score``): the
  baselines that need no federation (:class:`skslot.ClientStandardScaler`);
* aligned by SLOT on the whole grid of the map's two fractions, the mean's
  (``mean_tau``) and the covariance's (``tau``), each in {0, 0.2, ..., 1}:
  the paper's geodesic is the diagonal, CORAL-style covariance alignment the
  point (0, 1), centring on the reference mean the point (1, 0);
* with the label-shift rule at tau = 0.3 (``client_tau="label-shift"``).

Each client's test rows go through its own statistics (its map, or its own
mean and scale from its training rows).  The records (macro accuracy over
the domains, per seed) are written as CSV beside the report; a data set whose
records are there for these seeds is read back, not run again.

The report also scores a criterion the server can compute without pooled
rows, for the federated choice of the two fractions: the *class agreement*
of the aligned class means across clients (class sums and counts, which
FedCGS and FedPFT upload and O-FedAvg clients can send at C x m floats).
For every client k and class c that k and another client hold, the aligned
mean of (k, c) is compared, in the Mahalanobis metric of the aligned pooled
covariance, with the other clients' aligned mean of c and of the nearest
other class; the score is the mean over (k, c) of the squared-distance
ratio (lower: the clients agree on where each class lies, relative to how
far apart the classes are).  Its choice is judged against the best
configuration in hindsight and the default.

Run: python benchmarks/baselines.py [n_seeds] [--fresh] [data sets...]
    > docs/results/baselines.md
(data sets: digits (embedded, 256-d), digits-1280 (../shared/data; skipped
without it), office-caltech10, synthetic; about 25 CPU minutes in all on 2
cores with 5 seeds.)
"""

from __future__ import annotations

import csv
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from skslot_bench import CASE_TITLES, CASES, macro_accuracy_by_case, training_mixes
from threadpoolctl import threadpool_limits

from skslot import ClientStandardScaler, SLOTTransformer
from skslot.datasets import (
    DomainDataset,
    dirichlet_partition,
    load_dataset,
    make_federated_classification,
)
from skslot.defaults import CLIENT_TAU as DEFAULT_CLIENT_TAU
from skslot.defaults import MEAN_TAU as DEFAULT_MEAN_TAU
from skslot.defaults import TAU as DEFAULT_TAU
from skslot.heads import make_head
from skslot.label_shift import class_counts, label_shift_distances

OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "baselines"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "digits_effnet_lite0.npz"
HEADS = ("O-FedAvg", "FedCGS", "FedPFT")
#: Past this many features a data set runs the reduced study: FedPFT's per-(client, class)
#: factorisations at 1280-d cost about 45 CPU minutes per partition over the whole grid, so
#: it runs O-FedAvg and FedCGS, the configurations of the targets table, 3 seeds, no criteria.
LARGE = 1024
LARGE_HEADS = ("O-FedAvg", "FedCGS")
LARGE_SEEDS = 3
LARGE_GRID = ((0.0, 1.0), (0.4, 0.4), (1.0, 0.2), (1.0, 0.4), (1.0, 0.6), (0.8, 0.4))
ALPHAS = (0.1, 0.05, 0.01, None)
FRACTIONS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
RULE_TAU = 0.3
RULE = "rule 0.3"
#: the mean moved fully, every client alike, the covariance by tau times the label-shift factor
LABEL_SHIFT_TAUS = (0.4, 0.6, 0.8, 1.0)
#: the mean moved fully, the within-class covariance by tau
WITHIN_TAUS = (0.4, 0.6, 1.0)
#: the configurations every table shows, by name; "slot m/t" is mean_tau m, tau t
SHOWN = {
    "none": "none",
    "centre": "centre",
    "z-score": "z-score",
    "CORAL": "slot 0/1",
    "paper 0.4": "slot 0.4/0.4",
    "rule 0.3": "rule 0.3",
}
#: the library's defaults (SLOTTransformer()) among the configurations above
assert (DEFAULT_MEAN_TAU, DEFAULT_CLIENT_TAU) == (1.0, "label-shift")
assert DEFAULT_TAU in LABEL_SHIFT_TAUS
DEFAULT = f"ls 1/{DEFAULT_TAU:g}"
#: the library's default, SLOTTransformer(): each client's domain offset moved (measured
#: within classes), its covariance kept; the setting docs/choosing.md gives for the own mix
OWN_MIX = "own-mix default"
#: classes with fewer rows at a client do not enter the class-agreement score
MIN_CLASS_ROWS = 5


def load(name: str) -> DomainDataset | None:
    if name == "digits-1280":
        return load_dataset(str(SHARED)) if SHARED.exists() else None
    if name == "synthetic":
        data = make_federated_classification(
            n_clients=4,
            n_samples_per_client=1000,
            n_features=32,
            n_classes=10,
            alpha=None,
            domain_shift=1.0,
            random_state=0,
        )
        return DomainDataset(
            data.X,
            data.y,
            data.client,
            np.array([f"client {k}" for k in range(4)]),
            np.array([str(c) for c in range(10)]),
            "synthetic",
        )
    return load_dataset(name)


def slot_name(mean_tau: float, tau: float) -> str:
    return f"slot {mean_tau:g}/{tau:g}"


def client_maps(slot: SLOTTransformer) -> dict:
    """Each fitted client's map at ``slot``'s fractions (its ``tau`` scaled by its factor), as
    an ``m x m`` map (the criteria push class sums through it)."""
    return {k: slot.client_map(k).dense() for k in slot.clients_}


class ClassStatistics:
    """Per client: class counts, class sums and within-class scatter of its training rows."""

    def __init__(self, X: np.ndarray, y: np.ndarray, client: np.ndarray, clients: list) -> None:
        self.classes = np.unique(y)
        self.counts, self.sums, self.scatter = {}, {}, {}
        for k in clients:
            Xk, yk = X[client == k], y[client == k]
            n = class_counts(yk, self.classes)
            sums = np.stack([Xk[yk == c].sum(axis=0) for c in self.classes])
            centred = Xk - (sums / np.maximum(n, 1)[:, None])[np.searchsorted(self.classes, yk)]
            self.counts[k], self.sums[k], self.scatter[k] = n, sums, centred.T @ centred

    def aligned(self, maps: dict) -> tuple[dict, dict]:
        """Aligned class means and within-class covariances (exact: the maps are affine)."""
        means, covariances = {}, {}
        for k, T in maps.items():
            n = self.counts[k]
            means[k] = T.push_sums(self.sums[k], n) / np.maximum(n, 1)[:, None]
            dof = max(int(n.sum()) - int(np.count_nonzero(n)), 1)
            covariances[k] = T.linear @ self.scatter[k] @ T.linear.T / dof
        return means, covariances


def class_agreement(stats: ClassStatistics, maps: dict, factor: np.ndarray) -> float:
    """The class-agreement score of ``maps`` (the module docstring); lower is better.

    ``factor``: a Cholesky factor of the metric's covariance (the reference's).
    """
    means, _ = stats.aligned(maps)
    ratios = []
    for k in maps:
        others = [j for j in maps if j != k]
        held = sum(stats.counts[j] for j in others)
        pooled = sum(stats.counts[j][:, None] * means[j] for j in others)
        other_means = pooled / np.maximum(held, 1)[:, None]
        rivals = held >= MIN_CLASS_ROWS
        for c in np.flatnonzero((stats.counts[k] >= MIN_CLASS_ROWS) & rivals):
            others_c = rivals.copy()
            others_c[c] = False
            if not others_c.any():
                continue
            diff = np.linalg.solve(factor, (other_means - means[k][c]).T)
            dist = np.sum(diff**2, axis=0)
            ratios.append(dist[c] / dist[others_c].min())
    return float(np.mean(ratios)) if ratios else np.nan


def cross_client_accuracy(stats: ClassStatistics, maps: dict, draws: int = 400) -> float:
    """The leave-one-client-out score of ``maps`` (the module docstring); higher is better.

    For each client k: a linear discriminant from the other clients' aligned
    class means and pooled within-class covariance (ridge: 1 % of its mean
    eigenvalue), scored on k's aligned class Gaussians (k's class mean, k's
    within-class covariance) by ``draws`` seeded draws in score space, over
    the classes k and another client hold, weighted by the federation's
    class proportions.
    """
    means, covariances = stats.aligned(maps)
    total = sum(stats.counts.values())
    weights = total / total.sum()
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((draws, stats.classes.shape[0]))
    scores = []
    for k in maps:
        others = [j for j in maps if j != k]
        held = sum(stats.counts[j] for j in others)
        known = held >= MIN_CLASS_ROWS
        if known.sum() < 2:
            continue
        centres = sum(stats.counts[j][:, None] * means[j] for j in others)
        centres = centres[known] / held[known][:, None]
        dofs = [
            max(int(stats.counts[j].sum()) - int(np.count_nonzero(stats.counts[j])), 1)
            for j in others
        ]
        within = sum(d * covariances[j] for j, d in zip(others, dofs, strict=True)) / sum(dofs)
        within = within + 0.01 * np.trace(within) / within.shape[0] * np.eye(within.shape[0])
        W = np.linalg.solve(within, centres.T)  # (m, C_known)
        bias = -0.5 * np.sum(centres.T * W, axis=0)
        spread = W.T @ covariances[k] @ W
        values, vectors = np.linalg.eigh(spread)  # a square root of a semi-definite matrix
        root = vectors * np.sqrt(np.clip(values, 0.0, None))
        correct, mass = 0.0, 0.0
        known_index = np.flatnonzero(known)
        for position, c in enumerate(known_index):
            if stats.counts[k][c] < MIN_CLASS_ROWS:
                continue
            sampled = means[k][c] @ W + bias + noise[:, : known_index.shape[0]] @ root.T
            correct += weights[c] * np.mean(sampled.argmax(axis=1) == position)
            mass += weights[c]
        if mass:
            scores.append(correct / mass)
    return float(np.mean(scores)) if scores else np.nan


def run(data: DomainDataset, alpha, seed: int) -> list[dict]:
    """Every configuration and head on one partition: one record per (config, head)."""
    X = data.X.astype(np.float64)
    part = dirichlet_partition(
        data.y, data.domain, alpha=alpha, clients_per_domain=1, random_state=seed
    )
    keep = ~np.isin(part.train_client, part.empty_clients)
    train_rows, train_client = part.train_index[keep], part.train_client[keep]
    X_train, y_train = X[train_rows], data.y[train_rows]
    X_test, y_test, test_client = X[part.test_index], data.y[part.test_index], part.test_client
    classes = np.unique(data.y)
    mixes = training_mixes(y_train, train_client, classes)
    # the grid's transformer: every client alike, the fractions set for each point
    slot = SLOTTransformer(client_tau="uniform", label_mix="federation", unknown_client="identity")
    slot.fit(X_train, client=train_client)
    stats = ClassStatistics(X_train, y_train, train_client, slot.clients_)
    distances = label_shift_distances({k: stats.counts[k] for k in slot.clients_})
    centre = ClientStandardScaler(with_std=False, unknown_client="identity")
    z_score = ClientStandardScaler(unknown_client="identity")
    rule, label_shift = (
        SLOTTransformer.from_reference(
            slot.reference_,
            slot.summaries_,
            mean_tau=mean_tau,
            client_tau="label-shift",
            tau_scales=distances,
            label_mix="federation",
            unknown_client="identity",
        )
        for mean_tau in (None, 1.0)
    )
    large = X.shape[1] > LARGE
    # the class-agreement criterion's metric (the full study only)
    factor = None if large else np.linalg.cholesky(slot.reference_.covariance)
    # (name, fitted aligner, the fractions it is set to): tau and mean_tau need no refit
    # the library's default: each client's domain offset moved, measured within classes
    own_mix = SLOTTransformer(unknown_client="identity").fit(X_train, y_train, client=train_client)
    configs = [
        (OWN_MIX, own_mix, {}),
        ("centre", centre.fit(X_train, client=train_client), {}),
        ("z-score", z_score.fit(X_train, client=train_client), {}),
        (RULE, rule, {"tau": RULE_TAU}),
    ]
    configs += [(f"ls 1/{t:g}", label_shift, {"tau": t}) for t in LABEL_SHIFT_TAUS]
    if not large:
        within = SLOTTransformer(
            covariance="within",
            mean_tau=1.0,
            client_tau="uniform",
            label_mix="federation",
            unknown_client="identity",
        )
        within.fit(X_train, y_train, client=train_client)
        configs += [(f"within 1/{t:g}", within, {"tau": t}) for t in WITHIN_TAUS]
    grid = LARGE_GRID if large else [(m, t) for m in FRACTIONS for t in FRACTIONS]
    configs += [(slot_name(m, t), slot, {"mean_tau": m, "tau": t}) for m, t in grid]
    views = {"none": (X_train, X_test, np.nan, np.nan)}
    for name, aligner, fractions in configs:
        aligner.set_params(**fractions)
        agreement = accuracy = np.nan
        if isinstance(aligner, SLOTTransformer) and not large:
            maps = client_maps(aligner)
            agreement = class_agreement(stats, maps, factor)
            accuracy = cross_client_accuracy(stats, maps)
        views[name] = (
            aligner.transform(X_train, client=train_client),
            aligner.transform(X_test, client=test_client),
            agreement,
            accuracy,
        )
    records = []
    for config, (Z_train, Z_test, agreement, accuracy) in views.items():
        for head in LARGE_HEADS if large else HEADS:
            model = make_head(head, seed=seed).fit(Z_train, y_train, client=train_client)
            macro = macro_accuracy_by_case(
                model, Z_test, y_test, test_client, part.client_domain, mixes, classes
            )
            for case in CASES:
                records.append(
                    {
                        "dataset": data.name,
                        "case": case,
                        "alpha": "none" if alpha is None else alpha,
                        "seed": seed,
                        "config": config,
                        "head": head,
                        "accuracy": macro[case],
                        "agreement": agreement,
                        "cross_client": accuracy,
                    }
                )
    return records


def run_in_worker(*args) -> list[dict]:
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run(*args)


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        records = list(csv.DictReader(f))
    for r in records:
        r["alpha"] = r["alpha"] if r["alpha"] == "none" else float(r["alpha"])
        r["seed"] = int(r["seed"])
        for key in ("accuracy", "agreement", "cross_client"):
            r[key] = float(r[key])
    return records


def records_for(data: DomainDataset, n_seeds: int, fresh: bool) -> list[dict]:
    path = OUT / f"{data.name}.csv"
    if data.X.shape[1] > LARGE:
        n_seeds = min(n_seeds, LARGE_SEEDS)
    if path.exists() and not fresh:
        records = read(path)
        if {r["seed"] for r in records} == set(range(n_seeds)) and {
            r.get("case") for r in records
        } == set(CASES):
            return records
    start = time.perf_counter()
    jobs = [(alpha, seed) for alpha in ALPHAS for seed in range(n_seeds)]
    runs = Parallel(n_jobs=2)(delayed(run_in_worker)(data, a, s) for a, s in jobs)
    records = [r for found in runs for r in found]
    print(f"<!-- {data.name}: {time.perf_counter() - start:.0f} s wall on 2 workers -->\n")
    OUT.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)
    return records


def mean_by(records: list[dict], *keys: str) -> dict[tuple, float]:
    groups: dict[tuple, list[float]] = {}
    for r in records:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r["accuracy"])
    return {key: float(np.mean(v)) for key, v in groups.items()}


def heads_of(records: list[dict]) -> list[str]:
    return [h for h in HEADS if any(r["head"] == h for r in records)]


def full_grid(records: list[dict]) -> bool:
    """Whether the records hold the whole grid (and the criteria): not the reduced study."""
    found = {r["config"] for r in records}
    return all(slot_name(m, t) in found for m in FRACTIONS for t in FRACTIONS)


def baseline_table(records: list[dict], default: str) -> str:
    acc = mean_by(records, "alpha", "head", "config")
    grid = sorted({r["config"] for r in records if r["config"].startswith("slot ")})
    shown = {**SHOWN, "default (own mix)": OWN_MIX, f"domain setting ({default})": default}
    header = " | ".join(shown)
    lines = [
        f"| alpha | head | {header} | best SLOT (mean_tau/tau) |",
        "| --- " * (len(shown) + 3) + "|",
    ]
    for alpha in ALPHAS:
        a = "none" if alpha is None else alpha
        for head in heads_of(records):
            base = acc[(a, head, "none")]
            cells = [f"{base:.2f}"]
            for config in list(shown.values())[1:]:
                v = acc[(a, head, config)]
                cells.append(f"{v:.2f} ({v - base:+.2f})")
            best = max(grid, key=lambda c: acc[(a, head, c)])
            cells.append(f"{acc[(a, head, best)]:.2f} ({best.removeprefix('slot ')})")
            lines.append(f"| {a} | {head} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def grid_table(records: list[dict], head: str, alphas: tuple) -> str:
    """Gain over per-client centring on the (mean_tau, tau) grid, mean over the given alphas."""
    acc = mean_by(records, "alpha", "head", "config")
    keys = ["none" if a is None else a for a in alphas]
    lines = ["| mean_tau \\ tau | " + " | ".join(f"{t:g}" for t in FRACTIONS) + " |"]
    lines.append("| --- " * (len(FRACTIONS) + 1) + "|")
    for m in FRACTIONS:
        cells = []
        for t in FRACTIONS:
            gain = np.mean(
                [acc[(a, head, slot_name(m, t))] - acc[(a, head, "centre")] for a in keys]
            )
            cells.append(f"{gain:+.1f}")
        lines.append(f"| {m:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


CRITERIA = {
    "class agreement": ("agreement", min),
    "cross-client accuracy": ("cross_client", max),
}


def choice_table(records: list[dict], default: str) -> str:
    """Each criterion's choice per (alpha, head, seed) against the default and the best.

    The candidates are every SLOT configuration of the records but the own-mix default
    (the paper's grid, the label-shift and within-class ones); the choice
    is made per seed (what a federation would do), and its accuracy averaged.
    """
    acc = {(r["alpha"], r["head"], r["seed"], r["config"]): r["accuracy"] for r in records}
    candidates = sorted(
        {r["config"] for r in records if not np.isnan(r["agreement"]) and r["config"] != OWN_MIX}
    )
    seeds = sorted({r["seed"] for r in records})
    names = list(CRITERIA)
    lines = [
        "| alpha | head | default | "
        + " | ".join(f"{n}: choice - default (choices)" for n in names)
        + " | best in hindsight - default (config) |",
        "| --- " * (4 + len(names)) + "|",
    ]
    for alpha in ALPHAS:
        a = "none" if alpha is None else alpha
        for head in HEADS:
            dflt = np.mean([acc[(a, head, s, default)] for s in seeds])
            cells = [f"{dflt:.2f}"]
            for name in names:
                key, best_of = CRITERIA[name]
                score = {
                    (r["seed"], r["config"]): r[key]
                    for r in records
                    if r["alpha"] == a and r["head"] == head
                }
                chosen = [best_of(candidates, key=lambda c, s=s: score[(s, c)]) for s in seeds]
                got = np.mean([acc[(a, head, s, c)] for s, c in zip(seeds, chosen, strict=True)])
                shown = ", ".join(c.removeprefix("slot ") for c in chosen)
                cells.append(f"{got - dflt:+.2f} ({shown})")
            fixed = {c: np.mean([acc[(a, head, s, c)] for s in seeds]) for c in candidates}
            best = max(fixed, key=fixed.get)
            cells.append(f"{fixed[best] - dflt:+.2f} ({best.removeprefix('slot ')})")
            lines.append(f"| {a} | {head} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets_table(found: dict[str, list[dict]], default: str) -> str:
    """Each configuration against the defaults' targets, on every data set.

    Per data set: the mean gain over per-client centring under skew (FedCGS
    and FedPFT, alphas 0.1 / 0.05 / 0.01), the worst of those cells, and the
    worst cell without skew against the better of no alignment and centring,
    and the worst cell of all against that better baseline.
    """
    names = list(found)
    shown = [OWN_MIX, "centre", "z-score", "CORAL", "paper 0.4", RULE]
    shown += [f"ls 1/{t:g}" for t in LABEL_SHIFT_TAUS] + [f"within 1/{t:g}" for t in WITHIN_TAUS]
    shown += [slot_name(1.0, t) for t in (0.2, 0.4, 0.6)] + [slot_name(0.8, 0.4)]
    header = " | ".join(f"{n}: skew mean / worst skew / worst no skew / worst any" for n in names)
    lines = [f"| configuration | {header} |", "| --- " * (len(names) + 1) + "|"]
    labels = {"CORAL": "CORAL (slot 0/1)", "paper 0.4": "paper 0.4 (slot 0.4/0.4)"}
    for config in shown:
        name = {
            default: f"**{config} (domain setting)**",
            OWN_MIX: f"**{config} (SLOTTransformer())**",
        }.get(config, labels.get(config, config))
        cells = []
        for data in names:
            acc = mean_by(found[data], "alpha", "head", "config")
            key = SHOWN.get(config, config)
            pair = [h for h in ("FedCGS", "FedPFT") if h in heads_of(found[data])]
            if not all((a, h, key) in acc for a in ("none", *ALPHAS[:3]) for h in pair):
                cells.append("n/a")
                continue
            skew = [acc[(a, h, key)] - acc[(a, h, "centre")] for a in ALPHAS[:3] for h in pair]
            best = {  # against the better of no alignment and centring
                (a, h): acc[(a, h, key)] - max(acc[(a, h, "none")], acc[(a, h, "centre")])
                for a in ("none", *ALPHAS[:3])
                for h in pair
            }
            calm = min(best[("none", h)] for h in pair)
            cells.append(
                f"{np.mean(skew):+.2f} / {min(skew):+.2f} / {calm:+.2f} / {min(best.values()):+.2f}"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(n_seeds: int, names: list[str], fresh: bool, default: str) -> None:
    print("# What SLOT adds over a client alone\n")
    print(
        f"`python benchmarks/baselines.py {n_seeds} {' '.join(names)}`: the paper's protocol "
        f"(one client per domain, 70/30 split per domain, Dirichlet alpha, {n_seeds} seeds, "
        "one BLAS thread per worker); macro accuracy over the domains (%), mean over seeds, "
        "gain against no alignment in brackets. Two cases (`skslot_bench.CASES`): *own mix*, "
        "each client's test rows weighted to its training mix and every head predicting with "
        "the client's own prior; *domain*, each client's domain's whole test split, the "
        "heads predicting with the federation's mix (the paper's test). `centre` and "
        "`z-score` are each client alone (its own mean, its own standard deviation); "
        "`CORAL` is SLOT's covariance part alone (mean_tau 0, tau 1); `paper 0.4` the "
        "paper's geodesic at tau 0.4; `rule 0.3` the label-shift rule at tau 0.3; "
        f"`{OWN_MIX}` the shipped `SLOTTransformer()` (each client's domain offset moved, "
        "measured within classes; its covariance kept); `domain setting` "
        '`SLOTTransformer(label_mix="federation")`, the setting docs/choosing.md gives '
        "for the domain case.\n"
    )
    found = {}
    for name in names:
        data = load(name)
        if data is not None:
            found[data.name] = records_for(data, n_seeds, fresh)
    print("## Every configuration against the targets\n")
    print(
        "Per data set, for FedCGS and FedPFT (FedCGS alone in the reduced study): the mean "
        "gain over per-client centring under "
        "label skew (alpha 0.1, 0.05, 0.01), the worst of those six cells, the worst "
        "cell without skew against the better of no alignment and centring, and the worst "
        "of all eight cells against that better baseline (points). "
        "`ls 1/t`: the mean moved fully (every client alike), the covariance t times the "
        "client's label-shift factor; `within 1/t`: the mean moved fully, the within-class "
        "covariance by t; `slot m/t`: mean_tau m, tau t, every client alike.\n"
    )
    for case in CASES:
        by_case = {name: of_case(records, case) for name, records in found.items()}
        print(f"{CASE_TITLES[case]}:\n\n{targets_table(by_case, default)}\n")
    for name in names:
        data = load(name)
        if data is None:
            print(f"## {name}\n\nskipped: {SHARED} is absent\n")
            continue
        print(f"## {data.name} ({data.X.shape[1]} features)\n")
        for case in CASES:
            records = of_case(found[data.name], case)
            print(f"### {CASE_TITLES[case]}\n\n{baseline_table(records, default)}\n")
            if not full_grid(records):
                continue
            print(
                "Gain over per-client centring on the grid of the two fractions "
                "(rows: mean_tau, columns: tau), mean over the skewed alphas (0.1, 0.05, "
                "0.01), then without skew:\n"
            )
            for head in HEADS:
                print(f"{head}, under skew:\n\n{grid_table(records, head, ALPHAS[:3])}\n")
                print(f"{head}, without skew:\n\n{grid_table(records, head, (None,))}\n")
            print("The federated choice, per seed, among every SLOT configuration above:\n")
            print(choice_table(records, default) + "\n")
        if not full_grid(found[data.name]):
            print(
                f"The reduced study (more than {LARGE} features): heads "
                f"{', '.join(LARGE_HEADS)}, {LARGE_SEEDS} seeds, the grid points "
                f"{', '.join(slot_name(m, t) for m, t in LARGE_GRID)}, no criteria.\n"
            )
        print(f"Records: `docs/results/baselines/{data.name}.csv`.\n")


def of_case(records: list[dict], case: str) -> list[dict]:
    return [r for r in records if r["case"] == case]


if __name__ == "__main__":
    arguments = sys.argv[1:]
    fresh = "--fresh" in arguments
    arguments = [a for a in arguments if a != "--fresh"]
    n = int(arguments[0]) if arguments else 5
    main(
        n,
        arguments[1:] or ["digits", "digits-1280", "office-caltech10", "synthetic"],
        fresh,
        DEFAULT,
    )
