"""A private federation: every value a client sends is a release under its one budget."""

from __future__ import annotations

import numpy as np
import pytest

from skslot import GaussianSummaryEstimator
from skslot.datasets import make_federated_classification
from skslot.defence import DefenceBounds
from skslot.heads import (
    ClassStatistics,
    FedCGSClassifier,
    FedPFTClassifier,
    OneShotFedAvgClassifier,
)
from skslot.privacy import (
    ClassMoments,
    PrivacyBudget,
    PrivacyBudgetExceeded,
    PrivateClassifier,
    RequestRefused,
    private_class_statistics,
    refusal,
)
from skslot.protocol import ClientParty, ClientState, InProcessTransport, OneShotProtocol
from skslot.protocol.stages.upload import UploadRequest

from ._clients import train_test_by_client

pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")

pytestmark = pytest.mark.filterwarnings(
    "ignore:random_state fixes the privacy noise:skslot.privacy.PrivacyWarning"
)

CLASSES = np.arange(4)
BUDGET = PrivacyBudget(8.0, clip_norm=12.0, random_state=0)


@pytest.fixture(scope="module")
def clients():
    data = make_federated_classification(
        n_clients=4, n_samples_per_client=300, n_features=6, alpha=0.5, random_state=3
    )
    return train_test_by_client(data, 200)


def parties(clients, head, budget=BUDGET, **kwargs):
    return {
        k: ClientParty(
            X,
            y,
            head=head,
            classes=CLASSES,
            label=k,
            X_test=Xt,
            y_test=yt,
            privacy=budget,
            **kwargs,
        )
        for k, (X, y, Xt, yt) in clients.items()
    }


def refused(party, stage, request, caplog, reason):
    """The party's reply to ``request`` is the stage's one refusal, the reason in its own log."""
    caplog.clear()
    with caplog.at_level("WARNING", logger="skslot.protocol.client"):
        with pytest.raises(RequestRefused) as info:
            party.answer(stage, request)
    assert str(info.value) == str(refusal(stage))
    assert reason in caplog.text


class RecordingTransport(InProcessTransport):
    """Every message each client sends, by stage: what a private run must charge."""

    def __init__(self, clients):
        super().__init__(clients)
        self.sent: dict = {}
        self.replies: dict = {}

    def exchange(self, stage, requests, **kwargs):
        exchange = super().exchange(stage, requests, **kwargs)
        for c, reply in exchange.replies.items():
            self.sent.setdefault(c, []).append(stage)
            self.replies.setdefault(c, []).append(reply)
        return exchange


@pytest.mark.parametrize("head", [FedCGSClassifier(), FedPFTClassifier(random_state=0)])
@pytest.mark.parametrize(
    ("client_tau", "covariance"),
    [("uniform", "total"), ("label-shift", "total"), ("uniform", "within")],
)
def test_every_message_of_a_private_run_is_a_charged_release(clients, client_tau, covariance, head):
    protocol = OneShotProtocol(
        head,
        tau=0.4,
        privacy=BUDGET,
        defence=DefenceBounds(),
        client_tau=client_tau,
        summary_covariance=covariance,
    )
    own = parties(clients, head, summary_estimator=GaussianSummaryEstimator(covariance=covariance))
    transport = RecordingTransport(own)
    result = protocol.run(transport, CLASSES)
    report = result.report
    assert report.status == "completed" and len(report.accuracy) == 4
    # the plan releases a test count, not an own-mix figure: the report says which it is
    assert not report.own_mix_accuracy and report.accuracy == report.test_accuracy
    assert report.accuracy_case == "whole test split"
    assert all(reply.own_mix is None for replies in transport.replies.values()
               for reply in replies[1:])  # fmt: skip
    # each client sent two messages, each charged to one release of its plan
    charged = {"upload": "statistics", "evaluation": "evaluation"}
    for c, stages in transport.sent.items():
        assert stages == ["upload", "evaluation"]
        ledger = own[c].ledger()
        assert ledger.released == tuple(charged[s] for s in stages)
        assert ledger.spent() <= BUDGET.epsilon
        # the server's account of the client equals the client's own
        assert report.privacy_spent[c] == pytest.approx(ledger.spent(), rel=1e-12)
        assert report.privacy_spent[c] > 0.99 * BUDGET.epsilon
    # the screening would release validation counts: a private run says why it skipped it
    assert "a private run" in report.screening["skipped"]
    assert "public: each client's row counts" in report.privacy
    # the summary the server holds is the client's, from the released statistics
    for c in own:
        released = own[c].ledger().result("statistics")
        assert isinstance(released, (ClassStatistics, ClassMoments))
        np.testing.assert_array_equal(
            result.summaries[result.clients.index(c)].mean, own[c].state.summary.mean
        )
        if isinstance(released, ClassMoments):  # sent, and derived from the release
            expected = released.summary(covariance=covariance, client=c)
            np.testing.assert_allclose(own[c].state.summary.mean, expected.mean, rtol=1e-12)


def test_an_own_mix_figure_from_a_private_client_is_refused(clients, monkeypatch):
    """A private plan declares the test count only: a node that sends its exact own-mix
    accuracy anyway is rejected at the evaluation, and nothing of it reaches the report."""
    from skslot.privacy.client import PrivateRelease

    def exact(self, accuracy):  # client 0 deviates from its plan
        return accuracy() if self.party.label == 0 else None

    monkeypatch.setattr(PrivateRelease, "own_mix_accuracy", exact)
    head = FedCGSClassifier()
    protocol = OneShotProtocol(head, tau=0.4, privacy=BUDGET, defence=DefenceBounds())
    result = protocol.run(InProcessTransport(parties(clients, head)), CLASSES)
    (why,) = result.report.rejected["evaluation"].values()
    assert list(result.report.rejected["evaluation"]) == [0]
    assert "an own-mix accuracy the run does not ask for" in why
    assert not result.report.own_mix_accuracy
    assert result.report.accuracy_case == "whole test split" and 0 not in result.report.accuracy


@pytest.mark.parametrize("client_tau", ["uniform", "label-shift"])
def test_every_message_of_a_private_fedavg_run_is_a_charged_release(clients, client_tau):
    """O-FedAvg: the summary (and counts) at upload, one local head, the test count."""
    head = OneShotFedAvgClassifier(C=0.1)
    protocol = OneShotProtocol(
        head, tau=0.4, privacy=BUDGET, defence=DefenceBounds(), client_tau=client_tau
    )
    own = parties(clients, head)
    transport = RecordingTransport(own)
    result = protocol.run(transport, CLASSES)
    report = result.report
    assert report.status == "completed" and len(report.accuracy) == 4
    counts = ("class_counts",) if client_tau == "label-shift" else ()
    charged = {
        "upload": ("summary", *counts),
        "updates": ("local_head",),
        "evaluation": ("evaluation",),
    }
    for c, stages in transport.sent.items():
        assert stages == ["upload", "updates", "evaluation"]
        # no exact class sums for the client's own mix: they are no release of the plan
        assert head.label_mix == "client" and transport.replies[c][0].class_sums is None
        ledger = own[c].ledger()
        assert ledger.released == tuple(r for s in stages for r in charged[s])
        assert report.privacy_spent[c] == pytest.approx(ledger.spent(), rel=1e-12)
        assert 0.99 * BUDGET.epsilon < ledger.spent() <= BUDGET.epsilon
        # what the server received is the release: the summary and the local head
        np.testing.assert_array_equal(
            result.summaries[result.clients.index(c)].mean, ledger.result("summary").mean
        )
        exact = GaussianSummaryEstimator().fit(own[c].X).summaries_[None]
        assert not np.allclose(ledger.result("summary").mean, exact.mean, rtol=1e-3)
        update = ledger.result("local_head")
        assert update.n_iter == 0  # the solver's iterations depend on the rows: not sent
    if counts:  # the label-shift rule read the released counts, integers adding up to n
        for c in own:
            released = own[c].ledger().result("class_counts")
            assert released.dtype == np.int64 and released.sum() == own[c].y.shape[0]
    # the final head is the weighted mean of the released local heads, each clipped to the
    # median norm by the defence (the factors in the report)
    heads = [own[c].ledger().result("local_head") for c in result.clients]
    clipped = [report.clipped.get(c, 1.0) for c in result.clients]
    n = np.array([u.n for u in heads], dtype=float)
    mean = sum(w * f * u.coef for w, f, u in zip(n / n.sum(), clipped, heads, strict=True))
    np.testing.assert_allclose(result.head.coef_, mean, rtol=1e-5)  # factors of six digits


def test_a_private_fedavg_client_releases_one_local_head(clients, caplog):
    head = OneShotFedAvgClassifier(C=0.1)
    protocol = OneShotProtocol(head, tau=0.4, client_tau="uniform", privacy=BUDGET)
    own = parties(clients, head)
    result = protocol.run(InProcessTransport(own), CLASSES)
    from skslot.protocol.stages.updates import UpdatesRequest

    party = own[result.clients[0]]
    first = party.ledger().result("local_head")
    same = UpdatesRequest(party.state.reference, (0.4,), "all")  # the reference it received
    assert party.answer("updates", same)[0] is first  # asked again: the same release
    two = UpdatesRequest(result.reference, (0.2, 0.4), "all")
    refused(party, "updates", two, caplog, "2 local heads, of one release")
    # in a new process: the same request gets the same head, another map is refused
    # (the same noise on rows aligned otherwise would give away the exact difference)
    restored = ClientParty(
        party.X, party.y, head=head, classes=CLASSES, label=party.label, privacy=BUDGET,
        state=ClientState.from_config(party.state.to_config()),
    )  # fmt: skip
    again = restored.answer("updates", same)[0]
    np.testing.assert_array_equal(again.coef, first.coef)
    np.testing.assert_array_equal(again.intercept, first.intercept)
    for other in (
        UpdatesRequest(party.state.reference, (0.2,), "all"),
        UpdatesRequest(result.summaries[1], (0.4,), "all"),
    ):
        refused(restored, "updates", other, caplog, "a local head on another map")


def test_a_private_fedavg_client_releases_the_total_covariance_only(clients, caplog):
    head = OneShotFedAvgClassifier(C=0.1)
    party = parties(clients, head)[0]
    releases = ("summary", "local_head")
    split = BUDGET.split(releases)
    request = UploadRequest(
        0,
        privacy=(8.0, 1e-5, 12.0),
        releases=releases,
        shares=tuple(split[r] for r in releases),
        summary_covariance="within",
    )
    refused(party, "upload", request, caplog, "a summary of the 'within' covariance")
    assert party.state.releases == () and party.state.noise_seed is None  # nothing released


def test_a_private_fedavg_run_keeps_its_reference_after_a_rejection(clients):
    """The released heads were trained on the first reference: it is never rebuilt."""
    head = OneShotFedAvgClassifier(C=0.1)
    own = parties(clients, head)

    class Inflated(InProcessTransport):
        def exchange(self, stage, requests, **kwargs):
            exchange = super().exchange(stage, requests, **kwargs)
            if stage == "updates":  # one client's head out of line with the others'
                u = exchange.replies[3][0]
                exchange.replies[3][0] = type(u)(u.classes, 1e6 * u.coef, u.intercept, u.n)
            return exchange

    protocol = OneShotProtocol(head, tau=0.4, privacy=BUDGET, defence=DefenceBounds())
    result = protocol.run(Inflated(own), CLASSES)
    assert 3 in result.report.rejected["updates"]
    assert result.report.reference_clients == [0, 1, 2, 3]  # built from every upload
    assert result.clients == [0, 1, 2] and result.report.status == "completed"


def test_a_private_client_repeats_a_release_in_a_new_process(clients):
    head = FedCGSClassifier()
    X, y, _, _ = clients[0]
    party = ClientParty(X, y, head=head, classes=CLASSES, label=0, privacy=BUDGET)
    request = PRIVATE_UPLOAD
    first = party.answer("upload", request)
    # the ClientApp keeps its state between messages as scalars, and a new process restores it
    restored = ClientState.from_config(party.state.to_config())
    again = ClientParty(
        X, y, head=head, classes=CLASSES, label=0, privacy=BUDGET, state=restored
    ).answer("upload", request)
    assert restored.noise_seed == party.state.noise_seed
    np.testing.assert_array_equal(again.statistics.sums, first.statistics.sums)
    np.testing.assert_array_equal(again.statistics.moments.gram, first.statistics.moments.gram)
    assert again.shrinkage == first.shrinkage


PLAN = {"privacy": (8.0, 1e-5, 12.0), "releases": ("statistics",), "shares": (1.0,)}


@pytest.mark.parametrize(
    "request_kwargs, reason",
    [
        ({**PLAN, "privacy": (4.0, 1e-5, 12.0)}, "the client releases under (8.0, 1e-05, 12.0)"),
        ({}, "the run asks for exact values"),
        ({**PLAN, "split_seed": 3}, "a validation split"),
        ({**PLAN, "class_sums": True}, "class sums"),
        ({**PLAN, "releases": ("evaluation",)}, "FedCGSClassifier's client makes"),
        ({**PLAN, "releases": ("statistics", "summary"), "shares": (0.5, 0.5)}, "client makes"),
        ({**PLAN, "shares": ()}, "shares ()"),
        ({**PLAN, "summary_covariance": "within"}, "would map its rows with another summary"),
    ],
)
def test_a_private_client_refuses_a_run_outside_its_plan(clients, caplog, request_kwargs, reason):
    X, y, _, _ = clients[0]
    party = ClientParty(X, y, head=FedCGSClassifier(), classes=CLASSES, label=0, privacy=BUDGET)
    refused(party, "upload", UploadRequest(0, **request_kwargs), caplog, reason)
    assert party.state.releases == () and party.state.noise_seed is None  # nothing charged


def test_a_client_without_a_budget_refuses_private_releases(clients):
    X, y, _, _ = clients[0]
    party = ClientParty(X, y, head=FedCGSClassifier(), classes=CLASSES, label=0)
    with pytest.raises(ValueError, match="has no privacy budget of its own"):
        party.answer("upload", UploadRequest(0, **PLAN))


def test_a_release_outside_the_plan_is_refused(clients):
    X, y, Xt, yt = clients[0]
    party = ClientParty(
        X,
        y,
        head=FedCGSClassifier(),
        classes=CLASSES,
        label=0,
        X_test=Xt,
        y_test=yt,
        privacy=BUDGET,
    )
    party.answer("upload", UploadRequest(0, **PLAN))
    with pytest.raises(PrivacyBudgetExceeded, match="'evaluation' is not covered"):
        party.ledger().release("evaluation", lambda s, r: 0, n=10, sensitivity=1.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"head": FedPFTClassifier(n_components=2, covariance_type="full")}, "one Gaussian"),
        ({"tau": "auto"}, "a private run needs a fixed tau"),
        ({"screen": "on", "defence": DefenceBounds()}, "a private run does not screen"),
        (
            {"head": OneShotFedAvgClassifier(), "summary_covariance": "within"},
            "summary of the total covariance",
        ),
    ],
)
def test_a_private_run_refuses_what_its_budget_cannot_cover(kwargs, match):
    settings = {"head": FedCGSClassifier(), "tau": 0.4, "privacy": BUDGET, **kwargs}
    with pytest.raises(ValueError, match=match):
        OneShotProtocol(settings.pop("head"), **settings)


def test_the_server_checks_a_private_client_s_shrinkage(clients):
    head = FedCGSClassifier()
    own = parties(clients, head)

    class Liar(InProcessTransport):
        def exchange(self, stage, requests, **kwargs):
            exchange = super().exchange(stage, requests, **kwargs)
            if stage == "upload":
                import dataclasses

                exchange.replies[0] = dataclasses.replace(exchange.replies[0], shrinkage=0.5)
            return exchange

    result = OneShotProtocol(head, tau=0.4, privacy=BUDGET).run(Liar(own), CLASSES)
    assert "not the OAS shrinkage of its released statistics" in result.report.rejected["upload"][0]
    assert result.report.privacy_spent[0] > 0  # it spent its release, though refused


def _private_party(clients, k=0, **kwargs):
    X, y, Xt, yt = clients[k]
    return ClientParty(
        X,
        y,
        head=FedCGSClassifier(),
        classes=CLASSES,
        label=k,
        X_test=Xt,
        y_test=yt,
        privacy=BUDGET,
        **kwargs,
    )


PRIVATE_UPLOAD = UploadRequest(
    0, privacy=(8.0, 1e-5, 12.0), releases=("statistics", "evaluation"), shares=(0.9, 0.1)
)


def test_a_private_client_keeps_the_plan_it_was_first_given(clients, caplog):
    """The same noise at another split of the budget would give the exact statistics away."""
    party = _private_party(clients)
    party.answer("upload", PRIVATE_UPLOAD)
    other = UploadRequest(0, privacy=(8.0, 1e-5, 12.0), releases=("statistics",), shares=(1.0,))
    refused(party, "upload", other, caplog, "but the run announced")
    restored = _private_party(clients, state=ClientState.from_config(party.state.to_config()))
    refused(restored, "upload", other, caplog, "but the run announced")
    wrong_split = UploadRequest(
        0, privacy=(8.0, 1e-5, 12.0), releases=("statistics", "evaluation"), shares=(0.5, 0.5)
    )
    refused(_private_party(clients), "upload", wrong_split, caplog, "splits its budget")


@pytest.mark.parametrize("stage", ["updates", "refit", "validation", "screening"])
def test_a_private_client_answers_no_stage_outside_its_releases(clients, caplog, stage):
    party = _private_party(clients)
    party.answer("upload", PRIVATE_UPLOAD)
    reason = {
        "updates": "FedCGSClassifier trains no local head",
        "refit": "a refit",
    }.get(stage, f"the {stage!r} stage's reply is a release of no privacy plan")
    refused(party, stage, None, caplog, reason)


def test_a_private_client_counts_its_test_rows_once_for_one_head(clients, caplog):
    """Another head under the same noise would tell the difference of the exact counts."""
    head = FedCGSClassifier()
    result = OneShotProtocol(head, tau=0.4, privacy=BUDGET).run(
        InProcessTransport(parties(clients, head)), CLASSES
    )
    party = _private_party(clients)
    party.answer("upload", PRIVATE_UPLOAD)
    from skslot.protocol.stages.evaluation import EvaluationRequest

    request = EvaluationRequest(result.reference, result.head.linear_scores(), 0.4)
    first = party.answer("evaluation", request)
    restored = _private_party(clients, state=ClientState.from_config(party.state.to_config()))
    assert restored.answer("evaluation", request) == first  # a retry, in a new process
    scores = result.head.linear_scores()
    other = EvaluationRequest(
        None, type(scores)(scores.classes, scores.coef, -scores.intercept), 0.4
    )
    refused(restored, "evaluation", other, caplog, "for another head or tau")


def test_a_private_head_is_refused_in_a_run(clients):
    """A PrivateClassifier's budget covers one fit; in a run each call would be a new,
    uncomposed release: a run's head is a plain head, its budget the run's."""
    private_head = PrivateClassifier(FedCGSClassifier(), privacy=BUDGET)
    with pytest.raises(ValueError, match="head must be a skslot one-shot head"):
        OneShotProtocol(private_head, tau=0.4)
    X, y, _, _ = clients[0]
    with pytest.raises(ValueError, match="head must be a skslot one-shot head"):
        ClientParty(X, y, head=private_head, classes=CLASSES)
    from skslot import FederatedTauSearch

    with pytest.raises(ValueError, match="head must be a skslot one-shot head"):
        FederatedTauSearch(private_head, random_state=0).fit(X, y, client=np.arange(y.shape[0]) % 2)


def test_a_failed_private_run_still_reports_what_each_client_spent(clients):
    from skslot.protocol import ProtocolRunError

    head = FedCGSClassifier()
    protocol = OneShotProtocol(head, tau=0.4, privacy=BUDGET, min_clients=5)
    with pytest.raises(ProtocolRunError, match="fewer than min_clients") as failed:
        protocol.run(InProcessTransport(parties(clients, head)), CLASSES)
    spent = failed.value.report.privacy_spent
    assert sorted(spent) == [0, 1, 2, 3] and all(0 < e < BUDGET.epsilon for e in spent.values())


def test_a_refused_request_leaves_the_private_client_as_it_was(clients, caplog):
    party = _private_party(clients)
    within = UploadRequest(0, **{**PLAN, "summary_covariance": "within"})
    refused(party, "upload", within, caplog, "would map its rows with another summary")
    assert party.state.releases == () and party.state.noise_seed is None
    party.answer("upload", PRIVATE_UPLOAD)  # the run's own plan is still open to it


def test_released_statistics_pass_the_server_s_checks_at_small_sizes():
    classes = np.arange(4)
    for seed in range(400):
        rng = np.random.default_rng(seed)
        m = 1 + seed % 3
        X, y = rng.normal(size=(10, m)) + 3.0, rng.integers(0, 4, size=10)
        released = private_class_statistics(X, y, classes, clip_norm=6.0, sigma=5.0, rng=rng)
        ClassStatistics.from_arrays(
            released.to_arrays(), classes=classes, n_features=m, n_samples=10
        )


@pytest.mark.filterwarnings("ignore::skslot.privacy.PrivacyWarning")
def test_a_lifetime_budget_charges_each_run_once_and_refuses_the_run_past_it(
    clients, tmp_path, caplog
):
    from skslot.privacy import LifetimeBudget

    budget = PrivacyBudget(8.0, clip_norm=12.0)  # fresh noise each run, as in a deployment
    records = {k: tmp_path / f"node{k}" / "budget.json" for k in clients}
    head = FedCGSClassifier()
    protocol = OneShotProtocol(head, tau=0.4, privacy=budget, defence=DefenceBounds())

    def run_once():
        own = {
            k: ClientParty(
                X, y, head=head, classes=CLASSES, label=k, X_test=Xt, y_test=yt,
                privacy=budget, lifetime=LifetimeBudget(records[k], epsilon=20.0),
            )
            for k, (X, y, Xt, yt) in clients.items()
        }  # fmt: skip
        return own, protocol.run(InProcessTransport(own, errors="reject"), CLASSES)

    for runs in (1, 2):
        own, result = run_once()
        assert result.report.status == "completed"
        for k in clients:  # a party restored from the same run's state is not charged again
            again = ClientParty(
                clients[k][0], clients[k][1], head=head, classes=CLASSES, label=k,
                privacy=budget, lifetime=LifetimeBudget(records[k], epsilon=20.0),
                state=ClientState.from_config(own[k].state.to_config()),
            )  # fmt: skip
            shares = tuple(own[k].ledger().shares.values())
            request = UploadRequest(
                0, privacy=(8.0, 1e-5, 12.0), releases=own[k].state.releases, shares=shares
            )
            again.answer("upload", request)
            assert LifetimeBudget(records[k], epsilon=20.0).spent()[0] == pytest.approx(8.0 * runs)
    # the third run would take every node past 20: refused before anything is released, with
    # the one refusal (the node's record named in its own log only)
    with caplog.at_level("WARNING", logger="skslot.protocol.client"):
        with pytest.raises(Exception, match="answers only the releases of its privacy plan") as no:
            run_once()
    assert "lifetime budget" in caplog.text and str(tmp_path) not in str(no.value)
    for k in clients:
        assert LifetimeBudget(records[k], epsilon=20.0).spent()[0] == pytest.approx(16.0)
    with pytest.raises(ValueError, match="give the client privacy"):
        ClientParty(clients[0][0], clients[0][1], head=head, classes=CLASSES,
                    lifetime=LifetimeBudget(records[0], epsilon=20.0))  # fmt: skip
