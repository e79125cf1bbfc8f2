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
exact Gaussian conversion).  An assumption-free bound (Clopper-Pearson on the
error rates of a threshold fixed in advance) is checked too.

Each audit must stay below the claimed epsilon, and must exceed it when the
noise is deliberately halved (a wrong sensitivity): the audit can catch a bug.
"""

import numpy as np
import pytest
from scipy.stats import beta, norm

import skslot.heads.fedavg
import skslot.heads.fedcgs
import skslot.heads.fedpft
import skslot.protocol.stages.evaluation
import skslot.summary
from skslot import GaussianSummaryEstimator
from skslot.accounting import PrivacyBudget
from skslot.heads import FedCGSClassifier, FedPFTClassifier, OneShotFedAvgClassifier

dp_accounting = pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")

pytestmark = pytest.mark.filterwarnings(
    "ignore:random_state fixes the privacy noise:skslot.privacy.PrivacyWarning"
)

EPSILON, DELTA = 4.0, 1e-5
RELEASES = 2000  # per data set
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


def threshold_audit(t0: np.ndarray, t1: np.ndarray, threshold: float) -> float:
    """Assumption-free lower bound: the error rates of one fixed test, bounded exactly."""
    n = t0.shape[0]
    false_pos, true_pos = int(np.sum(t0 > threshold)), int(np.sum(t1 > threshold))
    alpha = (1 - CONFIDENCE) / 2
    fpr_high = beta.ppf(1 - alpha, false_pos + 1, n - false_pos)
    tpr_low = beta.ppf(alpha, true_pos, n - true_pos + 1) if true_pos else 0.0
    return float(np.log(max(tpr_low - DELTA, 1e-300) / fpr_high))


def audit(release, D0, D1, claimed_sd):
    """Statistics of RELEASES releases of each data set, and the two audits' bounds."""
    exact0, exact1 = release(D0, None), release(D1, None)
    direction = (exact1 - exact0) / np.linalg.norm(exact1 - exact0)
    t0 = np.array([direction @ (release(D0, s) - exact0) for s in range(RELEASES)])
    t1 = np.array([direction @ (release(D1, s + RELEASES) - exact0) for s in range(RELEASES)])
    return gaussian_audit(t0, t1), threshold_audit(t0, t1, 2.5 * claimed_sd)


def _spread_rows(n: int, m: int, seed: int) -> np.ndarray:
    """Unit rows, anisotropic (so that the summary's shrinkage stays below 1)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, m)) * np.linspace(1.0, 0.3, m)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def summary_pair():
    """Data sets whose summaries differ by the sensitivity: unit rows at 120 degrees."""
    u, v = (np.array([np.cos(a), np.sin(a)]) for a in np.radians([-15.0, 105.0]))
    X = _spread_rows(300, 2, 0)
    D0, D1 = X.copy(), X.copy()
    D0[0], D1[0] = u, v
    return D0, D1


def summary_release(X, seed):
    """(s1, upper(G)) of the rows about zero, recovered from the released summary."""
    if seed is None:
        return np.concatenate([X.sum(0), (X.T @ X)[np.triu_indices(2)]])
    s = GaussianSummaryEstimator(epsilon=EPSILON, delta=DELTA, clip_norm=1.0, random_state=seed)
    summary = s.fit(X).summaries_[None]
    n, rho = X.shape[0], summary.shrinkage
    mu = np.trace(summary.covariance) / 2
    S = (summary.covariance - rho * mu * np.eye(2)) / (1 - rho)  # undo the shrinkage
    gram = n * (S + np.outer(summary.mean, summary.mean))
    return np.concatenate([n * summary.mean, gram[np.triu_indices(2)]])


CLASSES = np.array([0, 1])


def statistics_pair():
    """Data sets whose class statistics differ by the sensitivity: e1 in class 0, e2 in 1."""
    X = _spread_rows(300, 2, 1)
    y = np.arange(300) % 2
    D0, D1 = (X.copy(), y.copy()), (X.copy(), y.copy())
    D0[0][0], D0[1][0] = [1.0, 0.0], 0
    D1[0][0], D1[1][0] = [0.0, 1.0], 1
    return D0, D1


def statistics_release(D, seed):
    """(class sums, class counts, upper(G)) as released."""
    X, y = D
    if seed is None:
        onehot = (y[:, None] == CLASSES).astype(float)
        return np.concatenate(
            [(onehot.T @ X).ravel(), onehot.sum(0), (X.T @ X)[np.triu_indices(2)]]
        )
    head = FedCGSClassifier(privacy=PrivacyBudget(EPSILON, DELTA, clip_norm=1.0, random_state=seed))
    s = head.client_statistics(X, y, CLASSES)
    assert np.all(s.moments.shift == 0)
    return np.concatenate([s.sums.ravel(), s.counts, s.moments.gram[np.triu_indices(2)]])


def moments_release(D, seed):
    """(class sums, class counts, each class's upper(G_c)) as released."""
    X, y = D
    iu = np.triu_indices(2)
    if seed is None:
        onehot = (y[:, None] == CLASSES).astype(float)
        grams = [(X[y == c].T @ X[y == c])[iu] for c in CLASSES]
        return np.concatenate([(onehot.T @ X).ravel(), onehot.sum(0), *grams])
    budget = PrivacyBudget(EPSILON, DELTA, clip_norm=1.0, random_state=seed)
    head = FedPFTClassifier(covariance_type="full", privacy=budget)
    m = head.privacy.ledger(["statistics"])
    moments = m.release(
        "statistics",
        lambda sigma, rng: skslot.heads.fedpft.private_class_moments(
            X, y, CLASSES, clip_norm=1.0, sigma=sigma, rng=rng
        ),
        n=X.shape[0],
        sensitivity=skslot.heads.fedpft.CLASS_MOMENTS_SENSITIVITY,
    )
    n = moments.counts
    grams = [
        (n[c] * (moments.covariances[c] + np.outer(moments.means[c], moments.means[c])))[iu]
        for c in range(2)
    ]
    return np.concatenate([(n[:, None] * moments.means).ravel(), n, *grams])


#: The local head's inverse regularisation (rows of norm at most 1: C' = C).
LOCAL_C = 1.0


def local_head_pair():
    """Data sets whose local heads differ by two thirds of the sensitivity.

    999 rows at zero of class 0 make the head predict class 0 confidently,
    so the loss is nearly flat in the weights and the penalty alone holds
    them; the last row, of class 1, is ``e1`` in one data set and ``-e1`` in
    the other, so the two rows' gradients point apart.
    """
    X = np.zeros((1000, 2))
    y = np.zeros(1000, dtype=int)
    y[-1] = 1
    D0, D1 = (X.copy(), y), (X.copy(), y)
    D0[0][-1], D1[0][-1] = [1.0, 0.0], [-1.0, 0.0]
    return D0, D1


def local_head_release(D, seed):
    """``[W, b]`` of the released local head (rows of norm 1: in units of the clip norm)."""
    X, y = D
    if seed is None:
        coef, intercept = skslot.heads.fedavg.private_local_head(
            X, y, 3, C=LOCAL_C, clip_norm=1.0, sigma=0.0, rng=np.random.default_rng(0),
            max_iter=1000,
        )  # fmt: skip
        return np.column_stack([coef, intercept]).ravel()
    budget = PrivacyBudget(EPSILON, DELTA, clip_norm=1.0, random_state=seed)
    head = OneShotFedAvgClassifier(C=LOCAL_C, max_iter=1000, privacy=budget)
    update = head.client_statistics(X, y, np.arange(3))
    return np.column_stack([update.coef, update.intercept]).ravel()


def _claimed_sd(mechanism):
    if mechanism == "local head":
        ledger = PrivacyBudget(EPSILON, DELTA).ledger(["local_head"])
        return ledger.noise_scale(
            "local_head", skslot.heads.fedavg.LOCAL_HEAD_SENSITIVITY * LOCAL_C
        )
    if mechanism == "summary":
        return (
            GaussianSummaryEstimator(epsilon=EPSILON, delta=DELTA, clip_norm=1.0)
            .fit(_spread_rows(10, 2, 0))
            .noise_scale_
        )
    _, _, module, name = MECHANISMS[mechanism]
    release = {"evaluation count": "evaluation", "class counts": "class_counts"}.get(
        mechanism, "statistics"
    )
    ledger = PrivacyBudget(_claimed(mechanism), DELTA).ledger([release])
    return ledger.noise_scale(release, getattr(module, name))


def _claimed(mechanism):
    return COUNT_EPSILON if mechanism in ("evaluation count", "class counts") else EPSILON


def count_pair():
    """Two test sets whose correct counts differ by one (one row predicted right or not)."""
    return 40, 41


def count_release(count, seed):
    """The evaluation count as a private client releases it."""
    if seed is None:
        return np.array([float(count)])
    budget = PrivacyBudget(COUNT_EPSILON, DELTA, random_state=seed)
    ledger = budget.ledger(["evaluation"])
    return np.array(
        [
            ledger.release(
                "evaluation",
                lambda sigma, rng: skslot.protocol.stages.evaluation.private_count(
                    count, 100, sigma, rng
                ),
                n=100,
                sensitivity=skslot.protocol.stages.evaluation.COUNT_SENSITIVITY,
            )
        ],
        dtype=float,
    )


#: The count is released in whole rows: audited where its noise spans several rows.
COUNT_EPSILON = 1.0


def class_counts_pair():
    """Labels whose class counts differ by the sensitivity: one row of class 0 or of 1."""
    y = np.arange(200) % 2
    y0, y1 = y.copy(), y.copy()
    y0[0], y1[0] = 0, 1
    return y0, y1


def class_counts_release(y, seed):
    """The class counts as a private O-FedAvg client releases them (rounded to add up to n)."""
    if seed is None:
        return np.bincount(y, minlength=2).astype(float)
    budget = PrivacyBudget(COUNT_EPSILON, DELTA, random_state=seed)
    ledger = budget.ledger(["class_counts"])
    return ledger.release(
        "class_counts",
        lambda sigma, rng: skslot.heads.private_class_counts(
            y, CLASSES, sigma=sigma, rng=rng
        ),
        n=y.shape[0],
        sensitivity=skslot.heads.CLASS_COUNTS_SENSITIVITY,
    ).astype(float)

MECHANISMS = {
    "summary": (summary_pair, summary_release, skslot.summary, "SUMMARY_SENSITIVITY"),
    "statistics": (
        statistics_pair,
        statistics_release,
        skslot.heads.fedcgs,
        "CLASS_STATISTICS_SENSITIVITY",
    ),
    "moments": (
        statistics_pair,
        moments_release,
        skslot.heads.fedpft,
        "CLASS_MOMENTS_SENSITIVITY",
    ),
    "local head": (
        local_head_pair,
        local_head_release,
        skslot.heads.fedavg,
        "LOCAL_HEAD_SENSITIVITY",
    ),
    "class counts": (
        class_counts_pair,
        class_counts_release,
        skslot.heads,
        "CLASS_COUNTS_SENSITIVITY",
    ),
    "evaluation count": (
        count_pair,
        count_release,
        skslot.protocol.stages.evaluation,
        "COUNT_SENSITIVITY",
    ),
}


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_the_audited_privacy_loss_stays_below_the_claim(mechanism):
    pair, release, _, _ = MECHANISMS[mechanism]
    gaussian, threshold = audit(release, *pair(), _claimed_sd(mechanism))
    claimed = _claimed(mechanism)
    assert gaussian <= claimed
    assert threshold <= claimed
    # and the audit is not vacuous: the pair reaches the sensitivity, so the
    # distinguisher gets close to the claim
    assert gaussian > 0.5 * claimed


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_the_audit_catches_half_the_noise(mechanism, monkeypatch):
    pair, release, module, name = MECHANISMS[mechanism]
    claimed = _claimed_sd(mechanism)
    monkeypatch.setattr(module, name, getattr(module, name) / 2)  # a wrong sensitivity
    gaussian, _ = audit(release, *pair(), claimed)
    assert gaussian > _claimed(mechanism)
