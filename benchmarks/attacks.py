"""One hostile client among four: poisoning attacks, with and without the defence.

Three honest clients (the three digits domains, Dirichlet alpha = 0.1, one
client per domain, tau = 0.4) and one attacker run skslot's real ServerApp and
ClientApp in one process (``tests/flower_harness.py``'s ``LocalGrid``: the
messages of a deployment, without a network).  The attacker holds genuine rows
of the same distribution (as many as the median honest client, drawn from the
training rows the Dirichlet partition left unused), then lies, either in its
messages (a fault rewriting its replies, every message valid on the wire) or
in its data (it trains on poisoned rows, so its messages are consistent).

Attacks on each kind of message (scaled statistics, a degenerate summary,
flipped labels), then adaptive ones, built to sit inside
the defence's default bounds (:mod:`skslot.defence`) or to slip past its
screening (:mod:`skslot.screening`).  Each is run three ways: with the
defence's bounds and the leave-one-client-out screening (``screen = "on"``:
at this fixed tau the clients hold out validation rows), with the bounds
alone (``screen = "off"``), and with no defence; the table gives the honest
clients' macro accuracy (mean over the three honest domains of the test
accuracy), mean and range over seeds, and what the server did with the
attacker.  The no-attack row is the attacker sending its genuine rows.

The 1280-d features go through a fixed, data-independent orthonormal
projection to 256 dimensions first (a public linear layer every client
applies; the same as tests/test_bench.py's), which keeps the 100-odd runs to a
few minutes.

Run: python benchmarks/attacks.py [n_seeds] > docs/results/attacks.md
(about 5 minutes on 2 cores; needs ../shared/data).
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flwr.app import Message
from joblib import Parallel, delayed
from threadpoolctl import threadpool_limits

from skslot import GaussianSummary
from skslot._linalg import symmetric_from_upper
from skslot.datasets import digits_projection, dirichlet_partition, load_npz
from skslot.flower import DeploymentConfig, run_one_shot
from skslot.flower import client_app as client_module
from skslot.protocol import ProtocolRunError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.flower_harness import (
    LocalGrid,
    inflated_count,
    own_summary,
    rewrite_upload,
    scaled_heads,
    scaled_summary,
    tamper_statistics,
)

DIGITS = Path(__file__).resolve().parents[2] / "shared" / "data" / "digits_effnet_lite0.npz"
HONEST, ATTACKER = (11, 12, 13), 14
DIMENSION, ALPHA, TAU = 256, 0.1, 0.4
#: the paper's geodesic at TAU, every client alike (the configuration this study measures)
SLOT = {"client_tau": "uniform", "mean_tau": None}
Fault = Callable[[Message, Message], Message | None]


# -- what the attacker does to its messages --------------------------------------------------


def scaled_gram(factor: float) -> Fault:
    """FedCGS statistics with the Gram matrix times ``factor``, at the honest count."""
    return tamper_statistics(lambda a: {**a, "gram_upper": a["gram_upper"] * factor})


def collapsed_summary(k: int, factor: float) -> Fault:
    """The summary's ``k`` largest eigenvalues set to ``factor`` x the mean variance, trace kept;
    the statistics are the client's real ones."""

    def fault(request: Message, reply: Message) -> Message | None:
        if request.metadata.message_type != "query.upload":
            return reply
        own = own_summary(reply)
        values, vectors = np.linalg.eigh(own.covariance)
        trace = values.sum()
        values[-k:] = factor * values.mean()
        values *= trace / values.sum()
        covariance = (vectors * values) @ vectors.T
        summary = GaussianSummary(own.n, own.mean, covariance, client=own.client)
        return rewrite_upload(request, reply, summary)

    return fault


def announced_shrinkage(value: float) -> Fault:
    """A FedCGS client announcing another Ledoit-Wolf shrinkage than its rows give (its
    statistics real): the server derives the summary from both."""

    def fault(request: Message, reply: Message) -> Message | None:
        if request.metadata.message_type != "query.upload":
            return reply
        return rewrite_upload(request, reply, config={"shrinkage": float(value)})

    return fault


def scaled_mixture_covariances(factor: float) -> Fault:
    """FedPFT mixtures with every covariance factor times ``factor`` (the low-rank default
    sends ``W`` with ``C = W W^T + D``: the covariance grows about ``factor**2``)."""
    return tamper_statistics(
        lambda a: {**a, "covariances": (a["covariances"] * factor).astype(a["covariances"].dtype)}
    )


def moved_class_sums(shift: float) -> Fault:
    """FedCGS class sums moved between the classes the client holds: its largest class's mean
    moves ``shift`` standard deviations, the others make up for it; totals, Gram matrix and
    counts unchanged."""

    def edit(arrays):
        counts, sums = arrays["counts"], arrays["sums"].copy()
        held = np.flatnonzero(counts > 0)
        c = held[np.argmax(counts[held])]
        others = held[held != c]
        n = counts.sum()
        mean = sums.sum(axis=0) / n
        gram = symmetric_from_upper(arrays["gram_upper"], sums.shape[1])
        spread = np.sqrt(max(np.trace(gram) / n - mean @ mean, 0.0))  # sqrt(tr S / n)
        d = shift * spread * counts[c] * np.ones(sums.shape[1]) / np.sqrt(sums.shape[1])
        sums[c] += d
        sums[others] -= d / max(len(others), 1)
        return {**arrays, "sums": sums}

    return tamper_statistics(edit)


def poisoned_reference(n: int, shift: float) -> Fault:
    """Sends a summary with ``n`` rows and its mean shifted by ``shift``, then drops out."""

    def fault(request: Message, reply: Message) -> Message | None:
        if request.metadata.message_type != "query.upload":
            return None
        own = own_summary(reply)
        summary = GaussianSummary(n, own.mean + shift, own.covariance, client=own.client)
        return rewrite_upload(request, reply, summary, {"n-fit": n})

    return fault


# -- what the attacker does to its rows --------------------------------------------------------


def flipped_labels(X, y, rng, honest_classes):
    return X, (y + 1) % 10


def repeated(rows, times: int):
    """The attacker's rows (after ``rows``) ``times`` over: a count inflated consistently, in
    its summary, class counts and statistics alike."""

    def repeated_rows(X, y, rng, honest_classes):
        X, y = rows(X, y, rng, honest_classes)
        return np.tile(X, (times, 1)), np.tile(y, times)

    return repeated_rows


def flipped_own_classes(X, y, rng, honest_classes):
    """Labels flipped only on the classes of which no honest client holds a validation row:
    none of the others' validation rows can show the harm, which lands on their test rows of
    those classes."""
    own = ~np.isin(y, honest_classes)
    return X, np.where(own, (y + 1) % 10, y)


def scaled_rows(variance_ratio: float):
    def rows(X, y, rng, honest_classes):
        mean = X.mean(axis=0)
        return mean + np.sqrt(variance_ratio) * (X - mean), y

    return rows


def shifted_rows(offset: float):
    """Rows moved ``offset`` of their own standard deviations (sqrt(tr S)) in a random direction."""

    def rows(X, y, rng, honest_classes):
        u = rng.normal(size=X.shape[1])
        return X + offset * np.sqrt(np.trace(np.cov(X.T))) * u / np.linalg.norm(u), y

    return rows


@dataclass(frozen=True)
class Attack:
    name: str
    heads: tuple[str, ...]
    fault: Callable[[], Fault] | None = None
    rows: Callable | None = None
    adaptive: bool = False
    present: bool = True
    settings: tuple = ()  # run config overrides, as (name, value) pairs


BOUNDS = DeploymentConfig()  # the defaults the adaptive attacks stay inside
COUNT = int(0.9 * BOUNDS.max_weight_ratio)
VARIANCE = 0.5 * BOUNDS.max_variance_ratio
OFFSET = 0.8 * BOUNDS.max_mean_offset
NORM = 0.9 * BOUNDS.max_norm_ratio
BOTH = ("FedCGS", "O-FedAvg")
ALL = ("FedCGS", "FedPFT", "O-FedAvg")
STATISTICS = ("FedCGS", "FedPFT")
PRIVATE = (("epsilon", 16.0), ("clip_norm", 20.0))
#: The defence's three ways: bounds and screening, bounds alone, none.
MODES = {
    "screened": {"defence": True, "screen": "on"},
    "bounds": {"defence": True, "screen": "off"},
    "off": {"defence": False, "screen": "off"},
}

ATTACKS = [
    Attack("none (the attacker sends its genuine rows)", ALL),
    Attack("none, attacker absent (the three honest clients alone)", ALL, present=False),
    Attack("none, DP summaries (epsilon 16; O-FedAvg only)", ("O-FedAvg",), settings=PRIVATE),
    Attack("Gram matrix x1e8, honest n", ("FedCGS",), lambda: scaled_gram(1e8)),
    Attack(
        "summary's 10 largest eigenvalues x1e-9 (trace kept), real statistics",
        STATISTICS,
        lambda: collapsed_summary(10, 1e-9),
    ),
    Attack(
        "mixture covariances x1e8 (covariance factors x1e4)",
        ("FedPFT",),
        lambda: scaled_mixture_covariances(1e4),
    ),
    Attack(
        "class sums moved 5 sd between its classes (totals, Gram, counts kept)",
        ("FedCGS",),
        lambda: moved_class_sums(5.0),
    ),
    Attack("n x1e6 and flipped labels", BOTH, lambda: inflated_count(10**6), flipped_labels),
    Attack("coefficients x1e3, honest n", ("O-FedAvg",), lambda: scaled_heads(1e3)),
    Attack(
        "summary only (n = 2^53 - 1e5, mean + 1e3), then drops out",
        ("O-FedAvg",),
        lambda: poisoned_reference(2**53 - 10**5, 1e3),
    ),
    Attack(
        "summary only (n = 2^53 - 1e5, mean + 1e3), then drops out, DP on (epsilon 16)",
        ("O-FedAvg",),
        lambda: poisoned_reference(2**53 - 10**5, 1e3),
        settings=PRIVATE,
    ),
    Attack("summary covariance x1e8", STATISTICS, lambda: scaled_summary(1e8)),
    Attack(
        "shrinkage 1 (a spherical derived summary), real statistics",
        ("FedCGS",),
        lambda: announced_shrinkage(1.0),
        adaptive=True,
    ),
    Attack("flipped labels, honest n", ALL, None, flipped_labels, adaptive=True),
    Attack(
        f"flipped labels, rows x{COUNT} (inside the weight cap)",
        ALL,
        rows=repeated(flipped_labels, COUNT),
        adaptive=True,
    ),
    Attack(
        f"flipped labels, rows x{COUNT}, DP on (epsilon 16)",
        ("O-FedAvg",),
        rows=repeated(flipped_labels, COUNT),
        adaptive=True,
        settings=PRIVATE,
    ),
    Attack(
        f"rows scaled, variance x{VARIANCE:g} (consistent)",
        BOTH,
        rows=scaled_rows(VARIANCE),
        adaptive=True,
    ),
    Attack(
        f"rows shifted {OFFSET:g} standard deviations (consistent)",
        BOTH,
        rows=shifted_rows(OFFSET),
        adaptive=True,
    ),
    Attack(
        f"coefficients x{NORM:g} (inside the norm bound)",
        ("O-FedAvg",),
        lambda: scaled_heads(NORM),
        adaptive=True,
    ),
    Attack(
        f"against the screening: labels flipped on the classes only it holds, rows x{COUNT}",
        ALL,
        rows=repeated(flipped_own_classes, COUNT),
        adaptive=True,
    ),
]


# -- one run -----------------------------------------------------------------------------------


def write_clients(folder: Path, seed: int) -> dict[int, dict]:
    """The projected data set for the honest nodes, and the attacker's own ``.npz``."""
    data = load_npz(DIGITS)
    X = data.X.astype(np.float64) @ digits_projection(data.X.shape[1], DIMENSION)
    dataset = folder / "digits256.npz"
    np.savez(dataset, X=X, y=data.y, domain=data.domain, domains=data.domains, classes=data.classes)
    part = dirichlet_partition(data.y, data.domain, alpha=ALPHA, random_state=seed)
    # the attacker looks like an honest client: the median client's class counts, classes
    # permuted, drawn from the training rows the partition left unused
    rng = np.random.default_rng(seed)
    unused = np.setdiff1d(np.arange(data.y.shape[0]), np.r_[part.train_index, part.test_index])
    sizes = part.class_counts.sum(axis=1)
    counts = rng.permutation(part.class_counts[np.argsort(sizes)[len(sizes) // 2]])
    pools = [rng.permutation(unused[data.y[unused] == c]) for c in range(counts.shape[0])]
    train = np.concatenate([pool[:n] for pool, n in zip(pools, counts, strict=True)])
    test = np.concatenate([pool[n : n + 10] for pool, n in zip(pools, counts, strict=True)])
    np.savez(
        folder / "attacker.npz",
        X_train=X[train],
        y_train=data.y[train],
        X_test=X[test],
        y_test=data.y[test],
    )
    # the classes an honest client holds validation rows of (5 rows or more at a 0.2 split)
    np.save(folder / "honest-classes.npy", np.flatnonzero((part.class_counts >= 5).any(axis=0)))
    configs = {node: {"partition-id": k, "dataset": str(dataset)} for k, node in enumerate(HONEST)}
    configs[ATTACKER] = {"data": str(folder / "attacker.npz"), "client-id": 3}
    return configs


def poison(folder: Path, attack: Attack, seed: int) -> dict:
    """The attacker's node config for this attack (its rows poisoned, if the attack says so)."""
    source = folder / "attacker.npz"
    if attack.rows is None:
        return {"data": str(source), "client-id": 3}
    with np.load(source) as archive:
        arrays = dict(archive)
    honest_classes = np.load(folder / "honest-classes.npy")
    X, y = attack.rows(
        arrays["X_train"], arrays["y_train"], np.random.default_rng(seed), honest_classes
    )
    path = folder / "attacker-poisoned.npz"
    np.savez(path, **{**arrays, "X_train": X, "y_train": y})
    return {"data": str(path), "client-id": 3}


def one_run(attack: Attack, head: str, mode: str, seed: int) -> dict:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.ERROR)  # the rejections are in the report
    try:
        return _one_run(attack, head, mode, seed)
    finally:
        flwr_logger.setLevel(level)


def _one_run(attack: Attack, head: str, mode: str, seed: int) -> dict:
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        configs = write_clients(folder, seed)
        configs[ATTACKER] = poison(folder, attack, seed)
        if not attack.present:
            del configs[ATTACKER]
        config = DeploymentConfig(
            head=head,
            tau=TAU,
            **SLOT,
            alpha=ALPHA,
            seed=seed,
            dataset=configs[HONEST[0]]["dataset"],
            num_clients=len(configs),
            connect_timeout=0.0,
            reply_timeout=1.0,  # LocalGrid answers at once: a missing reply never comes
            **MODES[mode],
            **dict(attack.settings),
        )
        faults = {ATTACKER: attack.fault()} if attack.fault else {}
        grid = LocalGrid(client_module.app, configs, config.to_run_config(), faults)
        start = time.perf_counter()
        try:
            report, _, _ = run_one_shot(grid, config)
            accuracy = [report.accuracy.get(node, np.nan) for node in HONEST]
            fate = next(
                (
                    f"rejected at {stage}"
                    for stage, who in report.rejected.items()
                    if ATTACKER in who
                ),
                "capped"
                if ATTACKER in report.capped
                else "missing"
                if any(ATTACKER in m for m in report.missing.values())
                else "accepted",
            )
            honest_out = sum(node not in report.accuracy for node in HONEST)
        except ProtocolRunError as exc:
            accuracy, fate, honest_out = [np.nan] * 3, f"run failed: {exc}"[:60], 3
        return {
            "attack": attack.name,
            "head": head,
            "mode": mode,
            "seed": seed,
            # an honest client the screening left out is not evaluated: the others' mean
            "macro": float(np.nanmean(accuracy)) if not np.isnan(accuracy).all() else np.nan,
            "fate": fate,
            "honest_out": honest_out,
            "seconds": time.perf_counter() - start,
        }


def main(n_seeds: int = 3) -> None:
    if not DIGITS.exists():
        sys.exit(f"{DIGITS} not found: this benchmark needs ../shared/data")
    jobs = [
        (attack, head, mode, seed)
        for attack in ATTACKS
        for head in attack.heads
        for mode in MODES
        for seed in range(n_seeds)
    ]
    start = time.perf_counter()
    records = Parallel(n_jobs=2)(delayed(one_run)(*job) for job in jobs)
    wall = time.perf_counter() - start

    def runs(attack: Attack, head: str, mode: str) -> list[dict]:
        found = [
            r
            for r in records
            if r["attack"] == attack.name and r["head"] == head and r["mode"] == mode
        ]
        return sorted(found, key=lambda r: r["seed"])

    def macro(attack: Attack, head: str, mode: str) -> np.ndarray:
        """Honest macro accuracy (%) of each seed, in seed order."""
        return np.array([r["macro"] for r in runs(attack, head, mode)]) * 100

    def fate(attack: Attack, head: str, mode: str) -> str:
        found = runs(attack, head, mode)
        fates = ", ".join(sorted({r["fate"] for r in found}))
        out = sum(r["honest_out"] for r in found)
        return fates + (f" ({out} honest out)" if out else "")

    def shown(values: np.ndarray) -> str:
        return f"{np.mean(values):.1f} [{np.min(values):.1f}, {np.max(values):.1f}]"

    none, absent = ATTACKS[0], ATTACKS[1]
    print(f"# One hostile client among four (digits, {DIMENSION}-d, alpha {ALPHA}, tau {TAU})\n")
    print(
        f"Honest clients' macro accuracy (%), mean over {n_seeds} seeds [min, max], with the "
        'defence\'s bounds and screening (`screen = "on"`), the bounds alone (the default at '
        "a fixed tau) and no defence; vs none and vs absent: mean difference, seed by seed, to "
        "the screened runs without an attack (the attacker sending its genuine rows) and "
        "without the attacker (the three honest clients alone); what the server did with the "
        "attacker (an honest client the screening left out is not evaluated: the mean is "
        "then over the others, and the count of such runs is shown).  Generated by "
        "benchmarks/attacks.py "
        f"({len(records)} runs, {wall:.0f} s wall on 2 workers, 1 BLAS thread each).\n"
    )
    print(
        "| attack | head | screened | vs none | vs absent | attacker (screened) | bounds only "
        "| attacker (bounds) | no defence |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for attack in ATTACKS:
        if attack.adaptive and attack is next(a for a in ATTACKS if a.adaptive):
            print(f"| *adaptive, inside the default bounds* |{' |' * 8}")
        for head in attack.heads:
            on = macro(attack, head, "screened")
            base, alone = macro(none, head, "screened"), macro(absent, head, "screened")
            print(
                f"| {attack.name} | {head} | {shown(on)} | {np.mean(on - base):+.1f} | "
                f"{np.mean(on - alone):+.1f} | {fate(attack, head, 'screened')} | "
                f"{shown(macro(attack, head, 'bounds'))} | {fate(attack, head, 'bounds')} | "
                f"{shown(macro(attack, head, 'off'))} |"
            )
    changes = [
        float(np.max(np.abs(macro(a, head, mode) - macro(a, head, "off"))))
        for a in (none, absent)
        for head in a.heads
        for mode in ("screened", "bounds")
    ]
    print(
        "\nWithout an attack, the defence (bounds, or bounds and screening) changes the honest "
        f"clients' accuracy by at most {max(changes):.2f} points in any seed."
    )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
