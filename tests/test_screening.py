"""Screening contributions by the clients' own validation (skslot.defence.screening, the stage)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from skslot import GaussianMap, GaussianSummary
from skslot.datasets import make_federated_classification
from skslot.defence import DefenceBounds
from skslot.defence.screening import (
    comparable_classes,
    pooled_sign_bound,
    screening_evidence,
    strongest_case,
)
from skslot.heads import LinearScores, make_head
from skslot.protocol import ClientParty, InProcessTransport, OneShotProtocol
from skslot.protocol.stages import screening as screening_stage
from skslot.protocol.stages.screening import PairedCounts, paired_counts

from ._clients import train_test_by_client
from .conftest import short_local_training

# the screening runs O-FedAvg at its default local budget (conftest)
pytestmark = short_local_training

CLASSES = np.arange(4)
ATTACKER = 3
SETTINGS = {"n_tested": 4, "significance": 0.01, "min_gain": 0.02}


@pytest.fixture(scope="module")
def clients():
    """Four clients of one task (no label skew); 70 % of each client's rows train."""
    data = make_federated_classification(
        n_clients=4, n_samples_per_client=1000, n_features=6, alpha=None, domain_shift=1.0,
        random_state=0,
    )  # fmt: skip
    return train_test_by_client(data, 700)


def parties(clients, head, *, attack: bool):
    """The clients as parties; with ``attack``, client 3 trains on its rows five times over,
    their labels moved to the next class (consistent messages, inside the weight cap)."""
    out = {}
    for k, (X, y, Xt, yt) in clients.items():
        if attack and k == ATTACKER:
            X, y = np.tile(X, (5, 1)), np.tile((y + 1) % 4, 5)
        out[k] = ClientParty(X, y, head=head, classes=CLASSES, label=k, X_test=Xt, y_test=yt)
    return out


@pytest.fixture
def screening_requests(monkeypatch):
    """Each voter's screening request, by its label, as the test's runs send them."""
    seen = {}
    answer = screening_stage.ScreeningStage.answer

    def recording(self, party, request):
        seen[party.label] = request
        return answer(self, party, request)

    monkeypatch.setattr(screening_stage.ScreeningStage, "answer", recording)
    return seen


def run(clients, head, *, attack, tau="auto", screen="auto", defence=None):
    protocol = OneShotProtocol(
        head, tau=tau, taus=(0.0, 1.0), defence=defence or DefenceBounds(), screen=screen,
        random_state=0,
    )  # fmt: skip
    return protocol.run(InProcessTransport(parties(clients, head, attack=attack)), CLASSES)


def honest_accuracy(result) -> float:
    return float(np.mean([result.report.accuracy[k] for k in range(3)]))


# -- the rule --------------------------------------------------------------------------


def test_the_pooled_bound_is_hoeffdings_or_pinelis_on_the_mean_gain():
    """G = mean gain of the voters kept (each weighing the same); p = min of the two tail
    bounds of a weighted sum of signs with variance proxy sum (b + w) / (r n)^2."""
    votes = {"a": (7, 3, 50), "b": (0, 0, 50), "c": (9, 0, 50), "d": (8, 2, 40)}
    e = screening_evidence(votes, **SETTINGS)
    assert (e.accuser, e.remaining, e.agreeing) == ("c", 3, 2)
    assert (e.better, e.worse, e.rows) == (15, 5, 140)
    gain = (4 / 50 + 0 / 50 + 6 / 40) / 3
    variance = 10 / (3 * 50) ** 2 + 10 / (3 * 40) ** 2
    z = gain / np.sqrt(variance)
    assert e.gain == pytest.approx(gain, rel=1e-12)
    bound = min(np.exp(-z * z / 2), 2 * np.e**3 / 9 * norm.sf(z))
    assert e.p_value == pytest.approx(bound, rel=1e-9)
    assert e.threshold == 0.01 / 4
    assert not e.excluded  # p > 0.0025
    assert pooled_sign_bound([(0, 5, 50), (1, 1, 50)]) == (pytest.approx(-0.05), 1.0)


def test_the_pooled_bound_holds_under_no_difference():
    """Simulated "no difference" (every discordant row a fair coin): the bound's rejection
    rate stays below its level, for voters of very different sizes."""
    rng = np.random.default_rng(0)
    sizes = [(20, 40), (3, 200), (40, 60)]  # (discordant rows, rows) of three voters
    rejected = 0
    for _ in range(4000):
        votes = []
        for d, n in sizes:
            b = int(rng.binomial(d, 0.5))
            votes.append((b, d - b, n))
        rejected += pooled_sign_bound(votes)[1] < 0.05
    assert rejected / 4000 < 0.05


@pytest.mark.parametrize(
    ("votes", "excluded"),
    [
        ({"a": (30, 2, 100), "b": (25, 1, 100), "c": (40, 0, 100), "d": (28, 1, 100)}, True),
        # a strict majority of the voters kept must agree
        ({"a": (60, 2, 100), "b": (0, 1, 100), "c": (70, 0, 100), "d": (0, 1, 100)}, False),
        # the mean gain must reach min_gain (here 1 % of each voter's rows)
        ({"a": (10, 0, 1000), "b": (10, 0, 1000), "c": (40, 0, 100), "d": (10, 0, 1000)},
         False),
        # one loud voter is the strongest accuser: the others' rows must make the case
        ({"a": (1, 0, 100), "b": (1, 0, 100), "c": (100, 0, 100), "d": (1, 0, 100)}, False),
        # a small voter weighs as much as a large one: its mean gain is not drowned
        ({"a": (9, 0, 30), "b": (30, 1, 300), "c": (100, 0, 300)}, True),
        # nor does a large voter dominate: the mean gain of (0.3, -0.02) is not enough alone
        ({"a": (90, 0, 300), "b": (0, 2, 100), "c": (100, 0, 300)}, False),
        # four clients: the two voters besides the strongest accuser make the case together
        ({"a": (14, 0, 60), "b": (12, 1, 50), "c": (50, 0, 100)}, True),
        # three voters at least: with two, the case would rest on one client's counts
        ({"a": (90, 0, 100), "b": (90, 0, 100)}, False),
        # voters that scored no row do not count
        ({"a": (90, 0, 100), "b": (90, 0, 100), "c": (0, 0, 0)}, False),
    ],
    ids=[
        "excluded", "no-majority", "small-gain", "loud-voter", "small-voter", "large-voter",
        "two-voters-kept", "two-voters", "empty-voter",
    ],
)  # fmt: skip
def test_exclusion_needs_every_condition_without_the_strongest_accuser(votes, excluded):
    assert screening_evidence(votes, **SETTINGS).excluded is excluded


def test_the_strongest_accuser_is_left_out_whoever_it_is():
    """A liar agreeing with any margin is left out (or weaker than an honest accuser left
    out): honest voters that make the case exclude, ones that do not keep it in."""
    honest = {"a": (20, 1, 100), "b": (18, 2, 100), "c": (16, 0, 100)}
    for lie in [(100, 0, 100), (19, 0, 100), (1, 0, 100)]:
        e = screening_evidence({**honest, "liar": lie}, **SETTINGS)
        assert e.excluded and e.remaining in (2, 3)
    framed = {"a": (20, 1, 100), "b": (0, 9, 100), "c": (1, 0, 100)}  # b: the target helps
    assert not screening_evidence(framed, **SETTINGS).excluded
    assert not screening_evidence({**framed, "liar": (100, 0, 100)}, **SETTINGS).excluded


def test_one_client_at_most_is_excluded_per_comparison():
    """The strongest case (smallest p-value); the others wait for heads without it."""
    votes = {
        0: {1: (20, 0, 100), 2: (18, 0, 100), 3: (90, 0, 100)},
        1: {0: (0, 0, 100), 2: (0, 0, 100), 3: (0, 0, 100)},
        2: {0: (0, 0, 100), 1: (0, 0, 100), 3: (0, 0, 100)},
        3: {0: (40, 1, 100), 1: (35, 2, 100), 2: (50, 0, 100)},
    }
    excluded, evidence = strongest_case(votes, significance=0.01, min_gain=0.02)
    assert excluded == 3
    assert evidence[3].excluded and evidence[0].excluded  # a case too, but weaker
    assert evidence[0].p_value > evidence[3].p_value
    assert strongest_case({k: {} for k in votes}, significance=0.01, min_gain=0.02)[0] is None


def test_comparable_classes_are_held_by_another_client():
    """What the head without a client can predict; nothing where that is one class."""
    counts = [np.array([5, 0, 2, 0]), np.array([3, 0, 0, 0]), np.array([1, 0, 0, 0])]
    np.testing.assert_array_equal(
        comparable_classes(counts),
        [[False] * 4, [True, False, True, False], [True, False, True, False]],
    )


@pytest.mark.parametrize("full_mask", [None, [True, True, True, False]])
def test_paired_counts_match_a_row_by_row_count(full_mask):
    """The left-out head predicts among its comparison's classes, the full head among all
    the federation holds: a row it sends to a class only the left-out client holds and the
    left-out head gets right is that client's error; one both get wrong counts for neither."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 3)), rng.integers(0, 4, size=200)
    full = LinearScores(CLASSES, rng.normal(size=(4, 3)), rng.normal(size=4))
    others = [LinearScores(CLASSES, rng.normal(size=(4, 3)), rng.normal(size=4)) for _ in range(2)]
    masks = np.array([[True, True, False, False], [True, True, True, False]])
    identity = GaussianMap(np.eye(3), np.zeros(3))
    found = paired_counts(
        full, others, masks, identity, 0.7, X, y, CLASSES,
        full_mask=None if full_mask is None else np.array(full_mask),
    )  # fmt: skip
    held = np.flatnonzero(np.ones(4, bool) if full_mask is None else full_mask)
    fixed = both_wrong = 0
    for k, (head, mask) in enumerate(zip(others, masks, strict=True)):
        better = worse = rows = 0
        for x, label in zip(X, y, strict=True):
            if not mask[label]:
                continue
            allowed = np.flatnonzero(mask)
            guess = held[np.argmax(full.decision_scores(x[None])[0, held])]
            a = guess == label
            b = allowed[np.argmax(head.decision_scores(x[None])[0, allowed])] == label
            fixed += not mask[guess] and b
            both_wrong += not mask[guess] and not b
            better, worse, rows = better + (b and not a), worse + (a and not b), rows + 1
        assert (found.better[k], found.worse[k], found.rows[k]) == (better, worse, rows)
    assert fixed > 0 and both_wrong > 0  # absorbed rows of both kinds were scored


def test_paired_counts_judge_each_head_as_the_client_predicts_with_its_own_mix():
    """Where the heads serve each client's own label mix, both are compared as the client
    will predict with them: shifted to its own class proportions."""
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(80, 3)), rng.integers(0, 2, size=80)
    federation = np.full(4, 0.25)
    embedded = np.log(federation)

    def own_mix_head():
        return LinearScores(
            CLASSES, rng.normal(size=(4, 3)), rng.normal(size=4), federation, embedded
        )

    full, other = own_mix_head(), own_mix_head()
    own = np.array([30, 50, 1, 0])  # this client holds rows of classes 0 and 1 (one of 2)
    masks = np.array([[True, True, True, False]])
    identity = GaussianMap(np.eye(3), np.zeros(3))
    found = paired_counts(full, [other], masks, identity, 0.5, X, y, CLASSES, class_counts=own)
    as_embedded = paired_counts(full, [other], masks, identity, 0.5, X, y, CLASSES)
    a = full.predict(X, own) == CLASSES[y]
    allowed = np.flatnonzero(masks[0])
    scores = other.decision_scores(X, own)[:, allowed]
    b = CLASSES[allowed[np.argmax(scores, axis=1)]] == CLASSES[y]
    assert found.better[0] == np.sum(b & ~a)
    assert found.worse[0] == np.sum(a & ~b)
    assert (found.better[0], found.worse[0]) != (as_embedded.better[0], as_embedded.worse[0])


def test_the_full_head_must_predict_every_compared_class():
    identity = GaussianMap(np.eye(3), np.zeros(3))
    head = LinearScores(CLASSES, np.zeros((4, 3)), np.zeros(4))
    with pytest.raises(ValueError, match="full head's classes"):
        paired_counts(
            head, [head], np.array([[True, True, True, False]]), identity, 0.5,
            np.zeros((2, 3)), np.array([0, 1]), CLASSES, full_mask=np.array([1, 1, 0, 0], bool),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("counts", "message"),
    [
        (([1, 2], [0, 0], [5, 5]), "shapes"),
        (([4, 0, 0], [3, 0, 0], [5, 5, 5]), "more discordant rows"),
        (([0, 0, 0], [0, 0, 0], [5, 5, 6]), "class counts make [5, 5, 5]"),
        (([0, -1, 0], [0, 0, 0], [5, 5, 5]), "negative"),
        (([2**62, 0, 0], [2**62, 0, 0], [5, 5, 5]), "more discordant rows"),
        (([np.nan, 0, 0], [0, 0, 0], [5, 5, 5]), "integers"),
    ],
)
def test_screening_counts_are_tied_to_the_class_counts(counts, message):
    reply = PairedCounts(*(np.array(c) for c in counts))
    why = screening_stage.check(reply, np.array([5, 5, 5]))
    assert why is not None and message in why


# -- the stage in the protocol ---------------------------------------------------------


@pytest.mark.parametrize("name", ["FedCGS", "FedPFT", "O-FedAvg"])
def test_an_attacker_is_excluded_and_the_others_recover(clients, name):
    head = make_head(name, seed=0)
    honest = run(clients, head, attack=False)
    attacked = run(clients, head, attack=True, screen="off")
    screened = run(clients, head, attack=True)
    assert honest.report.screening["excluded"] == []  # no false positive
    assert honest_accuracy(attacked) < honest_accuracy(honest) - 0.04  # the attack hurts
    assert screened.report.screening["excluded"] == [ATTACKER]
    assert "its contribution hurts the others" in screened.report.rejected["screening"][ATTACKER]
    assert honest_accuracy(screened) >= honest_accuracy(honest) - 0.02
    assert ATTACKER not in screened.clients
    stages = screened.stages  # chosen again without it; three clients left cannot vote
    assert stages.count("screening") == 1 and stages.count("validation") == 2
    assert "needs 4 clients" in screened.report.screening["skipped"]
    assert screened.report.screening["excluded"] == [ATTACKER]
    # the final head: what the screening judged; three clients cannot screen O-FedAvg
    # heads trained on another reference, so it keeps the one its screened heads had
    assert "refit" not in stages
    final = screened.report.final_head
    assert final.startswith("the screened contributions") and "3 clients left" in final
    assert stages.count("updates") == (name == "O-FedAvg")  # no local head trained again
    if name == "O-FedAvg":  # the screened local heads, carried onto the new reference
        assert "carried onto the reference built without the excluded client" in final
    assert screened.report.reference_clients == [0, 1, 2]
    without = OneShotProtocol(head, tau="auto", taus=(0.0, 1.0), random_state=0).run(
        InProcessTransport(
            {k: p for k, p in parties(clients, head, attack=False).items() if k != ATTACKER}
        ),
        CLASSES,
    )
    np.testing.assert_allclose(
        screened.reference.covariance, without.reference.covariance, rtol=1e-10, atol=0
    )
    if name == "O-FedAvg":  # the local heads carried, not trained again on it (their
        return  # test: test_o_fedavg_s_head_without_a_client_is_the_federation_s_without_it)
    # and the clients were sent it: their heads are those of the run without it
    assert screened.tau == without.tau
    for a, b in zip(screened.candidate_heads, without.candidate_heads, strict=True):
        np.testing.assert_allclose(a.linear_scores().coef, b.linear_scores().coef, rtol=1e-7)


@pytest.mark.parametrize(
    ("name", "stages"),
    [
        ("FedCGS", ["upload", "screening", "evaluation"]),
        ("O-FedAvg", ["upload", "updates", "screening", "evaluation"]),
    ],
)
def test_screening_at_a_fixed_tau_is_one_more_exchange(clients, name, stages):
    """On by default with a defence: one more exchange; O-FedAvg's screened local heads of
    the clients left make the final head (three cannot screen heads trained again).  The
    final head is the screened one: no refit on the validation rows."""
    head = make_head(name, seed=0)
    plain = run(clients, head, attack=True, tau=0.4, screen="off")
    assert "screening" not in plain.stages and plain.report.screening is None
    assert plain.report.final_head == "every accepted client's rows"
    screened = run(clients, head, attack=True, tau=0.4)
    assert screened.stages == stages
    assert screened.report.screening["excluded"] == [ATTACKER]
    assert screened.report.screening["candidate"] == {"tau": 0.4}
    np.testing.assert_array_equal(
        screened.head.linear_scores().coef, screened.candidate_heads[0].linear_scores().coef
    )


@pytest.mark.parametrize("tau", ["auto", 0.4])
def test_screening_needs_four_clients(clients, tau):
    """With three, a case would rest on one voter once the strongest accuser is left out: no
    screening, and at a fixed tau no validation rows held out either."""
    head = make_head("FedCGS")
    three = {k: clients[k] for k in (0, 1, 2)}
    result = run(three, head, attack=False, tau=tau)
    assert "screening" not in result.stages
    assert "the screening needs 4" in result.report.screening["skipped"]
    assert result.report.final_head == "every accepted client's rows"  # refitted
    if tau != "auto":
        assert result.stages == ["upload", "evaluation"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"screen": "on", "defence": None}, "needs a defence"),
        ({"screen": True, "defence": DefenceBounds()}, "screen"),
    ],
)
def test_bad_screen_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OneShotProtocol(make_head("FedCGS"), tau="auto", **kwargs)


def test_a_run_config_screening_without_a_defence_is_refused_by_the_same_check():
    pytest.importorskip("flwr", reason="Flower is not installed: pip install '.[flower]'")
    from skslot.flower import DeploymentConfig

    with pytest.raises(ValueError, match="screen='on' needs a defence"):
        DeploymentConfig(screen="on", defence=False)
    with pytest.raises(ValueError, match="screen='on' needs a defence"):
        DeploymentConfig.from_run_config({"screen": "on", "defence": False})


@pytest.mark.parametrize("bad", [{"screen_significance": 1.5}, {"screen_min_gain": -0.1}])
def test_bad_screening_thresholds_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        DefenceBounds(**bad)


def test_flower_screens_as_in_process(clients, tmp_path):
    """The attacker's node is excluded over Flower with the evidence of the in-process run."""
    pytest.importorskip("flwr", reason="Flower is not installed: pip install '.[flower]'")
    from skslot.flower import DeploymentConfig
    from skslot.flower.client_app import app as client_app
    from skslot.flower.transport import FlowerTransport

    from .flower_harness import LocalGrid

    head = make_head("FedCGS")
    node_configs = {}
    for k, party in parties(clients, head, attack=True).items():
        path = tmp_path / f"client{k}.npz"
        np.savez(path, X_train=party.X, y_train=party.y, X_test=party.X_test, y_test=party.y_test)
        node_configs[11 + k] = {"data": str(path), "client-id": k}
    config = DeploymentConfig(
        tau="auto", taus="0,1", classes="0,1,2,3", summary_dtype="float64", seed=0,
        num_clients=4, connect_timeout=0.0,
    )  # fmt: skip
    protocol = config.protocol()
    in_process = protocol.run(
        InProcessTransport(parties(clients, protocol.head, attack=True)), CLASSES
    )
    grid = LocalGrid(client_app, node_configs, config.to_run_config())
    transport = FlowerTransport(grid, summary_dtype="float64", num_clients=4)
    flower = protocol.run(transport, CLASSES)
    assert flower.stages == in_process.stages
    assert flower.report.screening["excluded"] == [11 + ATTACKER]
    assert in_process.report.screening["excluded"] == [ATTACKER]
    assert {c - 11: e for c, e in flower.report.screening["clients"].items()} == {
        c: {
            **e,
            **{k: None if e[k] is None else e[k] + 11 for k in ("accuser",)},
        }
        for c, e in in_process.report.screening["clients"].items()
    }


class LyingVoter(ClientParty):
    """Scores one row more than it holds in each comparison."""

    def answer(self, stage, request):
        if stage != "screening":
            return super().answer(stage, request)
        found = super().answer(stage, request)
        return PairedCounts(found.better, found.worse, found.rows + 1)


def test_a_voter_with_inconsistent_counts_is_rejected_and_left_out(clients):
    head = make_head("FedCGS")
    transport = parties(clients, head, attack=False)
    X, y, Xt, yt = clients[1]
    transport[1] = LyingVoter(X, y, head=head, classes=CLASSES, label=1, X_test=Xt, y_test=yt)
    protocol = OneShotProtocol(
        head, tau="auto", taus=(0.0, 1.0), defence=DefenceBounds(), random_state=0
    )
    result = protocol.run(InProcessTransport(transport), CLASSES)
    assert "class counts make" in result.report.rejected["screening"][1]
    assert 1 not in result.clients and result.report.screening["excluded"] == []


def test_a_client_whose_absence_leaves_one_class_is_reported_unscreenable(clients):
    """Without it the others hold one class: nothing to compare, and the report says so."""
    head = make_head("FedCGS")
    transport = {}
    for k, (X, y, Xt, yt) in clients.items():
        if k != ATTACKER:
            X, y = X[y == 0], y[y == 0]
        transport[k] = ClientParty(X, y, head=head, classes=CLASSES, label=k, X_test=Xt, y_test=yt)
    result = run_parties(transport, head)
    assert result.report.screening["unscreenable"] == {
        ATTACKER: "the other clients hold fewer than two classes"
    }
    assert result.report.screening["clients"][ATTACKER]["voters"] == 0


class FailsWithoutAll(type(make_head("FedCGS"))):
    """A head that cannot be fitted on fewer than all four clients."""

    def _fit_from_statistics(self, statistics, classes, maps):
        if len(statistics) < 4:
            raise ValueError("needs every client")
        super()._fit_from_statistics(statistics, classes, maps)


def test_a_head_without_a_client_that_cannot_be_fitted_leaves_it_unscreened(clients):
    head = FailsWithoutAll()
    result = run_parties(parties(clients, head, attack=True), head)
    assert result.report.status == "completed" and len(result.clients) == 4
    unscreenable = result.report.screening["unscreenable"]
    assert sorted(unscreenable) == [0, 1, 2, 3]
    assert "could not be fitted: ValueError: needs every client" in unscreenable[0]
    assert "screening" not in result.stages  # no comparison to ask for


def test_an_exclusion_never_leaves_fewer_than_min_clients(clients):
    head = make_head("FedCGS")
    protocol = OneShotProtocol(
        head, tau="auto", taus=(0.0, 1.0), defence=DefenceBounds(), min_clients=4,
        random_state=0,
    )  # fmt: skip
    result = protocol.run(InProcessTransport(parties(clients, head, attack=True)), CLASSES)
    assert result.report.screening["excluded"] == []
    assert result.report.screening["kept"] == {
        ATTACKER: "excluding it would leave fewer than min_clients"
    }
    assert len(result.clients) == 4


def run_parties(transport, head):
    protocol = OneShotProtocol(
        head, tau="auto", taus=(0.0, 1.0), defence=DefenceBounds(), random_state=0
    )
    return protocol.run(InProcessTransport(transport), CLASSES)


class ShortValidation(ClientParty):
    """Announces one fitting row more than its class counts leave, and one held-out row less.

    Its totals and its summary's count agree with the claim: only the split, derived from
    the class counts, tells."""

    def answer(self, stage, request):
        if stage != "upload":
            return super().answer(stage, request)
        from dataclasses import replace

        found = super().answer(stage, request)
        own = found.summary
        claimed = GaussianSummary(own.n + 1, own.mean, own.covariance, client=own.client)
        return replace(
            found, summary=claimed, n_fit=found.n_fit + 1, n_validation=found.n_validation - 1
        )


def test_the_validation_part_is_the_one_the_class_counts_make(clients):
    head = make_head("O-FedAvg", seed=0)
    transport = parties(clients, head, attack=False)
    X, y, Xt, yt = clients[2]
    transport[2] = ShortValidation(X, y, head=head, classes=CLASSES, label=2, X_test=Xt, y_test=yt)
    result = run_parties(transport, head)
    assert "its class counts make" in result.report.rejected["upload"][2]
    assert 2 not in result.clients


class FramingVoter(ClientParty):
    """Claims, at the screening, every row it scores "better without" each client."""

    def answer(self, stage, request):
        found = super().answer(stage, request)
        if stage != "screening":
            return found
        return PairedCounts(found.rows.copy(), np.zeros_like(found.rows), found.rows)


@pytest.mark.parametrize("name", ["FedCGS", "O-FedAvg"])
def test_a_framing_voter_excludes_no_honest_client(clients, name):
    """Its counts pass their checks, but the case must hold without the strongest accuser:
    the others' own counts decide, as in the run where it votes honestly."""
    head = make_head(name, seed=0)
    transport = parties(clients, head, attack=False)
    X, y, Xt, yt = clients[ATTACKER]
    transport[ATTACKER] = FramingVoter(
        X, y, head=head, classes=CLASSES, label=ATTACKER, X_test=Xt, y_test=yt
    )
    framed = run_parties(transport, head)
    honest = run_parties(parties(clients, head, attack=False), head)
    assert framed.report.screening["excluded"] == honest.report.screening["excluded"] == []
    for c in range(3):
        assert framed.report.screening["clients"][c]["accuser"] == ATTACKER


def own_class_parties(clients, head, *, rows):
    """Clients 0-2 hold no row of class 3; client 3 holds its rows, ``rows(X, y)`` of them."""
    out = {}
    for k, (X, y, Xt, yt) in clients.items():
        if k == ATTACKER:
            X, y = rows(X, y)
        else:
            X, y = X[y != 3], y[y != 3]
        out[k] = ClientParty(X, y, head=head, classes=CLASSES, label=k, X_test=Xt, y_test=yt)
    return out


@pytest.mark.parametrize("name", ["FedCGS", "FedPFT", "O-FedAvg"])
def test_rows_sent_to_a_class_only_it_holds_count_against_it(clients, name):
    """Every row labelled the class only it holds, five times over: the full head sends the
    others' rows there, which the head without it cannot; the screening counts them.  (Where
    every class of the domain is served: with each client's own mix the others predict
    with their own proportions, where that class has none of their rows.)"""
    head = make_head(name, seed=0).set_params(label_mix="federation")
    if name == "O-FedAvg":  # on held classes a one-class client moves no row (test_heads)
        head.set_params(local_classes="all")

    def all_class_3(X, y):
        return np.tile(X, (5, 1)), np.full(5 * y.shape[0], 3)

    def genuine(X, y):
        return X, y

    attacked = run_parties(own_class_parties(clients, head, rows=all_class_3), head)
    assert attacked.report.screening["excluded"] == [ATTACKER]
    evidence = attacked.report.screening["clients"][ATTACKER]
    assert evidence["better"] > 3 * evidence["worse"] and evidence["gain"] > 0.1
    honest = run_parties(own_class_parties(clients, head, rows=genuine), head)
    assert honest.report.screening["excluded"] == []  # holding a class alone is no harm


@pytest.mark.parametrize("name", ["FedCGS", "FedPFT"])
def test_with_each_clients_own_mix_a_class_only_it_holds_absorbs_no_honest_row(clients, name):
    """The same attack where each client's rows follow its own mix (the default): the others
    predict with their own proportions, which hold none of that class, in the screening as
    in the final head, so it costs them at most 3 points, whether or not it is excluded."""
    head = make_head(name, seed=0)

    def all_class_3(X, y):
        return np.tile(X, (5, 1)), np.full(5 * y.shape[0], 3)

    def honest_accuracy(result):
        return np.mean([result.report.accuracy[k] for k in range(3)])

    attacked = run_parties(own_class_parties(clients, head, rows=all_class_3), head)
    genuine = run_parties(own_class_parties(clients, head, rows=lambda X, y: (X, y)), head)
    assert honest_accuracy(attacked) >= honest_accuracy(genuine) - 0.03
    assert genuine.report.screening["excluded"] == []


def test_clients_with_fewer_than_three_voters_are_reported_unscreenable(clients):
    """A client holding out no row votes on no one: every other client has two voters, which
    cannot make a case; the report names them and the head is not called screened."""
    head = make_head("FedCGS")
    transport = parties(clients, head, attack=False)
    X, y, Xt, yt = clients[ATTACKER]
    few = np.concatenate([np.flatnonzero(y == c)[:4] for c in CLASSES])  # 4 rows: none out
    transport[ATTACKER] = ClientParty(
        X[few], y[few], head=head, classes=CLASSES, label=ATTACKER, X_test=Xt, y_test=yt
    )
    result = run_parties(transport, head)
    unscreenable = result.report.screening["unscreenable"]
    assert sorted(unscreenable) == [0, 1, 2]
    assert all("only 2 other clients scored rows for it" in why for why in unscreenable.values())
    assert result.report.screening["excluded"] == []
    assert result.report.final_head.startswith("the screened contributions")  # client 3 was
    assert "(not screenable: node 0 (client 0), node 1 (client 1), node 2 (client 2))" in (
        result.report.final_head
    )


@pytest.mark.parametrize(
    ("full_mask", "message"),
    [
        (None, "the full head needs a 0/1 mask over the 4 classes"),
        (np.array([1, 1, 0, 0], dtype=np.uint8), "lie outside the full head's"),
        (np.array([1, 1, 2, 1], dtype=np.uint8), "the full head needs a 0/1 mask"),
    ],
)
def test_a_request_whose_full_head_classes_are_malformed_is_refused(full_mask, message):
    """The client reads the classes the full head predicts among and checks that every
    comparison's lie within them before scoring anything."""
    from skslot.protocol.stages._stage import ClientWire, ServerWire
    from skslot.wire import MessageFormatError

    rng = np.random.default_rng(0)
    head = LinearScores(CLASSES, rng.normal(size=(4, 3)), rng.normal(size=4))
    request = screening_stage.ScreeningRequest(
        None, head, (head,), np.array([[True, True, True, False]]), 0.5, np.ones(4, bool)
    )
    payload = screening_stage.STAGE.encode_request(
        request, ServerWire(make_head("FedCGS"), CLASSES)
    )
    if full_mask is None:
        del payload.arrays[screening_stage.HEAD]["mask"]
    else:
        payload.arrays[screening_stage.HEAD]["mask"] = full_mask
    with pytest.raises(MessageFormatError, match=message):
        screening_stage.STAGE.decode_request(payload.received(), ClientWire(CLASSES, 3))
    intact = screening_stage.STAGE.encode_request(request, ServerWire(make_head("FedCGS"), CLASSES))
    got = screening_stage.STAGE.decode_request(intact.received(), ClientWire(CLASSES, 3))
    np.testing.assert_array_equal(got.full_mask, np.ones(4, bool))


def test_the_head_without_a_client_is_compared_on_the_reference_built_without_it(
    clients, screening_requests
):
    """A head without client j is on the barycenter of the others' summaries alone (a
    statistics head's statistics aligned onto it, O-FedAvg's local heads carried onto it),
    and each voter aligns its rows for that comparison with its own map onto it."""
    from skslot import BuresBarycenter
    from skslot.label_shift import label_shift_distances

    seen = screening_requests
    head = make_head("FedCGS").set_params(label_mix="federation")
    result = run(clients, head, attack=False, tau=1.0, screen="on")
    assert result.report.screening["excluded"] == []
    summaries = dict(zip(result.clients, result.summaries, strict=True))
    request = seen[0]  # voter 0 gets the heads without 1, 2 and 3
    assert len(request.references) == len(request.left_out) == 3
    for j, reference, tau in zip((1, 2, 3), request.references, request.fractions, strict=True):
        others = [summaries[c] for c in summaries if c != j]
        want = BuresBarycenter().fit(others).reference_
        np.testing.assert_allclose(reference.mean, want.mean, atol=1e-6)
        np.testing.assert_allclose(reference.covariance, want.covariance, atol=1e-6)
        counts = {c: np.bincount(clients[c][1], minlength=4) for c in summaries if c != j}
        assert tau == pytest.approx(result.tau * label_shift_distances(counts)[0])
    assert not np.allclose(request.references[0].covariance, result.reference.covariance)

    seen.clear()
    fedavg = make_head("O-FedAvg")
    run(clients, fedavg, attack=False, tau=1.0, screen="on")
    assert len(seen[0].references) == 3
    for j, reference in zip((1, 2, 3), seen[0].references, strict=True):
        want = BuresBarycenter().fit([summaries[c] for c in summaries if c != j]).reference_
        np.testing.assert_allclose(reference.covariance, want.covariance, atol=1e-6)


def test_o_fedavg_s_head_without_a_client_is_the_federation_s_without_it(
    clients, screening_requests
):
    """Where each client's map moves its mean alone (``tau = 0``, its mean moved by its
    domain offset measured within classes, which every client's class sums shape), a local
    head carried onto the reference built without client j is the head trained on its rows
    mapped onto it: the head without j each voter compares is the final head of the
    federation without j, every client's rows and head as in that run."""
    seen = screening_requests
    head = make_head("O-FedAvg", seed=0).set_params(tol=1e-10, max_iter=5000)
    settings = {
        "tau": "auto", "taus": (0.0,), "mean_tau": 1.0, "refit": False, "random_state": 0,
        "defence": DefenceBounds(clip_norm_ratio=None),  # the clip's median: all four clients
    }  # fmt: skip
    OneShotProtocol(head, screen="on", **settings).run(
        InProcessTransport(parties(clients, head, attack=False)), CLASSES
    )
    # the last client out: the others keep their positions, hence their validation splits,
    # and the final head is fitted on their fitting rows as the compared heads are
    others = {k: p for k, p in parties(clients, head, attack=False).items() if k != 3}
    without = OneShotProtocol(head, screen="off", **settings).run(
        InProcessTransport(others), CLASSES
    )
    assert without.report.final_head == "every accepted client's fitting rows"
    left_out = seen[0].left_out[2]  # voter 0's head without client 3
    final = without.head.linear_scores()
    np.testing.assert_allclose(left_out.coef, final.coef, atol=1e-4)
    centred = [h.intercept - h.intercept.mean() for h in (left_out, final)]
    np.testing.assert_allclose(*centred, atol=1e-3)


def test_a_left_out_heads_reference_travels_and_is_checked():
    """The reference built without a head's client and the voter's fraction round-trip; a
    fraction outside [0, 1] or a reference without one is refused."""
    from skslot.protocol.stages._stage import ClientWire, ServerWire
    from skslot.wire import MessageFormatError

    rng = np.random.default_rng(0)
    head = LinearScores(CLASSES, rng.normal(size=(4, 3)), rng.normal(size=4))
    reference = GaussianSummary(50, rng.normal(size=3), np.diag([1.0, 2.0, 3.0]))
    request = screening_stage.ScreeningRequest(
        None, head, (head, head), np.ones((2, 4), bool), 0.5, np.ones(4, bool),
        (reference, None), (0.25, 0.0),
    )  # fmt: skip
    wire = ServerWire(make_head("FedCGS"), CLASSES)
    got = screening_stage.STAGE.decode_request(
        screening_stage.STAGE.encode_request(request, wire).received(), ClientWire(CLASSES, 3)
    )
    assert got.references[1] is None and got.fractions == (0.25, 0.0)
    np.testing.assert_allclose(got.references[0].covariance, reference.covariance, rtol=1e-6)
    for key, value in (("tau", np.array([1.5])), ("reference", None)):
        payload = screening_stage.STAGE.encode_request(request, wire)
        arrays = payload.arrays[screening_stage.LEFT_OUT]
        if value is None:
            del arrays[f"0.{key}"]
        else:
            arrays[f"0.{key}"] = value
        with pytest.raises(MessageFormatError, match="left-out head's"):
            screening_stage.STAGE.decode_request(payload.received(), ClientWire(CLASSES, 3))


def test_a_reference_fixed_before_the_run_is_not_sent_again_with_each_left_out_head(
    clients, screening_requests
):
    """A fitted transformer's reference does not depend on any one client: the screening
    compares on it and sends no reference with the left-out heads."""
    from skslot import SLOTTransformer
    from skslot.protocol import ClientState, FixedReference

    seen = screening_requests
    X = np.vstack([c[0] for c in clients.values()])
    y = np.concatenate([c[1] for c in clients.values()])
    label = np.concatenate([np.full(len(c[0]), k) for k, c in clients.items()])
    slot = SLOTTransformer(tau=1.0, label_mix="federation").fit(X, y, client=label)
    maps = {k: slot.client_map(k) for k in clients}
    head = make_head("FedCGS").set_params(label_mix="federation")
    honest = parties(clients, head, attack=False)
    for k, party in honest.items():  # the fitted maps, on both sides
        party.state = ClientState(fixed_map=maps[k])
    protocol = OneShotProtocol(
        head, tau=1.0, defence=DefenceBounds(), screen="on", random_state=0,
        reference=FixedReference(slot.reference_, maps),
    )  # fmt: skip
    result = protocol.run(InProcessTransport(honest), CLASSES)
    assert result.report.screening["excluded"] == []
    assert seen and all(request.references == () for request in seen.values())
