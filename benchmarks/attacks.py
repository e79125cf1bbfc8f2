"""One hostile client among four: poisoning attacks, with and without the defence.

Three honest clients (the three digits domains, Dirichlet alpha = 0.1, one
client per domain, tau = 0.4) and one attacker run skslot's real ServerApp and
ClientApp in one process (``tests/flower_harness.py``'s ``LocalGrid``: the
messages of a deployment, without a network).  The attacker holds genuine rows
of the same distribution (as many as the median honest client, drawn from the
training rows the Dirichlet partition left unused), then lies, either in its
messages (a fault rewriting its replies, every message valid on the wire) or
in its data (it trains on poisoned rows, so its messages are consistent).

The attacks of issue #12's table, then adaptive ones, built to sit inside the
defence's default bounds (:mod:`skslot.defence`).  Each is run with the
defence on (``defence = true``, the default) and off, and the table gives the
honest clients' macro accuracy (mean over the three honest domains of the
test accuracy), mean and range over seeds, and what the server did with the
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
from skslot.datasets import digits_projection, dirichlet_partition, load_npz
from skslot.flower import DeploymentConfig, DeploymentError, run_one_shot
from skslot.flower import client_app as client_module

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
Fault = Callable[[Message, Message], Message | None]


# -- what the attacker does to its messages --------------------------------------------------


def scaled_gram(factor: float) -> Fault:
    """FedCGS statistics with the Gram matrix times ``factor``, at the honest count."""
    return tamper_statistics(lambda a: {**a, "gram_upper": a["gram_upper"] * factor})


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


def flipped_labels(X, y, rng):
    return X, (y + 1) % 10


def scaled_rows(variance_ratio: float):
    def rows(X, y, rng):
        mean = X.mean(axis=0)
        return mean + np.sqrt(variance_ratio) * (X - mean), y

    return rows


def shifted_rows(offset: float):
    """Rows moved ``offset`` of their own standard deviations (sqrt(tr S)) in a random direction."""

    def rows(X, y, rng):
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


BOUNDS = DeploymentConfig()  # the defaults the adaptive attacks stay inside
COUNT = int(0.9 * BOUNDS.max_weight_ratio)
VARIANCE = 0.5 * BOUNDS.max_variance_ratio
OFFSET = 0.8 * BOUNDS.max_mean_offset
NORM = 0.9 * BOUNDS.max_norm_ratio
BOTH = ("FedCGS", "O-FedAvg")

ATTACKS = [
    Attack("none (the attacker sends its genuine rows)", BOTH),
    Attack("none, attacker absent (the three honest clients alone)", BOTH, present=False),
    Attack("Gram matrix x1e8, honest n", ("FedCGS",), lambda: scaled_gram(1e8)),
    Attack("n x1e6 and flipped labels", BOTH, lambda: inflated_count(10**6), flipped_labels),
    Attack("coefficients x1e3, honest n", ("O-FedAvg",), lambda: scaled_heads(1e3)),
    Attack(
        "summary only (n = 2^53 - 1e5, mean + 1e3), then drops out",
        ("O-FedAvg",),
        lambda: poisoned_reference(2**53 - 10**5, 1e3),
    ),
    Attack("summary covariance x1e8", ("FedCGS",), lambda: scaled_summary(1e8)),
    Attack("flipped labels, honest n", BOTH, None, flipped_labels, adaptive=True),
    Attack(
        f"flipped labels, n x{COUNT} (inside the weight cap)",
        BOTH,
        lambda: inflated_count(COUNT),
        flipped_labels,
        adaptive=True,
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
    X, y = attack.rows(arrays["X_train"], arrays["y_train"], np.random.default_rng(seed))
    path = folder / "attacker-poisoned.npz"
    np.savez(path, **{**arrays, "X_train": X, "y_train": y})
    return {"data": str(path), "client-id": 3}


def one_run(attack: Attack, head: str, defence: bool, seed: int) -> dict:
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.ERROR)  # the rejections are in the report
    try:
        return _one_run(attack, head, defence, seed)
    finally:
        flwr_logger.setLevel(level)


def _one_run(attack: Attack, head: str, defence: bool, seed: int) -> dict:
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        configs = write_clients(folder, seed)
        configs[ATTACKER] = poison(folder, attack, seed)
        if not attack.present:
            del configs[ATTACKER]
        config = DeploymentConfig(
            head=head,
            tau=TAU,
            alpha=ALPHA,
            seed=seed,
            dataset=configs[HONEST[0]]["dataset"],
            num_clients=len(configs),
            connect_timeout=0.0,
            reply_timeout=1.0,  # LocalGrid answers at once: a missing reply never comes
            defence=defence,
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
        except DeploymentError as exc:
            accuracy, fate, honest_out = [np.nan] * 3, f"run failed: {exc}"[:60], 3
        return {
            "attack": attack.name,
            "head": head,
            "defence": defence,
            "seed": seed,
            "macro": float(np.mean(accuracy)),
            "fate": fate,
            "honest_out": honest_out,
            "seconds": time.perf_counter() - start,
        }


def main(n_seeds: int = 3) -> None:
    if not DIGITS.exists():
        sys.exit(f"{DIGITS} not found: this benchmark needs ../shared/data")
    jobs = [
        (attack, head, defence, seed)
        for attack in ATTACKS
        for head in attack.heads
        for defence in (True, False)
        for seed in range(n_seeds)
    ]
    start = time.perf_counter()
    records = Parallel(n_jobs=2)(delayed(one_run)(*job) for job in jobs)
    wall = time.perf_counter() - start

    def macro(attack: Attack, head: str, defence: bool) -> np.ndarray:
        """Honest macro accuracy (%) of each seed, in seed order."""
        runs = [
            r
            for r in records
            if r["attack"] == attack.name and r["head"] == head and r["defence"] == defence
        ]
        return np.array([r["macro"] for r in sorted(runs, key=lambda r: r["seed"])]) * 100

    def fate(attack: Attack, head: str) -> str:
        runs = [r for r in records if r["attack"] == attack.name and r["head"] == head]
        fates = ", ".join(sorted({r["fate"] for r in runs if r["defence"]}))
        out = sum(r["honest_out"] for r in runs if r["defence"])
        return fates + (f" ({out} honest out)" if out else "")

    def shown(values: np.ndarray) -> str:
        return f"{np.mean(values):.1f} [{np.min(values):.1f}, {np.max(values):.1f}]"

    none, absent = ATTACKS[0], ATTACKS[1]
    print(f"# One hostile client among four (digits, {DIMENSION}-d, alpha {ALPHA}, tau {TAU})\n")
    print(
        f"Honest clients' macro accuracy (%), mean over {n_seeds} seeds [min, max], with the "
        "defence on (the default) and off; vs none and vs absent: mean difference, seed by seed, "
        "to the defence-on runs without an attack (the attacker sending its genuine rows) and "
        "without the attacker (the three honest clients alone); what the server did with the "
        "attacker (defence on).  Generated by benchmarks/attacks.py "
        f"({len(records)} runs, {wall:.0f} s wall on 2 workers, 1 BLAS thread each).\n"
    )
    print("| attack | head | defence on | vs none | vs absent | attacker | defence off | vs none |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for attack in ATTACKS:
        if attack.adaptive and attack is next(a for a in ATTACKS if a.adaptive):
            print(f"| *adaptive, inside the default bounds* |{' |' * 7}")
        for head in attack.heads:
            on, off = macro(attack, head, True), macro(attack, head, False)
            base, alone = macro(none, head, True), macro(absent, head, True)
            print(
                f"| {attack.name} | {head} | {shown(on)} | {np.mean(on - base):+.1f} | "
                f"{np.mean(on - alone):+.1f} | {fate(attack, head)} | {shown(off)} | "
                f"{np.mean(off - base):+.1f} |"
            )
    same = all(
        np.array_equal(macro(a, head, True), macro(a, head, False))
        for a in (none, absent)
        for head in a.heads
    )
    print(
        f"\nWithout an attack, defence on and off give {'identical' if same else 'DIFFERENT'} "
        "accuracies in every seed."
    )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
