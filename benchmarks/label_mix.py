"""Whose label mix: each configuration judged both ways a federation is judged.

The training data of the two cases look the same; only the rows the model
serves differ:

* **own mix**: each client's future rows follow its own label mix (a
  hospital's prevalence).  Each client's test rows are its domain's test
  split weighted to its training mix (:func:`skslot.label_mix.own_mix_accuracy`:
  the expected accuracy on rows drawn with that mix, no sampling noise);
* **domain**: the model serves every class of the client's domain, the
  paper's test: its domain's whole test split.

Configurations, each fitted once per (data, alpha, seed) and scored both ways:

* ``none``: the rows as they are; ``centre``, ``z-score``: each client
  alone (:class:`skslot.ClientStandardScaler`);
* ``SLOT client``: ``SLOTTransformer(label_mix="client")``, the default
  (each client's mean moved by its domain offset measured within classes,
  its covariance kept);
* ``SLOT client+cov``: the same with the within-class covariances moved at
  tau 0.6 (``covariance="within"``, ``client_tau="uniform"``);
* ``SLOT federation``: ``SLOTTransformer(label_mix="federation")``, the
  domain case's (each mean moved to the reference mean, the covariance
  0.6 of the way scaled by the label shift);
* ``SLOT auto``: ``FederatedTauSearch(head)`` with its defaults, ``tau``
  chosen by the federation from each client's held-out rows, scored with
  each client's own mix (skslot's heads only; in the domain tables its
  chosen head predicts with the federation's mix).

O-FedAvg's local heads span the classes each client holds (its default);
``O-FedAvg all``: every class of the federation (``local_classes="all"``,
the classic average).  Each skslot head predicts with each client's own label mix in the own-mix
case (``label_mix="client"``, its default) and with the federation's in the
domain case (and, in a third table, the domain case with the heads left on
each client's own mix: the own-mix defaults where the domain case holds);
scikit-learn's ``LogisticRegression()`` and
``LinearDiscriminantAnalysis()`` as they are (the federation's mix both
ways), and wrapped in :class:`skslot.label_mix.ClientPriorClassifier`
(``+prior``: each client's own mix in the own-mix case).

Data: the embedded digits (256-d; alpha 0.1, 0.5 and none), the embedded
Office-Caltech10 (alpha 0.1 and none), and four hospitals: scikit-learn's
breast-cancer features (z-scored), each site drawing its rows with its own
malignant share (15, 35, 55, 75 %) and shifted by its own random offset
(norm 3), no label skew beyond the sites' own prevalences.

Run: python benchmarks/label_mix.py [n_seeds] [--quick] > docs/results/label_mix.md
(5 seeds: about 10 minutes on 2 cores, one BLAS thread per run; ``--quick``:
one seed of the digits at alpha 0.1, the smoke test's.)
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np
from joblib import Parallel, delayed
from sklearn.datasets import load_breast_cancer
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from skslot import ClientStandardScaler, FederatedTauSearch, SLOTTransformer
from skslot.datasets import DomainDataset, dirichlet_partition, load_dataset
from skslot.heads import make_head
from skslot.label_mix import ClientPriorClassifier, own_mix_accuracy
from skslot.label_shift import class_counts

HEADS = ("FedCGS", "FedPFT", "O-FedAvg", "O-FedAvg all", "LR", "LDA", "LR+prior", "LDA+prior")
ALIGNMENTS = (
    "none",
    "centre",
    "z-score",
    "SLOT client",
    "SLOT client+cov",
    "SLOT federation",
    "SLOT auto",
)
#: The heads the federated choice of ``tau`` runs with (skslot's own).
SEARCHED = ("FedCGS", "FedPFT", "O-FedAvg")
#: The two cases, and the domain case with the heads left on each client's own mix (what
#: the own-mix defaults cost where every class of the domain is to be served).
CASES = ("own mix", "domain", "domain, heads on each client's mix")


def hospitals(seed: int) -> DomainDataset:
    """Four sites of breast-cancer features with their own prevalence and offset."""
    raw = load_breast_cancer()
    X = (raw.data - raw.data.mean(0)) / raw.data.std(0)
    malignant = raw.target == 0
    rng = np.random.default_rng(1000 + seed)
    rows, sites = [], []
    for site, share in enumerate((0.15, 0.35, 0.55, 0.75)):
        n = 300
        k = round(share * n)
        rows.append(
            np.r_[
                rng.choice(np.flatnonzero(malignant), k),
                rng.choice(np.flatnonzero(~malignant), n - k),
            ]
        )
        sites.append(np.full(n, site))
    index, site = np.concatenate(rows), np.concatenate(sites)
    offsets = rng.normal(size=(4, X.shape[1]))
    offsets *= 3.0 / np.linalg.norm(offsets, axis=1, keepdims=True)
    features = X[index] + offsets[site] + 0.3 * rng.normal(size=(index.shape[0], X.shape[1]))
    return DomainDataset(
        features,
        raw.target[index].astype(np.int64),
        site.astype(np.int64),
        np.array([f"site{k}" for k in range(4)]),
        np.array(raw.target_names),
        "hospitals",
    )


def _head(name: str, seed: int):
    if name.startswith("LR"):
        base = LogisticRegression(max_iter=1000)
    elif name.startswith("LDA"):
        base = LinearDiscriminantAnalysis()
    elif name == "O-FedAvg all":
        return make_head("O-FedAvg", seed=seed).set_params(local_classes="all")
    else:
        return make_head(name, seed=seed)
    return ClientPriorClassifier(base) if name.endswith("+prior") else base


def _alignments(X_train, y_train, c_train, X_test, c_test):
    """Each configuration's training and test rows."""
    out = {"none": (X_train, X_test)}
    for name, scaler in (
        ("centre", ClientStandardScaler(with_std=False, unknown_client="identity")),
        ("z-score", ClientStandardScaler(unknown_client="identity")),
    ):
        scaler.fit(X_train, client=c_train)
        out[name] = (
            scaler.transform(X_train, client=c_train),
            scaler.transform(X_test, client=c_test),
        )
    for name, slot in (
        ("SLOT client", SLOTTransformer(label_mix="client")),
        (
            "SLOT client+cov",
            SLOTTransformer(label_mix="client", tau=0.6, covariance="within", client_tau="uniform"),
        ),
        ("SLOT federation", SLOTTransformer(label_mix="federation")),
    ):
        slot.set_params(unknown_client="identity").fit(X_train, y_train, client=c_train)
        out[name] = (slot.transform(X_train, client=c_train), slot.transform(X_test, client=c_test))
    return out


def run(data: DomainDataset, alpha, seed: int) -> list[dict]:
    """Every (configuration, head), scored in both cases: one record each."""
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
        X = data.X.astype(np.float64)
        keep = ~np.isin(part.train_client, part.empty_clients)
        tr, c_train = part.train_index[keep], part.train_client[keep]
        X_train, y_train = X[tr], data.y[tr]
        X_test, y_test, c_test = X[part.test_index], data.y[part.test_index], part.test_client
        classes = np.unique(data.y)
        mixes = {k: class_counts(y_train[c_train == k], classes) for k in np.unique(c_train)}
        records: list[dict] = []
        for name in SEARCHED:
            search = FederatedTauSearch(make_head(name, seed=seed), random_state=seed)
            search.set_params(unknown_client="identity").fit(X_train, y_train, client=c_train)
            own = search.predict(X_test, client=c_test)
            domain = search.best_estimator_.predict(search.slot_.transform(X_test, client=c_test))
            records += _records(data, alpha, seed, "SLOT auto", name, own, domain, y_test, c_test,
                                mixes, classes)  # fmt: skip
        for align, (A, B) in _alignments(X_train, y_train, c_train, X_test, c_test).items():
            for name in HEADS:
                head = _head(name, seed)
                own_prior = not name.startswith(("LR", "LDA")) or name.endswith("+prior")
                if own_prior:
                    head.fit(A, y_train, client=c_train)
                else:
                    head.fit(A, y_train)
                domain = head.predict(B)  # the federation's mix
                own = head.predict(B, client=c_test) if own_prior else domain
                records += _records(
                    data, alpha, seed, align, name, own, domain, y_test, c_test, mixes, classes
                )
        return records


def _records(data, alpha, seed, align, name, own, domain, y_test, c_test, mixes, classes):
    """One record per case of one (configuration, head) fitted once."""
    scores = {
        "domain": np.mean([np.mean((domain == y_test)[c_test == k]) for k in mixes]),
        "domain, heads on each client's mix": np.mean(
            [np.mean((own == y_test)[c_test == k]) for k in mixes]
        ),
        "own mix": np.mean(
            list(own_mix_accuracy(own == y_test, y_test, c_test, mixes, classes).values())
        ),
    }
    return [
        {
            "data": data.name,
            "alpha": "none" if alpha is None else alpha,
            "seed": seed,
            "alignment": align,
            "head": name,
            "case": case,
            "accuracy": 100 * float(accuracy),
        }
        for case, accuracy in scores.items()
    ]


def table(records: list[dict], case: str) -> str:
    """Mean over seeds per (data, alpha, head) and configuration, in one case."""
    groups: dict[tuple, list[float]] = {}
    for r in records:
        if r["case"] == case:
            groups.setdefault((r["data"], r["alpha"], r["head"], r["alignment"]), []).append(
                r["accuracy"]
            )
    rows = sorted({k[:3] for k in groups}, key=lambda k: (k[0], str(k[1]), HEADS.index(k[2])))
    lines = [
        "| data | alpha | head | " + " | ".join(ALIGNMENTS) + " | SLOT client - none |",
        "|" + "---|" * (len(ALIGNMENTS) + 4),
    ]
    for key in rows:
        means = {a: float(np.mean(groups[(*key, a)])) for a in ALIGNMENTS if (*key, a) in groups}
        cells = [str(k) for k in key] + [
            f"{means[a]:.1f}" if a in means else "-" for a in ALIGNMENTS
        ]
        cells.append(f"{means['SLOT client'] - means['none']:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    args = [a for a in argv if not a.startswith("--")]
    n_seeds = 1 if quick else int(args[0]) if args else 5
    runs = (
        [("digits", 0.1)]
        if quick
        else [
            ("digits", 0.1),
            ("digits", 0.5),
            ("digits", None),
            ("office-caltech10", 0.1),
            ("office-caltech10", None),
            ("hospitals", None),
        ]
    )
    start = time.perf_counter()
    jobs = []
    for name, alpha in runs:
        for seed in range(n_seeds):
            data = hospitals(seed) if name == "hospitals" else load_dataset(name)
            jobs.append(delayed(run)(data, alpha, seed))
    records = [r for batch in Parallel(n_jobs=1 if quick else 2)(jobs) for r in batch]
    seconds = time.perf_counter() - start
    print("# Whose label mix: every configuration judged both ways\n")
    print(__doc__.split("\n\n", 1)[1].rsplit("\nRun:", 1)[0])
    print(
        f"\n{n_seeds} seeds, macro accuracy over clients (%), {seconds:.0f} s on 2 workers "
        "with one BLAS thread each.\n"
    )
    for case in CASES:
        print(f"## {case}\n\n{table(records, case)}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
