"""One hostile client among four (or three): poisoning attacks, with and without the defence.

Three honest clients (the three digits domains, Dirichlet alpha = 0.1, one
client per domain, tau = 0.4; two of them where K = 3) and one attacker run
skslot's real ServerApp and ClientApp in one process
(``tests/flower_harness.py``'s ``LocalGrid``: the messages of a deployment,
without a network).  The attacker holds genuine rows of the same distribution
(as many as the median honest client, drawn from the training rows the
Dirichlet partition left unused), then lies, either in its messages (a fault
rewriting its replies, every message valid on the wire) or in its data (it
trains on poisoned rows, so its messages are consistent).  In the federations
where "a class only it holds", the honest clients' training rows of the class
the attacker holds most of are dropped (their test rows kept).

Attacks on each kind of message (scaled statistics, a degenerate summary,
flipped labels), then adaptive ones, built to sit inside the defence's
default bounds (:mod:`skslot.defence`) or to slip past its screening
(:mod:`skslot.defence.screening`): split views (one contribution to the screening,
another to a later stage), a class only it holds, framing votes, false
claims.  Each is run three ways: with the defence's default (its bounds and
the leave-one-client-out screening, ``screen = "auto"``: at a fixed tau the
clients then hold out validation rows), with the bounds alone (``screen =
"off"``), and with no defence; the table gives the honest clients' macro
accuracy (mean over the honest domains of the test accuracy), mean and range
over seeds, what the server did with the attacker, and the verdict against
the runs of the same federation without an attack.

The 1280-d features go through a fixed, data-independent orthonormal
projection to 256 dimensions first (a public linear layer every client
applies; the same as tests/test_bench.py's), which keeps the 1,700-odd runs to
about half an hour.  The runs are kept in docs/results/attacks.json.

Run: python benchmarks/attacks.py [n_seeds] > docs/results/attacks.md
(about 30 minutes on 2 cores for 3 seeds; needs ../shared/data).
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from flwr.app import Message, RecordDict
from joblib import Parallel, delayed
from skslot_bench import CASE_TITLES, CASES, own_mix_rows
from threadpoolctl import threadpool_limits

from skslot import GaussianSummary
from skslot._linalg import symmetric_from_upper
from skslot.datasets import digits_projection, dirichlet_partition, load_npz
from skslot.defence.consistency import OWN_MEANS_AGREEMENT
from skslot.flower import DeploymentConfig, load_client_data, run_one_shot
from skslot.flower import client_app as client_module
from skslot.protocol import ClientParty, ProtocolRunError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from skslot.flower import messages
from skslot.protocol.stages import screening as screening_stage
from skslot.protocol.stages import upload as upload_stage
from tests.flower_harness import (
    LocalGrid,
    evaluated_rows,
    evaluation_reply,
    inflated_count,
    own_summary,
    rewrite_updates,
    rewrite_upload,
    scaled_heads,
    scaled_summary,
    tamper_statistics,
)

DIGITS = Path(__file__).resolve().parents[2] / "shared" / "data" / "digits_effnet_lite0.npz"
RECORDS = Path(__file__).resolve().parents[1] / "docs" / "results" / "attacks.json"
HONEST, ATTACKER = (11, 12, 13), 14
#: Fewest training rows of an honest client where the partition deals several per domain.
FEWEST_ROWS = 20
DIMENSION, ALPHA, TAU = 256, 0.1, 0.4
#: Each case's alignment: the paper's geodesic at TAU, every client alike, where every class of
#: the domain is served; the library's default (each client's domain offset moved, measured
#: within classes) where each client's rows follow its own mix, and its test rows are drawn so
SLOT = {
    "domain": {"tau": TAU, "client_tau": "uniform", "mean_tau": None, "label_mix": "federation"},
    "own mix": {"label_mix": "client"},
}
CASE_SETTINGS = {
    "own mix": "The library's default alignment (`label_mix = \"client\"`: each client's "
    "domain offset moved, measured within classes, its covariance kept); each honest "
    "client's test rows drawn from its domain's test split with its training class "
    "proportions, the head predicting with its own prior.",
    "domain": f"The paper's geodesic at tau {TAU}, every client alike; each honest client's "
    "test rows its domain's whole test split.",
}
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


def refit_heads(factor: float) -> Fault:
    """Genuine local heads at the ``updates`` stage (the ones the screening judges), then at the
    refit (``part = "all"``) its heads times ``factor`` (negative: they score the wrong
    classes)."""

    def fault(request: Message, reply: Message) -> Message | None:
        if request.metadata.message_type != "train.updates" or reply.has_error():
            return reply
        if request.content.config_records[messages.CONFIG]["part"] != "all":
            return reply

        def scaled(arrays: dict) -> dict:
            heads = ("coef", "intercept")
            return {n: a * factor if n.endswith(heads) else a for n, a in arrays.items()}

        return rewrite_updates(request, reply, scaled)

    return fault


def edited_updates(edit: Callable[[dict], dict]) -> Fault:
    """Every local head the client sends (at the updates stage and a refit) with its arrays
    replaced by ``edit(arrays)``."""

    def fault(request: Message, reply: Message) -> Message | None:
        if request.metadata.message_type != "train.updates" or reply.has_error():
            return reply
        return rewrite_updates(request, reply, edit)

    return fault


def one_class_heads(factor: float, target: int) -> Fault:
    """O-FedAvg local heads that score only class ``target``: every coefficient zero, that
    class's intercept ``factor`` times the norm of its genuine head."""

    def edit(arrays: dict) -> dict:
        out = {}
        for name, a in arrays.items():
            if name.endswith("coef"):
                out[name] = np.zeros_like(a)
            elif name.endswith("intercept"):
                coef = arrays[name[: -len("intercept")] + "coef"]
                out[name] = np.zeros_like(a)
                out[name][target] = factor * np.sqrt(np.sum(coef**2) + np.sum(a**2))
            else:
                out[name] = a
        return out

    return edited_updates(edit)


def minority_heads(factor: float, share: float) -> Fault:
    """O-FedAvg local heads whose rows of the classes holding its fewest rows (fewer than
    ``share`` of them) are ``factor`` times the genuine ones: the classes of the rest keep
    their genuine rows, so their means stay in their classes (the updates stage's check)."""

    def edit(arrays: dict) -> dict:
        out = dict(arrays)
        for name, rows in arrays.items():
            if not name.endswith("class_rows"):
                continue
            prefix = name[: -len("class_rows")]
            order = np.argsort(rows)[::-1]  # most rows first
            most = np.searchsorted(np.cumsum(rows[order]), (1.0 - share) * rows.sum())
            kept = order[: most + 1]
            changed = np.setdiff1d(np.flatnonzero(rows), kept)
            for part in ("coef", "intercept"):
                a = arrays[prefix + part].copy()
                a[changed] *= factor
                out[prefix + part] = a
        return out

    return edited_updates(edit)


def one_row_heads(factor: float, target: int) -> Fault:
    """O-FedAvg local heads whose row of class ``target`` (coefficients and intercept) is
    ``factor`` times the genuine one, every other row genuine: its own class means stay in
    their classes (the updates stage's check), and the class's scores rise on every row."""

    def edit(arrays: dict) -> dict:
        out = dict(arrays)
        for name, a in arrays.items():
            if name.endswith(("coef", "intercept")):
                out[name] = a.copy()
                out[name][target] *= factor
        return out

    return edited_updates(edit)


def moved_validation_part(offset: float) -> Fault:
    """The upload's validation part (what the final head merges without a screening) with
    each class's rows moved ``offset`` standard deviations (``sqrt(tr S)`` of its summary)
    along its class direction, the sign alternating class by class; its fitting part, summary
    and counts genuine, the moved part consistent in itself (FedCGS: sums and Gram matrix;
    FedPFT: every component's mean)."""

    def fault(request: Message, reply: Message) -> Message | None:
        if request.metadata.message_type != "query.upload" or reply.has_error():
            return reply
        name = upload_stage.VALIDATION_STATISTICS
        if name not in reply.content.array_records:
            return reply
        own = own_summary(reply)
        size = offset * np.sqrt(np.trace(own.covariance))
        arrays = {n: a.numpy() for n, a in reply.content.array_records[name].items()}
        if "gram_upper" in arrays:  # FedCGS: class sums and the Gram matrix of the part
            arrays = _moved_sums(arrays, own.mean, size)
        else:  # FedPFT: per-class mixtures
            arrays = _moved_mixtures(arrays, own.mean, size)
        content = RecordDict({messages.CONFIG: reply.content.config_records[messages.CONFIG]})
        for kept, record in reply.content.array_records.items():
            content[kept] = record
        content[name] = messages.arrays_to_record(arrays)
        return Message(content, reply_to=request)

    return fault


def _direction(mean: np.ndarray, centre: np.ndarray, sign: float) -> np.ndarray:
    d = mean - centre
    return sign * d / max(np.linalg.norm(d), 1e-300)


def _moved_sums(arrays: dict, centre: np.ndarray, size: float) -> dict:
    """Class sums, their total ``s1`` and Gram matrix (both about ``shift``) of the rows of each
    class moved by ``d_c``: ``G + sum_c (z_c d_c^T + d_c z_c^T + n_c d_c d_c^T)``."""
    counts, sums = arrays["counts"], arrays["sums"].astype(np.float64).copy()
    shift, s1 = arrays["shift"].astype(np.float64), arrays["s1"].astype(np.float64).copy()
    m = sums.shape[1]
    gram = symmetric_from_upper(arrays["gram_upper"], m)
    sign = 1.0
    for c in np.flatnonzero(counts > 0):
        d = size * _direction(sums[c] / counts[c], centre, sign)
        z = sums[c] - counts[c] * shift
        gram = gram + np.outer(z, d) + np.outer(d, z) + counts[c] * np.outer(d, d)
        sums[c] += counts[c] * d
        s1 += counts[c] * d
        sign = -sign
    upper = gram[np.triu_indices(m)]
    return {
        **arrays,
        "sums": sums.astype(arrays["sums"].dtype),
        "s1": s1.astype(arrays["s1"].dtype),
        "gram_upper": upper.astype(arrays["gram_upper"].dtype),
    }


def _moved_mixtures(arrays: dict, centre: np.ndarray, size: float) -> dict:
    means = arrays["means"].astype(np.float64).copy()
    weights = arrays["weights"]
    start, sign = 0, 1.0
    for k in arrays["n_components"]:
        part = slice(start, start + int(k))
        mean = weights[part] @ means[part] / max(weights[part].sum(), 1e-300)
        means[part] += size * _direction(mean, centre, sign)
        start, sign = start + int(k), -sign
    return {**arrays, "means": means.astype(arrays["means"].dtype)}


def framing_votes(request: Message, reply: Message) -> Message | None:
    """At the screening, every row it scores "better without" each client it votes on."""
    if request.metadata.message_type != screening_stage.STAGE.message_type or reply.has_error():
        return reply
    record = reply.content.array_records[screening_stage.PAIRED]
    rows = record["rows"].numpy()
    counts = {"better": rows, "worse": np.zeros_like(rows), "rows": rows}
    return Message(
        RecordDict({screening_stage.PAIRED: messages.arrays_to_record(counts)}), reply_to=request
    )


def claims_every_row(request: Message, reply: Message) -> Message | None:
    """At the evaluation, every test row claimed right."""
    if request.metadata.message_type != "evaluate.head" or reply.has_error():
        return reply
    n = evaluated_rows(reply)
    return evaluation_reply(request, n, n)


# -- what the attacker does to its rows --------------------------------------------------------


def flipped_labels(X, y, rng, setup):
    return X, (y + 1) % 10


def repeated(rows, times: int):
    """The attacker's rows (after ``rows``) ``times`` over: a count inflated consistently, in
    its summary, class counts and statistics alike."""

    def repeated_rows(X, y, rng, setup):
        X, y = rows(X, y, rng, setup)
        return np.tile(X, (times, 1)), np.tile(y, times)

    return repeated_rows


def flipped_own_classes(X, y, rng, setup):
    """Labels flipped only on the classes of which no honest client holds a validation row:
    none of the others' validation rows can show the harm, which lands on their test rows of
    those classes (the screening's documented limit)."""
    own = ~np.isin(y, setup.honest_classes)
    if not own.any():
        raise ValueError("the attacker holds no class the honest clients lack: nothing to flip")
    return X, np.where(own, (y + 1) % 10, y)


def permuted_victim_classes(X, y, rng, setup):
    """Labels permuted within one honest client's classes (:meth:`Setup.victim_classes`):
    each of the attacker's rows of one of them labelled the next of them (cyclically), so the
    harm lands on that client's classes; its other rows kept."""
    victim = setup.victim_classes()
    if victim.size < 2:
        raise ValueError("the victim holds fewer than two classes: nothing to permute")
    following = victim[(np.searchsorted(victim, y) + 1) % victim.size]
    return X, np.where(np.isin(y, victim), following, y)


def unchanged(X, y, rng, setup):
    return X, y


def one_own_class(X, y, rng, setup):
    """Every row labelled the class only it holds: the full head sends the others' rows there."""
    return X, np.full_like(y, setup.own_class)


def scaled_rows(variance_ratio: float):
    def rows(X, y, rng, setup):
        mean = X.mean(axis=0)
        return mean + np.sqrt(variance_ratio) * (X - mean), y

    return rows


def shifted_rows(offset: float):
    """Rows moved ``offset`` of their own standard deviations (sqrt(tr S)) in a random direction."""

    def rows(X, y, rng, setup):
        u = rng.normal(size=X.shape[1])
        return X + offset * np.sqrt(np.trace(np.cov(X.T))) * u / np.linalg.norm(u), y

    return rows


@dataclass(frozen=True)
class Setup:
    """What one run's attacker knows of the federation."""

    #: the classes an honest client holds validation rows of (5 rows or more at a 0.2 split)
    honest_classes: np.ndarray
    #: the class only the attacker holds (in the own-class federation), else -1
    own_class: int
    #: each honest client's classes (5 training rows or more), in node order
    honest_class_sets: tuple[np.ndarray, ...]
    #: the classes the attacker holds training rows of
    attacker_classes: np.ndarray

    def victim_classes(self) -> np.ndarray:
        """The classes of the honest client the attacker shares most classes with (the first
        of equals)."""
        return max(
            self.honest_class_sets, key=lambda c: len(np.intersect1d(c, self.attacker_classes))
        )

    def undeclared_class(self) -> int:
        """A class an honest client holds and the attacker holds no row of."""
        held = np.setdiff1d(self.honest_classes, self.attacker_classes)
        if held.size == 0:
            raise ValueError("the attacker holds every class the honest clients hold")
        return int(held[0])


@dataclass(frozen=True)
class Attack:
    name: str
    heads: tuple[str, ...]
    fault: Callable[[Setup], Fault] | None = None
    rows: Callable | None = None
    adaptive: bool = False
    present: bool = True
    settings: tuple = ()  # run config overrides, as (name, value) pairs
    honest: tuple[int, ...] = HONEST  # the honest nodes taking part (K = len(honest) + 1)
    own_class: bool = False  # the honest clients hold no training row of the attacker's class
    against_new_rules: bool = False  # designed against the screened final head and vote rule
    per_domain: int = 1  # clients per digits domain the partition deals (see honest_nodes)

    @property
    def federation(self) -> tuple:
        """The runs that are its baselines: same honest clients, class split and settings."""
        return (self.honest, self.own_class, self.settings, self.per_domain)


BOUNDS = DeploymentConfig()  # the defaults the adaptive attacks stay inside
COUNT = int(0.9 * BOUNDS.max_weight_ratio)
VARIANCE = 0.5 * BOUNDS.max_variance_ratio
HIGH_VARIANCE = 0.9 * BOUNDS.max_variance_ratio
OFFSET = 0.8 * BOUNDS.max_mean_offset
NORM = 0.9 * BOUNDS.max_norm_ratio
SPLIT_OFFSET = 0.95 * BOUNDS.max_mean_offset
#: The largest of 2, 3, 5 and 9 whose heads still place the attacker's own class means
#: (seeds 0-2): a row of a class only it holds raised that much.
ROW_FACTOR = 5.0
BOTH = ("FedCGS", "O-FedAvg")
ALL = ("FedCGS", "FedPFT", "O-FedAvg")
STATISTICS = ("FedCGS", "FedPFT")
#: A private federation: every release under one budget; O-FedAvg's C * clip_norm^2 = 0.1
PRIVATE = (("epsilon", 16.0), ("clip_norm", 20.0), ("head_params", '{"C": 0.00025}'))
AUTO = (("tau", "auto"),)
#: the deployment's defaults (a fixed tau, each client's by its label shift, the mean moved fully)
DEFAULTS = (("tau", BOUNDS.tau), ("client_tau", BOUNDS.client_tau), ("mean_tau", BOUNDS.mean_tau))
THREE = HONEST[:2]  # K = 3: two honest clients and the attacker
#: The defence's three ways: its default (bounds and screening), bounds alone, none.
MODES = {
    "screened": {"defence": True, "screen": "auto"},
    "bounds": {"defence": True, "screen": "off"},
    "off": {"defence": False, "screen": "off"},
}


def baselines(honest=HONEST, own_class=False, heads=ALL, settings=(), what="") -> list[Attack]:
    """The attacker sending its genuine rows, and absent, in one federation."""
    k = f"K = {len(honest) + 1}" + (", a class only the fourth client holds" if own_class else "")
    k += f", {what}" if what else ""
    return [
        Attack(f"none (the attacker sends its genuine rows; {k})", heads, honest=honest,
               own_class=own_class, settings=settings),
        Attack(f"none, attacker absent ({k})", heads, present=False, honest=honest,
               own_class=own_class, settings=settings),
    ]  # fmt: skip


ATTACKS = [
    *baselines(),
    *baselines(THREE),
    *baselines(own_class=True),
    *baselines(settings=AUTO, what='tau = "auto"'),
    *baselines(settings=DEFAULTS, what="the deployment's defaults"),
    *baselines(heads=("O-FedAvg",), settings=PRIVATE, what="a private federation (epsilon 16)"),
    Attack("Gram matrix x1e8, honest n", ("FedCGS",), lambda _: scaled_gram(1e8)),
    Attack(
        "summary's 10 largest eigenvalues x1e-9 (trace kept), real statistics",
        STATISTICS,
        lambda _: collapsed_summary(10, 1e-9),
    ),
    Attack(
        "mixture covariances x1e8 (covariance factors x1e4)",
        ("FedPFT",),
        lambda _: scaled_mixture_covariances(1e4),
    ),
    Attack(
        "class sums moved 5 sd between its classes (totals, Gram, counts kept)",
        ("FedCGS",),
        lambda _: moved_class_sums(5.0),
    ),
    Attack("n x1e6 and flipped labels", BOTH, lambda _: inflated_count(10**6), flipped_labels),
    Attack("coefficients x1e3, honest n", ("O-FedAvg",), lambda _: scaled_heads(1e3)),
    Attack(
        "summary only (n = 2^53 - 1e5, mean + 1e3), then drops out",
        ("O-FedAvg",),
        lambda _: poisoned_reference(2**53 - 10**5, 1e3),
    ),
    Attack(
        "summary only (n = 2^53 - 1e5, mean + 1e3), then drops out, private (epsilon 16)",
        ("O-FedAvg",),
        lambda _: poisoned_reference(2**53 - 10**5, 1e3),
        settings=PRIVATE,
    ),
    Attack("summary covariance x1e8", STATISTICS, lambda _: scaled_summary(1e8)),
    Attack(
        "shrinkage 1 (a spherical derived summary), real statistics",
        ("FedCGS",),
        lambda _: announced_shrinkage(1.0),
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
        f"flipped labels, rows x{COUNT}, K = 3",
        ALL,
        rows=repeated(flipped_labels, COUNT),
        adaptive=True,
        honest=THREE,
    ),
    Attack(
        f"flipped labels, rows x{COUNT}, the deployment's defaults (tau {BOUNDS.protocol().tau:g}, "
        f"client-tau {BOUNDS.client_tau}, mean-tau {BOUNDS.mean_tau:g})",
        ALL,
        rows=repeated(flipped_labels, COUNT),
        adaptive=True,
        settings=DEFAULTS,
    ),
    Attack(
        f"flipped labels, rows x{COUNT}, private (epsilon 16)",
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
        lambda _: scaled_heads(NORM),
        adaptive=True,
    ),
    Attack(
        f"split view: genuine local heads at the updates stage, heads x-{NORM:g} at the "
        'refit (tau = "auto")',
        ("O-FedAvg",),
        lambda _: refit_heads(-NORM),
        adaptive=True,
        settings=AUTO,
        against_new_rules=True,
    ),
    Attack(
        f"split view: validation part's class means moved +-{SPLIT_OFFSET:g} sd along their "
        'class directions (tau = "auto")',
        STATISTICS,
        lambda _: moved_validation_part(SPLIT_OFFSET),
        adaptive=True,
        settings=AUTO,
        against_new_rules=True,
    ),
    Attack(
        f"a class only it holds: local heads scoring only that class at x{NORM:g} their norm",
        ("O-FedAvg",),
        lambda setup: one_class_heads(NORM, setup.own_class),
        adaptive=True,
        own_class=True,
        against_new_rules=True,
    ),
    Attack(
        f"a class only it holds: its local heads' row of that class x{ROW_FACTOR:g} (its own "
        "class means still placed)",
        ("O-FedAvg",),
        lambda setup: one_row_heads(ROW_FACTOR, setup.own_class),
        adaptive=True,
        own_class=True,
        against_new_rules=True,
    ),
    Attack(
        f"a class only it holds: every row labelled that class, rows x{COUNT}",
        ALL,
        rows=repeated(one_own_class, COUNT),
        adaptive=True,
        own_class=True,
        against_new_rules=True,
    ),
    Attack(
        f"a class only it holds: its labels flipped on that class, rows x{COUNT} "
        "(the documented limit)",
        ALL,
        rows=repeated(flipped_own_classes, COUNT),
        adaptive=True,
        own_class=True,
    ),
    Attack(
        'vote manipulation: every scored row "better without" each honest client',
        ALL,
        lambda _: framing_votes,
        adaptive=True,
        against_new_rules=True,
    ),
    Attack(
        'vote manipulation: every scored row "better without" each honest client, K = 3',
        ("O-FedAvg",),
        lambda _: framing_votes,
        adaptive=True,
        honest=THREE,
        against_new_rules=True,
    ),
    Attack(
        "vote manipulation, private (epsilon 16)",
        ("O-FedAvg",),
        lambda _: framing_votes,
        adaptive=True,
        settings=PRIVATE,
        against_new_rules=True,
    ),
    Attack(
        "claims every test row right",
        ALL,
        lambda _: claims_every_row,
        adaptive=True,
    ),
    *baselines(THREE, heads=STATISTICS, settings=AUTO, what='tau = "auto"'),
    Attack(
        f"labels permuted within one honest client's classes, rows x{COUNT}",
        STATISTICS,
        rows=repeated(permuted_victim_classes, COUNT),
        adaptive=True,
        against_new_rules=True,
    ),
    Attack(
        f"a local head scoring a class it declares no rows of (an honest client holds it), "
        f"x{NORM:g} its norm",
        ("O-FedAvg",),
        lambda setup: one_class_heads(NORM, setup.undeclared_class()),
        adaptive=True,
        against_new_rules=True,
    ),
    Attack(
        f"summary's variance x{HIGH_VARIANCE:g} (statistics genuine), rows x{COUNT}: through "
        "the reference",
        ("FedPFT", "O-FedAvg"),
        lambda _: scaled_summary(HIGH_VARIANCE),
        rows=repeated(unchanged, COUNT),
        adaptive=True,
        against_new_rules=True,
    ),
    Attack(
        f"rows scaled, variance x{HIGH_VARIANCE:g}, rows x{COUNT} (consistent)",
        ALL,
        rows=repeated(scaled_rows(HIGH_VARIANCE), COUNT),
        adaptive=True,
        against_new_rules=True,
    ),
    Attack(
        f"split view: validation part's class means moved +-{SPLIT_OFFSET:g} sd along their "
        'class directions (tau = "auto"), K = 3',
        STATISTICS,
        lambda _: moved_validation_part(SPLIT_OFFSET),
        adaptive=True,
        settings=AUTO,
        honest=THREE,
        against_new_rules=True,
    ),
    Attack(
        "every local head x-3, honest n",
        ("O-FedAvg",),
        lambda _: scaled_heads(-3.0),
        adaptive=True,
        against_new_rules=True,
    ),
    Attack(
        f"local heads x-3 on the classes of its fewest rows (under {1 - OWN_MEANS_AGREEMENT:.0%} "
        "of them), honest n",
        ("O-FedAvg",),
        lambda _: minority_heads(-3.0, 1.0 - OWN_MEANS_AGREEMENT),
        adaptive=True,
        against_new_rules=True,
    ),
]


# -- one run -----------------------------------------------------------------------------------


def honest_nodes(per_domain: int) -> tuple[int, ...]:
    """The honest nodes of a partition of ``per_domain`` clients per domain: one per client,
    from node 2 (node 1 is the SuperLink's); the attacker's, :data:`ATTACKER`, comes after
    every one of them."""
    return HONEST if per_domain == 1 else tuple(range(2, 3 * per_domain + 2))


def write_clients(
    folder: Path, seed: int, own_class: bool = False, case: str = "domain", per_domain: int = 1
) -> tuple[dict, Setup]:
    """Each honest node's rows and the attacker's, in their own ``.npz`` files (the
    user's-own-data mode), and what the attacker knows.

    With ``own_class``, the honest clients' training rows of the class the attacker holds
    most of are dropped (their test rows kept): that class is one only it holds.  In the
    own-mix case each honest client's test rows are drawn from its domain's test split with
    its training class proportions (as many as the split holds).  With ``per_domain`` above
    one, the nodes of :func:`honest_nodes` are the partition's clients taken one domain after
    the other (the first client of each domain, then the second, ...), those of fewer than
    :data:`FEWEST_ROWS` training rows left out.
    """
    data = load_npz(DIGITS)
    X = data.X.astype(np.float64) @ digits_projection(data.X.shape[1], DIMENSION)
    part = dirichlet_partition(
        data.y, data.domain, alpha=ALPHA, clients_per_domain=per_domain, random_state=seed
    )
    # the attacker looks like an honest client: the median client's class counts, classes
    # permuted, drawn from the training rows the partition left unused
    rng = np.random.default_rng(seed)
    unused = np.setdiff1d(np.arange(data.y.shape[0]), np.r_[part.train_index, part.test_index])
    sizes = part.class_counts.sum(axis=1)
    counts = rng.permutation(part.class_counts[np.argsort(sizes)[len(sizes) // 2]])
    pools = [rng.permutation(unused[data.y[unused] == c]) for c in range(counts.shape[0])]
    train = np.concatenate([pool[:n] for pool, n in zip(pools, counts, strict=True)])
    test = np.concatenate([pool[n : n + 10] for pool, n in zip(pools, counts, strict=True)])
    own = int(np.argmax(counts)) if own_class else -1
    configs = {}
    honest_counts = []
    dealt = [d * per_domain + j for j in range(per_domain) for d in range(3)]
    if per_domain > 1:  # an empty or nearly empty client takes no part
        dealt = [k for k in dealt if np.sum(part.train_client == k) >= FEWEST_ROWS]
    for k, node in zip(dealt, honest_nodes(per_domain), strict=False):
        rows = part.train_index[part.train_client == k]
        rows = rows[data.y[rows] != own]
        held_out = part.test_index[part.test_client == k]
        if case == "own mix":
            mix = np.bincount(data.y[rows], minlength=counts.shape[0])
            drawn = own_mix_rows(
                data.y[held_out], mix, np.arange(counts.shape[0]), held_out.shape[0], [seed, k]
            )
            held_out = held_out[drawn]
        path = folder / f"honest{k}.npz"
        np.savez(
            path, X_train=X[rows], y_train=data.y[rows], X_test=X[held_out],
            y_test=data.y[held_out],
        )  # fmt: skip
        configs[node] = {"data": str(path), "client-id": k}
        honest_counts.append(np.bincount(data.y[rows], minlength=counts.shape[0]))
    np.savez(
        folder / "attacker.npz",
        X_train=X[train],
        y_train=data.y[train],
        X_test=X[test],
        y_test=data.y[test],
    )
    configs[ATTACKER] = {"data": str(folder / "attacker.npz"), "client-id": 3 * per_domain}
    honest_classes = np.flatnonzero((np.array(honest_counts) >= 5).any(axis=0))
    sets = tuple(np.flatnonzero(c >= 5) for c in honest_counts)
    return configs, Setup(honest_classes, own, sets, np.flatnonzero(counts > 0))


def poison(folder: Path, attack: Attack, seed: int, setup: Setup, genuine: dict) -> dict:
    """The attacker's node config for this attack: ``genuine`` (:func:`write_clients`'), its
    rows poisoned if the attack says so."""
    if attack.rows is None:
        return genuine
    with np.load(genuine["data"]) as archive:
        arrays = dict(archive)
    X, y = attack.rows(arrays["X_train"], arrays["y_train"], np.random.default_rng(seed), setup)
    path = folder / "attacker-poisoned.npz"
    np.savez(path, **{**arrays, "X_train": X, "y_train": y})
    return {**genuine, "data": str(path)}


def in_process(
    folder: Path,
    attack: Attack,
    head: str,
    seed: int,
    *,
    screen: str = "on",
    party: Callable[[int], type[ClientParty]] = lambda node: ClientParty,
    case: str = "domain",
) -> tuple[DeploymentConfig, dict[int, ClientParty], Setup]:
    """The federation of one seed in process (the protocol's one driver, the same messages
    as over Flower) in ``case``: the nodes of :func:`federation` (their files in ``folder``),
    the run's configuration of :func:`run_settings` with ``screen``.

    Each node's party is of the class ``party(node)``, with its training and test rows.
    Returns the configuration, the parties by node and what the attacker knows.
    """
    configs, setup = federation(folder, attack, seed, case)
    config = DeploymentConfig(**run_settings(attack, head, case, seed, len(configs), screen=screen))
    head_object = config.make_head()
    parties = {}
    for node, node_config in configs.items():
        data = load_client_data(node_config, config, node)
        parties[node] = party(node)(
            data.X_train, data.y_train, head=head_object, classes=config.class_set,
            label=data.client, summary_estimator=config.summary_estimator(),
            X_test=data.X_test, y_test=data.y_test,
        )  # fmt: skip
    return config, parties, setup


def one_run(attack: Attack, head: str, mode: str, seed: int, case: str = "domain") -> dict:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {sorted(MODES)}, got {mode!r}")
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.setLevel(logging.ERROR)  # the rejections are in the report
    try:
        return _one_run(attack, head, mode, seed, case)
    finally:
        flwr_logger.setLevel(level)


def federation(folder: Path, attack: Attack, seed: int, case: str) -> tuple[dict, Setup]:
    """The node configs of one run of ``attack`` (files in ``folder``): its honest nodes
    and the attacker's, its rows poisoned, unless the attack runs without it; and what the
    attacker knows."""
    configs, setup = write_clients(folder, seed, attack.own_class, case, attack.per_domain)
    configs[ATTACKER] = poison(folder, attack, seed, setup, configs[ATTACKER])
    absent = set(attack.honest) - set(configs)
    if absent:
        raise ValueError(f"seed {seed}: too few clients of {FEWEST_ROWS} rows or more")
    configs = {n: c for n, c in configs.items() if n in attack.honest or n == ATTACKER}
    if not attack.present:
        del configs[ATTACKER]
    return configs, setup


def run_settings(
    attack: Attack, head: str, case: str, seed: int, num_clients: int, **extra
) -> dict:
    """The run configuration (:class:`DeploymentConfig`'s arguments) of one run of
    ``attack``: the case's alignment, the study's alpha, ``extra``, the attack's own."""
    return {
        "head": head, **SLOT[case], "alpha": ALPHA, "seed": seed, "num_clients": num_clients,
        **extra, **dict(attack.settings),
    }  # fmt: skip


def _one_run(attack: Attack, head: str, mode: str, seed: int, case: str) -> dict:
    with threadpool_limits(1), tempfile.TemporaryDirectory() as tmp:
        configs, setup = federation(Path(tmp), attack, seed, case)
        settings = run_settings(
            attack, head, case, seed, len(configs), connect_timeout=0.0,
            reply_timeout=1.0,  # LocalGrid answers at once: a missing reply never comes
            **MODES[mode],
        )  # fmt: skip
        config = DeploymentConfig(**settings)
        faults = {ATTACKER: attack.fault(setup)} if attack.fault else {}
        grid = LocalGrid(client_module.app, configs, config.to_run_config(), faults)
        start = time.perf_counter()
        honest = attack.honest
        try:
            report, _, _ = run_one_shot(grid, config)
            # each node's whole test split (its rows are drawn with its own mix already)
            accuracy = [report.test_accuracy.get(node, np.nan) for node in honest]
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
            honest_out = sum(node not in report.test_accuracy for node in honest)
            claimed = float(np.mean(list(report.test_accuracy.values())))
        except ProtocolRunError as exc:
            accuracy, fate = [np.nan] * len(honest), f"run failed: {exc}"[:60]
            honest_out = len(honest)
            claimed = np.nan
        return {
            "attack": attack.name,
            "case": case,
            "head": head,
            "mode": mode,
            "seed": seed,
            # an honest client the screening left out is not evaluated: the others' mean
            "macro": float(np.nanmean(accuracy)) if not np.isnan(accuracy).all() else np.nan,
            "claimed": claimed,
            "fate": fate,
            "honest_out": honest_out,
            "seconds": time.perf_counter() - start,
        }


def run_attacks(attacks: list[Attack], n_seeds: int, records: Path) -> tuple[list[dict], float]:
    """Every run of ``attacks`` (each head, way of the defence, seed and case) on two
    workers, and the seconds they took; the runs are written to ``records`` (JSON), should a
    table need to be made again."""
    jobs = [
        (attack, head, mode, seed, case)
        for case in CASES
        for attack in attacks
        for head in attack.heads
        for mode in MODES
        for seed in range(n_seeds)
    ]
    start = time.perf_counter()
    found = Parallel(n_jobs=2)(delayed(one_run)(*job) for job in jobs)
    wall = time.perf_counter() - start
    with records.open("w") as f:
        json.dump(found, f, default=float)
    return found, wall


def main(n_seeds: int = 3) -> None:
    if not DIGITS.exists():
        sys.exit(f"{DIGITS} not found: this benchmark needs ../shared/data")
    found, wall = run_attacks(ATTACKS, n_seeds, RECORDS)
    print(f"# One hostile client (digits, {DIMENSION}-d, alpha {ALPHA})\n")
    print(
        "Three honest clients (the three digits domains; two where K = 3) and a fourth that "
        f"attacks, in both cases (`skslot_bench.CASES`), {len(found)} runs, {wall:.0f} s wall "
        "on 2 workers, 1 BLAS thread each (benchmarks/attacks.py).  What the screening adds "
        "to a run's bytes and time, at four clients and at eight: "
        "docs/results/protocol_cost.md.\n"
    )
    for case in CASES:
        report([r for r in found if r["case"] == case], case, n_seeds)


def report(records: list[dict], case: str, n_seeds: int, attacks: list[Attack] = ATTACKS) -> None:
    """One case's table of ``attacks``, verdicts and honest exclusions."""

    def runs(attack: Attack, head: str, mode: str) -> list[dict]:
        found = [
            r
            for r in records
            if r["attack"] == attack.name and r["head"] == head and r["mode"] == mode
        ]
        return sorted(found, key=lambda r: r["seed"])

    def macro(attack: Attack, head: str, mode: str, key: str = "macro") -> np.ndarray:
        """Honest macro accuracy (%) of each seed, in seed order."""
        return np.array([r[key] for r in runs(attack, head, mode)]) * 100

    def fate(attack: Attack, head: str, mode: str) -> str:
        found = runs(attack, head, mode)
        fates = ", ".join(sorted({r["fate"] for r in found}))
        out = sum(r["honest_out"] for r in found)
        return fates + (f" ({out} honest out)" if out else "")

    def shown(values: np.ndarray) -> str:
        return f"{np.mean(values):.1f} [{np.min(values):.1f}, {np.max(values):.1f}]"

    def baseline(attack: Attack, present: bool) -> Attack:
        return next(
            a
            for a in attacks
            if a.name.startswith("none (" if present else "none, attacker absent")
            and a.federation == attack.federation
        )

    def verdict(attack: Attack, head: str) -> str:
        if attack.name.startswith("none"):
            return ""
        found = runs(attack, head, "screened")
        if all(r["fate"].startswith("rejected") for r in found):
            return "rejected"
        on = np.mean(macro(attack, head, "screened"))
        bar = min(
            np.mean(macro(baseline(attack, True), head, "screened")),
            np.mean(macro(baseline(attack, False), head, "screened")),
        )
        return f"within 5 ({on - bar:+.1f})" if on >= bar - 5 else f"**{on - bar:+.1f}**"

    print(f"## {CASE_TITLES[case]}\n")
    print(
        f"{CASE_SETTINGS[case]} Honest clients' macro accuracy (%), mean over {n_seeds} seeds "
        "[min, max], "
        "with the defence's default (bounds and the screening, which a run of four clients or "
        'more holds at a fixed tau too), the bounds alone (`screen = "off"`) and no defence; '
        "vs genuine and vs alone: mean difference, seed by seed, to the default's runs of the "
        "same federation with the fourth client sending its genuine rows, and without it; "
        "what the server did with the attacker (an honest client the screening left out is "
        "not evaluated: the mean is then over the others, and the count of such runs is "
        "shown); *verdict*: the attacker rejected in every seed, or the honest accuracy "
        "within 5 points of the lower of the genuine and alone runs (the gap shown), else "
        "in bold.\n"
    )
    print(
        "| attack | head | default defence | vs genuine | vs alone | attacker (default) "
        "| verdict | bounds only | attacker (bounds) | no defence |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    headings = {
        next((a.name for a in attacks if a.adaptive), ""): "adaptive, inside the default bounds",
        next((a.name for a in attacks if a.against_new_rules), ""): (
            "adaptive: split views, a class only it holds, votes and claims"
        ),
    }
    for attack in attacks:
        if attack.name in headings:
            print(f"| *{headings[attack.name]}* |{' |' * 9}")
        for head in attack.heads:
            on = macro(attack, head, "screened")
            genuine = macro(baseline(attack, True), head, "screened")
            alone = macro(baseline(attack, False), head, "screened")
            print(
                f"| {attack.name} | {head} | {shown(on)} | {np.mean(on - genuine):+.1f} | "
                f"{np.mean(on - alone):+.1f} | {fate(attack, head, 'screened')} | "
                f"{verdict(attack, head)} | {shown(macro(attack, head, 'bounds'))} | "
                f"{fate(attack, head, 'bounds')} | {shown(macro(attack, head, 'off'))} |"
            )
    claims = next((a for a in attacks if a.name == "claims every test row right"), None)
    if claims is not None:
        print(
            "\nThe report's macro accuracy is the mean of every client's own claim: with the "
            "fourth client claiming every test row right it reads "
            + ", ".join(
                f"{head} {np.mean(macro(claims, head, 'screened', 'claimed')):.1f}"
                for head in claims.heads
            )
            + " (the honest clients' own: "
            + ", ".join(
                f"{head} {np.mean(macro(claims, head, 'screened')):.1f}" for head in claims.heads
            )
            + "); the report names it as the clients' claims, and the server checks nothing of "
            "it."
        )
    honest_runs = [
        r
        for a in attacks
        if a.name.startswith("none (")
        for r in records
        if r["attack"] == a.name and r["mode"] == "screened"
    ]
    for head in ALL:
        found = [r for r in honest_runs if r["head"] == head]
        # the fourth client is honest here too: its exclusion counts
        out = sum(r["honest_out"] > 0 or r["fate"].startswith("rejected") for r in found)
        print(
            f"\nWithout an attack ({head}, the fourth client genuine, every federation above), "
            f"the default defence excluded an honest client in {out} of {len(found)} runs."
        )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
