"""A deviating server against a private client: every reply is a release of its plan or the
one refusal.

The server may send any request of the protocol with any arguments.  Two
private clients whose training rows differ in one row (a row beyond the clip
bound, relabelled) answer each request kind: outside the plan both answer
with the same refusal and nothing is charged; inside it, the release is
charged (its change is audited in ``test_privacy_audit.py``).  The crafted
evaluation prior, which would read a client's exact class counts through its
test count, is audited here by a distinguishing test over 200 runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta

from skslot.heads import (
    FedCGSClassifier,
    FedPFTClassifier,
    LinearScores,
    OneShotFedAvgClassifier,
)
from skslot.label_mix import client_log_prior
from skslot.privacy import LifetimeBudget, PrivacyBudget, RequestRefused, refusal
from skslot.protocol import (
    ClientParty,
    ClientState,
    EvaluationRequest,
    ScreeningRequest,
    UpdatesRequest,
    UploadRequest,
    ValidationRequest,
)
from skslot.protocol.stages import Stage

dp_accounting = pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")

pytestmark = pytest.mark.filterwarnings(
    "ignore:random_state fixes the privacy noise:skslot.privacy.PrivacyWarning"
)

EPSILON, DELTA, CLIP = 1.0, 1e-5, 1.0
CLASSES = np.array([0, 1])
M = 3


def neighbours():
    """Two training sets of 120 unit rows differing in one row: ``e1`` of class 0 in one,
    ``3 e2`` (beyond the clip bound) of class 1 in the other; 20 test rows of each class."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, M)) * np.array([1.0, 0.6, 0.3])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.arange(120) % 2
    D0, D1 = (X.copy(), y.copy()), (X.copy(), y.copy())
    D0[0][0], D0[1][0] = [1.0, 0.0, 0.0], 0
    D1[0][0], D1[1][0] = [0.0, 3.0, 0.0], 1
    return D0, D1


TEST_X = np.zeros((40, M))
TEST_Y = np.repeat([0, 1], [5, 35])  # a crafted prior moves the count by 30

HEADS = {
    "FedCGS": (FedCGSClassifier, ("statistics", "evaluation")),
    "FedPFT": (lambda: FedPFTClassifier(random_state=0), ("statistics", "evaluation")),
    "O-FedAvg": (
        lambda: OneShotFedAvgClassifier(C=1.0),
        ("summary", "class_counts", "local_head", "evaluation"),
    ),
}


def private(D, head, seed, *, lifetime=None):
    X, y = D
    budget = PrivacyBudget(EPSILON, DELTA, clip_norm=CLIP)
    return ClientParty(
        X, y, head=HEADS[head][0](), classes=CLASSES, label=0, X_test=TEST_X, y_test=TEST_Y,
        privacy=budget, lifetime=lifetime, state=ClientState(noise_seed=seed),
    )  # fmt: skip


def plan(head, **changes):
    """The honest upload request of a private run of ``head``."""
    releases = HEADS[head][1]
    split = PrivacyBudget(EPSILON, DELTA, clip_norm=CLIP).split(releases)
    settings = {
        "privacy": (EPSILON, DELTA, CLIP),
        "releases": releases,
        "shares": tuple(split[r] for r in releases),
        "class_counts": "class_counts" in releases,
        **changes,
    }
    return UploadRequest(0, **settings)


def zero_head(intercept=(0.0, 0.0), federation=None):
    return LinearScores(
        CLASSES,
        np.zeros((2, M)),
        np.asarray(intercept, dtype=float),
        federation=None if federation is None else np.asarray(federation, dtype=float),
        embedded=None if federation is None else np.zeros(2),
    )


def reference(party):
    return party.state.summary  # any summary of the right dimension serves as a reference


#: Each request kind a server can send, crafted: its stage, the request (made from the head's
#: name and the party), the heads it applies to (None: every head) and whether the honest
#: upload came before it.
CRAFTED = {
    "upload: exact values": ("upload", lambda h, p: UploadRequest(0), None, False),
    "upload: another budget": (
        "upload", lambda h, p: plan(h, privacy=(8.0, DELTA, CLIP)), None, False,
    ),
    "upload: twice the clip bound": (
        "upload", lambda h, p: plan(h, privacy=(EPSILON, DELTA, 2 * CLIP)), None, False,
    ),
    "upload: validation split": ("upload", lambda h, p: plan(h, split_seed=1), None, False),
    "upload: class sums": ("upload", lambda h, p: plan(h, class_sums=True), None, False),
    "upload: class sums after the plan": (
        "upload", lambda h, p: plan(h, class_sums=True), None, True,
    ),
    "upload: another plan": (
        "upload", lambda h, p: plan(h, releases=HEADS[h][1][:-1], shares=()), None, True,
    ),
    "upload: shares": (
        "upload",
        lambda h, p: plan(h, shares=(1.0 / len(HEADS[h][1]),) * len(HEADS[h][1])),
        None,
        False,
    ),
    "upload: a release the head cannot make": (
        "upload",
        lambda h, p: plan(
            h, releases=("summary", "statistics", "evaluation"), shares=(0.4, 0.5, 0.1)
        ),
        None,
        False,
    ),
    "upload: within-class summary": (
        "upload", lambda h, p: plan(h, summary_covariance="within"), ("O-FedAvg",), False,
    ),
    "upload: counts outside the plan": (
        "upload",
        lambda h, p: plan(
            h, releases=("summary", "local_head", "evaluation"), shares=(0.45, 0.45, 0.1),
            class_counts=True,
        ),
        ("O-FedAvg",),
        False,
    ),
    "updates: before the upload": (
        "updates", lambda h, p: UpdatesRequest(None, (0.4,), "all"), None, False,
    ),
    "updates: a statistics head": (
        "updates",
        lambda h, p: UpdatesRequest(reference(p), (0.4,), "all"),
        ("FedCGS", "FedPFT"),
        True,
    ),
    "updates: two local heads": (
        "updates",
        lambda h, p: UpdatesRequest(reference(p), (0.2, 0.4), "all"),
        ("O-FedAvg",),
        True,
    ),
    "refit": ("refit", lambda h, p: UpdatesRequest(reference(p), (0.4,), "all"), None, True),
    "validation": (
        "validation",
        lambda h, p: ValidationRequest(reference(p), (zero_head(),), (0.4,)),
        None,
        True,
    ),
    "screening": (
        "screening",
        lambda h, p: ScreeningRequest(
            reference(p), zero_head(), (zero_head(),), np.ones((1, 2), dtype=bool), 0.4
        ),
        None,
        True,
    ),
    "evaluation: before the upload": (
        "evaluation", lambda h, p: EvaluationRequest(None, zero_head(), 0.4), None, False,
    ),
}  # fmt: skip


def cases():
    for name, (_, _, heads, _) in CRAFTED.items():
        for head in heads or tuple(HEADS):
            yield pytest.param(name, head, id=f"{name}-{head}")


@pytest.mark.parametrize(("name", "head"), list(cases()))
def test_a_request_outside_the_plan_gets_the_one_refusal_whatever_the_data(name, head, tmp_path):
    stage, make, _, after_upload = CRAFTED[name]
    replies = []
    for k, D in enumerate(neighbours()):
        lifetime = LifetimeBudget(tmp_path / f"{k}.json", epsilon=10.0)
        party = private(D, head, seed=k, lifetime=lifetime)
        if after_upload:
            party.answer("upload", plan(head))
            assert lifetime.spent()[0] == EPSILON
        before = (party.state.releases, party.ledger().released if after_upload else ())
        with pytest.raises(RequestRefused) as info:
            party.answer(stage, make(head, party))
        replies.append(str(info.value))
        # nothing charged: neither the run's ledger nor the lifetime budget
        after = (party.state.releases, party.ledger().released if after_upload else ())
        assert after == before
        assert lifetime.spent()[0] == (EPSILON if after_upload else 0.0)
    assert replies[0] == replies[1] == str(refusal(stage))


def test_the_suite_fails_without_the_plan_check(monkeypatch):
    """The plan's check removed, the exact class sums come back: the second data set's minus
    the first's is exactly the replaced row's change."""
    import skslot.protocol.stages.upload._steps as steps

    monkeypatch.setattr(steps.UploadStage, "private_problem", lambda self, party, request: None)
    sums = []
    for k, D in enumerate(neighbours()):
        party = private(D, "FedCGS", seed=k)
        sums.append(party.answer("upload", plan("FedCGS", class_sums=True)).class_sums[1])
    (D0, D1) = neighbours()
    expected = np.zeros((2, M))
    expected[0] -= D0[0][0]
    expected[1] += D1[0][0]
    np.testing.assert_allclose(sums[1] - sums[0], expected, atol=1e-12)


def test_every_stage_is_matched_against_the_plan():
    """Each stage either says when a private client answers it or refuses every request."""
    from skslot.protocol.stages import STAGES

    assert {stage for stage, *_ in CRAFTED.values()} == set(STAGES)
    for stage in STAGES.values():
        assert callable(stage.private_problem)
    assert Stage.private_problem(STAGES["validation"], None, None).startswith("the 'validation'")


# -- the crafted evaluation prior ------------------------------------------------------------

RUNS = 200


def counts_of(D):
    return np.bincount(D[1], minlength=2)


def crafted_prior_head(D0, D1):
    """Zero weights and a threshold between the two data sets' own priors: every test row is
    predicted class 0 under one data set's exact counts and class 1 under the other's."""
    federation = np.array([1.0, 1.0])
    gaps = [np.subtract(*client_log_prior(counts_of(D), federation)) for D in (D0, D1)]
    return zero_head(intercept=(-(gaps[0] + gaps[1]) / 2, 0.0), federation=federation)


def empirical_epsilon(t0, t1, confidence=0.95):
    """Lower bound on the epsilon a threshold test over the releases achieves (Clopper-Pearson,
    both directions, every threshold; a Bonferroni factor for the thresholds tried)."""
    thresholds = np.unique(np.concatenate([t0, t1]))
    alpha = (1 - confidence) / (2 * len(thresholds))
    best = 0.0
    n = t0.shape[0]
    for t in thresholds:
        for a, b in ((t1 >= t, t0 >= t), (t0 < t, t1 < t)):
            hits, false = int(a.sum()), int(b.sum())
            tpr_low = beta.ppf(alpha, hits, n - hits + 1) if hits else 0.0
            fpr_high = beta.ppf(1 - alpha, false + 1, n - false) if false < n else 1.0
            if tpr_low - DELTA > 0:
                best = max(best, float(np.log((tpr_low - DELTA) / fpr_high)))
    return best


def crafted_counts(head):
    D0, D1 = neighbours()
    head_scores = crafted_prior_head(D0, D1)
    counts = []
    for k, D in enumerate((D0, D1)):
        runs = []
        for seed in range(RUNS):
            party = private(D, head, seed=seed + k * RUNS)
            party.answer("upload", plan(head))
            request = EvaluationRequest(party.state.summary, head_scores, 0.0)
            runs.append(party.answer("evaluation", request).n_correct)
        counts.append(np.array(runs))
    return counts


@pytest.mark.parametrize("head", ["FedCGS", "O-FedAvg"])
def test_a_crafted_evaluation_prior_reads_no_more_than_the_budget(head):
    """The count a private client releases predicts with the class counts it released, so
    the crafted prior reads them, never the exact ones: within the run's budget."""
    t0, t1 = crafted_counts(head)
    assert empirical_epsilon(t0, t1) <= EPSILON


def test_a_crafted_evaluation_prior_with_the_exact_counts_fails_the_audit(monkeypatch):
    """The mutation: the client's exact training counts as its prior give the data set away."""
    monkeypatch.setattr(ClientParty, "prior_counts", property(lambda self: self.class_counts))
    t0, t1 = crafted_counts("FedCGS")
    assert empirical_epsilon(t0, t1) > EPSILON


# -- rows ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("head", list(HEADS))
def test_a_non_finite_row_enters_as_the_null_row(head, bad, caplog):
    """No error tells the server such a row exists: it is the null row, logged locally."""
    D0, _ = neighbours()
    X, y = D0[0].copy(), D0[1].copy()
    X[5, 1] = bad
    nulled = X.copy()
    nulled[5], y_nulled = 0.0, y.copy()
    y_nulled[5] = CLASSES[0]
    with caplog.at_level("WARNING", logger="skslot.protocol.client"):
        party = private((X, y), head, seed=7)
    assert "1 a non-finite value" in caplog.text
    assert np.isnan(X[5, 1]) or np.isinf(X[5, 1])  # the caller's rows are not modified
    reply = party.answer("upload", plan(head))
    twin = private((nulled, y_nulled), head, seed=7).answer("upload", plan(head))
    if reply.summary is not None:
        np.testing.assert_array_equal(reply.summary.covariance, twin.summary.covariance)
    if reply.statistics is not None:
        for name, value in reply.statistics.to_arrays().items():
            np.testing.assert_array_equal(value, twin.statistics.to_arrays()[name])


# -- a row no step fails on, and a run's rows fixed ------------------------------------------


@pytest.mark.parametrize("row", [[1.7e308] * M, [3.0, 0.0, 0.0]])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_local_head_is_released_whatever_one_row_and_the_reference(row, dtype):
    """A huge but finite row, aligned by a reference that stretches it, would overflow: each
    row is clipped before the map and any aligned row that is not finite is the null row, so
    both neighbouring data sets get their release (never a refusal that tells them apart)."""
    from skslot import GaussianSummary

    D0, _ = neighbours()
    X = D0[0].astype(dtype)
    X[0] = np.asarray(row, dtype=dtype) if np.isfinite(dtype(row[0])) else np.finfo(dtype).max
    for k, D in enumerate(((D0[0].astype(dtype), D0[1]), (X, D0[1]))):
        party = private(D, "O-FedAvg", seed=k)
        party.answer("upload", plan("O-FedAvg"))
        own = party.state.summary
        stretched = GaussianSummary(n=own.n, mean=own.mean, covariance=1e90 * own.covariance)
        (head,) = party.answer("updates", UpdatesRequest(stretched, (1.0,), "all"))
        assert np.isfinite(head.coef).all() and "local_head" in party.ledger().released


def test_a_client_whose_rows_changed_refuses_the_rest_of_its_run(caplog):
    """The same noise on other rows would give the difference away: a client restored with
    other rows than its run's first release refuses, with the one refusal."""
    D0, D1 = neighbours()
    party = private(D0, "FedCGS", seed=3)
    party.answer("upload", plan("FedCGS"))
    state = ClientState.from_config(party.state.to_config())
    same = private(D0, "FedCGS", seed=3)
    same.state = ClientState.from_config(party.state.to_config())
    assert same.answer("upload", plan("FedCGS")).statistics is not None  # a retry: the release
    other = private(D1, "FedCGS", seed=3)
    other.state = state
    with caplog.at_level("WARNING", logger="skslot.protocol.client"):
        with pytest.raises(RequestRefused, match="privacy plan"):
            other.answer("upload", plan("FedCGS"))
    assert "its rows changed" in caplog.text


@pytest.mark.parametrize(
    ("head", "changes"),
    [
        ("FedPFT", {"covariance_floor": float("inf")}),
        ("O-FedAvg", {"covariance_floor": float("nan")}),
        ("O-FedAvg", {"covariance_floor": -1.0}),
        (
            "O-FedAvg",
            {
                "releases": ("class_counts", "local_head", "evaluation"),
                "shares": (0.1, 0.8, 0.1),
            },
        ),
    ],
)
def test_an_upload_the_step_cannot_make_is_refused_before_the_lifetime_charge(
    head, changes, tmp_path
):
    """A floor no summary can take, or an O-FedAvg plan without its summary, is refused by
    the plan, so the lifetime budget is never charged for it."""
    lifetime = LifetimeBudget(tmp_path / "budget.json", epsilon=10.0)
    D0, _ = neighbours()
    party = private(D0, head, seed=0, lifetime=lifetime)
    with pytest.raises(RequestRefused):
        party.answer("upload", plan(head, **changes))
    assert lifetime.spent()[0] == 0.0 and party.state.releases == ()
