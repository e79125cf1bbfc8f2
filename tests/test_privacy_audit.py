"""Empirical audits of the privacy mechanisms: the privacy loss a distinguisher achieves.

For each mechanism, two data sets that differ in one row (the pair that
reaches the mechanism's sensitivity), many releases of each, and a
distinguisher that knows both data sets: it projects a release onto the
difference of the two exact releases.  Its statistic is then Gaussian with
the same variance under both (the noise is linear and, on these data, the
post-processing leaves the released vector as drawn), so the releases of the
two data sets are as far apart as a Gaussian mechanism of parameter
``mu = (mean_1 - mean_0) / sd``; a lower confidence bound on ``mu`` gives a
lower bound on the epsilon the releases actually spend (``dp-accounting``'s
exact Gaussian conversion).
Every release is made by the code the protocol runs: a private client's own
answer to the stage that carries it (:meth:`skslot.protocol.ClientParty.answer`).
The neighbouring data sets replace a row at the clip bound by one beyond it
(and, for class statistics, its label).  Each audit must stay below the
claimed epsilon, and must exceed it when the sensitivity is halved where the
protocol's code reads it (a mutation of each call site) or when rows are
clipped at twice the bound: the audit can catch a bug there.  The requests a
private client refuses, and the crafted evaluation prior, are audited in
``test_deviating_server.py``.
"""

import ast
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

import skslot.privacy._heads
import skslot.privacy.client
from skslot.heads import (
    FedCGSClassifier,
    FedPFTClassifier,
    LinearScores,
    OneShotFedAvgClassifier,
)
from skslot.privacy import PrivacyBudget
from skslot.protocol import (
    ClientParty,
    ClientState,
    EvaluationRequest,
    UpdatesRequest,
    UploadRequest,
)

dp_accounting = pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")

pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:random_state fixes the privacy noise:skslot.privacy.PrivacyWarning"
    ),
    # the local head's rows are nearly all at zero: their released summary is floored
    pytest.mark.filterwarnings("ignore:client 0 has a zero sample covariance:UserWarning"),
]

EPSILON, DELTA = 4.0, 1e-5
RELEASES = 1200  # per data set
CONFIDENCE = 0.995


def gaussian_audit(t0: np.ndarray, t1: np.ndarray) -> float:
    """Lower confidence bound on the epsilon (at DELTA) separating two Gaussian samples."""
    sd = np.sqrt((t0.var(ddof=1) + t1.var(ddof=1)) / 2)
    mu = (t1.mean() - t0.mean()) / sd
    n = t0.shape[0]
    se = np.sqrt(2.0 / n * (1.0 + mu * mu / 8.0))
    mu_low = mu - norm.ppf(CONFIDENCE) * se
    if mu_low <= 0:
        return 0.0
    return float(dp_accounting.get_epsilon_gaussian(1.0 / mu_low, DELTA))


def audit(release, D0, D1):
    """The audit's lower bound on the epsilon RELEASES releases of each data set spend."""
    exact0, exact1 = release(D0, None), release(D1, None)
    direction = (exact1 - exact0) / np.linalg.norm(exact1 - exact0)
    t0 = np.array([direction @ (release(D0, s) - exact0) for s in range(RELEASES)])
    t1 = np.array([direction @ (release(D1, s + RELEASES) - exact0) for s in range(RELEASES)])
    return gaussian_audit(t0, t1)


UPLOAD = skslot.privacy.client


def private_party(X, y, head, releases, seed, *, epsilon=EPSILON, main=None, **kwargs):
    """A private client's answer to its upload: its plan spends nearly all of the budget
    on ``main`` (default: the first release), so that release is audited at ``epsilon``."""
    main = main or releases[0]
    shares = {r: 1.0 if r == main else 1e-3 for r in releases}
    budget = PrivacyBudget(epsilon, DELTA, clip_norm=1.0, shares=shares)
    party = ClientParty(
        X, y, head=head, classes=CLASSES, label=0, privacy=budget,
        state=ClientState(noise_seed=seed), **kwargs,
    )  # fmt: skip
    split = budget.split(releases)
    request = UploadRequest(
        0, privacy=(epsilon, DELTA, 1.0), releases=releases,
        shares=tuple(split[r] for r in releases), class_counts="class_counts" in releases,
    )  # fmt: skip
    return party, party.answer("upload", request)


def _spread_rows(n: int, m: int, seed: int) -> np.ndarray:
    """Unit rows, anisotropic (so that the summary's shrinkage stays below 1)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, m)) * np.linspace(1.0, 0.3, m)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


#: How far beyond the clip bound (1) the replaced row of each pair lies: the worst case is
#: a row at the bound against one beyond it, which the release must clip back.
BEYOND = 3.0


def clipped(X):
    """Rows scaled to norm at most 1, as the protocol clips them (the exact values' input)."""
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)


def summary_pair():
    """Data sets whose summaries differ by the sensitivity: a unit row against a row beyond
    the bound, at 120 degrees."""
    u, v = (np.array([np.cos(a), np.sin(a)]) for a in np.radians([-15.0, 105.0]))
    X = _spread_rows(300, 2, 0)
    D0, D1 = X.copy(), X.copy()
    D0[0], D1[0] = u, BEYOND * v
    return D0, D1


def summary_release(X, seed):
    """(s1, upper(G)) of the rows about zero, recovered from the summary O-FedAvg uploads."""
    if seed is None:
        X = clipped(X)
        return np.concatenate([X.sum(0), (X.T @ X)[np.triu_indices(2)]])
    head = OneShotFedAvgClassifier(C=LOCAL_C)
    y = np.arange(X.shape[0]) % 2
    _, upload = private_party(X, y, head, ("summary", "local_head"), seed)
    summary = upload.summary
    n, rho = X.shape[0], summary.shrinkage
    mu = np.trace(summary.covariance) / 2
    S = (summary.covariance - rho * mu * np.eye(2)) / (1 - rho)  # undo the shrinkage
    gram = n * (S + np.outer(summary.mean, summary.mean))
    return np.concatenate([n * summary.mean, gram[np.triu_indices(2)]])


CLASSES = np.array([0, 1])


def statistics_pair():
    """Data sets whose class statistics differ by the sensitivity: e1 in class 0, a row
    beyond the bound along e2 in class 1 (the label replaced too)."""
    X = _spread_rows(300, 2, 1)
    y = np.arange(300) % 2
    D0, D1 = (X.copy(), y.copy()), (X.copy(), y.copy())
    D0[0][0], D0[1][0] = [1.0, 0.0], 0
    D1[0][0], D1[1][0] = [0.0, BEYOND], 1
    return D0, D1


def statistics_release(D, seed):
    """(class sums, class counts, upper(G)) as FedCGS uploads them."""
    X, y = D
    if seed is None:
        X = clipped(X)
        onehot = (y[:, None] == CLASSES).astype(float)
        return np.concatenate(
            [(onehot.T @ X).ravel(), onehot.sum(0), (X.T @ X)[np.triu_indices(2)]]
        )
    _, upload = private_party(X, y, FedCGSClassifier(), ("statistics",), seed)
    s = upload.statistics
    assert np.all(s.moments.shift == 0)
    return np.concatenate([s.sums.ravel(), s.counts, s.moments.gram[np.triu_indices(2)]])


def moments_release(D, seed):
    """(class sums, class counts, each class's upper(G_c)) as FedPFT uploads them."""
    X, y = D
    iu = np.triu_indices(2)
    if seed is None:
        X = clipped(X)
        onehot = (y[:, None] == CLASSES).astype(float)
        grams = [(X[y == c].T @ X[y == c])[iu] for c in CLASSES]
        return np.concatenate([(onehot.T @ X).ravel(), onehot.sum(0), *grams])
    head = FedPFTClassifier(covariance_type="full")
    _, upload = private_party(X, y, head, ("statistics",), seed)
    n, sums = upload.statistics.class_sums()
    out = [sums.ravel(), n]
    for c, mixture in enumerate(upload.statistics.mixtures):
        mean, covariance = mixture.means[0], mixture.covariances[0]
        out.append((n[c] * (covariance + np.outer(mean, mean)))[iu])
    return np.concatenate(out)


#: The local head's inverse regularisation (rows of norm at most 1: C' = C).
LOCAL_C = 1.0


def local_head_pair():
    """Data sets whose local heads differ by two thirds of the sensitivity.

    299 rows at zero of class 0 make the head predict class 0 confidently,
    so the loss is nearly flat in the weights and the penalty alone holds
    them; the last row, of class 1, is ``e1`` in one data set and ``-e1`` in
    the other, so the two rows' gradients point apart.
    """
    X = np.zeros((300, 2))
    y = np.zeros(300, dtype=int)
    y[-1] = 1
    D0, D1 = (X.copy(), y), (X.copy(), y)
    D0[0][-1], D1[0][-1] = [1.0, 0.0], [-BEYOND, 0.0]  # at the bound, and beyond it
    return D0, D1


def local_head_release(D, seed):
    """``[W, b]`` of the local head O-FedAvg releases at the updates stage (rows of norm 1:
    in units of the clip norm), trained on rows its map leaves as they are (``tau = 0``)."""
    X, y = D
    if seed is None:
        coef, intercept = skslot.privacy.private_local_head(
            X, y, 2, C=LOCAL_C, clip_norm=1.0, sigma=0.0, rng=np.random.default_rng(0),
            max_iter=1000,
        )  # fmt: skip
        return np.column_stack([coef, intercept]).ravel()
    head = OneShotFedAvgClassifier(C=LOCAL_C, max_iter=1000)
    party, _ = private_party(X, y, head, ("summary", "local_head"), seed, main="local_head")
    (update,) = party.answer("updates", UpdatesRequest(party.state.summary, (0.0,), "all"))
    return np.column_stack([update.coef, update.intercept]).ravel()


def _claimed(mechanism):
    return COUNT_EPSILON if mechanism in ("evaluation count", "class counts") else EPSILON


def count_pair():
    """Two test sets whose correct counts differ by one (one row predicted right or not)."""
    y = np.arange(100) % 2
    y0, y1 = y.copy(), y.copy()
    y0[1], y1[1] = 1, 0  # a head that predicts class 0 gets one more right in y1
    return y0, y1


#: A head that predicts class 0 for every row.
ZEROS = LinearScores(CLASSES, np.zeros((2, 2)), np.array([1.0, 0.0]))


def count_release(y_test, seed):
    """The evaluation count as a private FedCGS client answers the evaluation stage."""
    if seed is None:
        return np.array([float(np.sum(y_test == 0))])
    X = _spread_rows(60, 2, 3)
    party, _ = private_party(
        X, np.arange(60) % 2, FedCGSClassifier(), ("statistics", "evaluation"), seed,
        epsilon=COUNT_EPSILON, main="evaluation", X_test=np.zeros((100, 2)), y_test=y_test,
    )  # fmt: skip
    evaluation = party.answer("evaluation", EvaluationRequest(party.state.summary, ZEROS, 0.0))
    return np.array([float(evaluation.n_correct)])


#: The count is released in whole rows: audited where its noise spans several rows.
COUNT_EPSILON = 1.0


def class_counts_pair():
    """Labels whose class counts differ by the sensitivity: one row of class 0 or of 1."""
    y = np.arange(200) % 2
    y0, y1 = y.copy(), y.copy()
    y0[0], y1[0] = 0, 1
    return y0, y1


def class_counts_release(y, seed):
    """The class counts as a private O-FedAvg client uploads them (rounded to add up to n)."""
    if seed is None:
        return np.bincount(y, minlength=2).astype(float)
    X = _spread_rows(y.shape[0], 2, 2)
    head = OneShotFedAvgClassifier(C=LOCAL_C)
    releases = ("summary", "class_counts", "local_head")
    _, upload = private_party(
        X, y, head, releases, seed, epsilon=COUNT_EPSILON, main="class_counts"
    )
    return upload.class_counts.astype(float)


#: Each release: its neighbouring data sets, the release through the client's answer, and
#: where the protocol's code reads its sensitivity (module, name).
MECHANISMS = {
    "summary": (summary_pair, summary_release, UPLOAD, "SUMMARY_SENSITIVITY"),
    "statistics": (
        statistics_pair,
        statistics_release,
        skslot.privacy._heads,
        "CLASS_STATISTICS_SENSITIVITY",
    ),
    "moments": (
        statistics_pair,
        moments_release,
        skslot.privacy._heads,
        "CLASS_MOMENTS_SENSITIVITY",
    ),
    "local head": (
        local_head_pair,
        local_head_release,
        skslot.privacy._heads,
        "LOCAL_HEAD_SENSITIVITY",
    ),
    "class counts": (class_counts_pair, class_counts_release, UPLOAD, "CLASS_COUNTS_SENSITIVITY"),
    "evaluation count": (
        count_pair,
        count_release,
        UPLOAD,
        "COUNT_SENSITIVITY",
    ),
}


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_the_audited_privacy_loss_stays_below_the_claim(mechanism):
    pair, release, _, _ = MECHANISMS[mechanism]
    gaussian = audit(release, *pair())
    claimed = _claimed(mechanism)
    assert gaussian <= claimed
    # and the audit is not vacuous: the pair reaches the sensitivity, so the
    # distinguisher gets close to the claim
    assert gaussian > 0.5 * claimed


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_the_audit_catches_half_the_sensitivity_where_the_protocol_reads_it(mechanism, monkeypatch):
    pair, release, module, name = MECHANISMS[mechanism]
    monkeypatch.setattr(module, name, getattr(module, name) / 2)  # a wrong sensitivity
    assert audit(release, *pair()) > _claimed(mechanism)


#: The releases of clipped moments, audited with the clip at twice the bound as well (the
#: local head reads the same clip; its audit's margin is too small to show the factor two).
CLIPPED = ("summary", "statistics", "moments")


@pytest.mark.parametrize("mechanism", CLIPPED)
def test_the_audit_catches_rows_clipped_at_twice_the_bound(mechanism, monkeypatch):
    """A mutation of the one clip every release reads (skslot._moments.clip_factors): the
    row beyond the bound then moves the release twice as far."""
    import skslot._moments
    import skslot.privacy._statistics

    exact = skslot._moments.clip_factors

    def loose(norms, clip_norm):
        return exact(norms, 2.0 * clip_norm)

    for module in (skslot._moments, skslot.privacy._statistics):
        monkeypatch.setattr(module, "clip_factors", loose)
    pair, release, _, _ = MECHANISMS[mechanism]
    assert audit(release, *pair()) > _claimed(mechanism)


def test_every_call_site_of_a_release_is_audited():
    """Each ``ledger.release(..., sensitivity=NAME)`` of the library is one row above."""
    root = Path(skslot.privacy.client.__file__).parents[1]
    sites = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "release":
                for keyword in node.keywords:
                    if keyword.arg == "sensitivity":
                        names = {n.id for n in ast.walk(keyword.value) if isinstance(n, ast.Name)}
                        sites |= {(path.relative_to(root).as_posix(), name) for name in names}
    audited = {
        (Path(module.__file__).relative_to(root).as_posix(), name)
        for _, _, module, name in MECHANISMS.values()
    }
    assert sites and {s for s in sites if s[1].isupper()} == audited
