"""Screening contributions by the clients' own validation (skslot.screening, the driver's stage)."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from skslot import GaussianMap, GaussianSummary
from skslot.datasets import make_federated_classification
from skslot.defence import DefenceBounds
from skslot.heads import LinearScores, make_head
from skslot.protocol import ClientParty, InProcessTransport, OneShotProtocol
from skslot.protocol.stages import screening as screening_stage
from skslot.protocol.stages.screening import PairedCounts, paired_counts
from skslot.screening import comparable_classes, screening_evidence, strongest_case

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
        n_clients=4, n_samples_per_client=600, n_features=6, alpha=None, domain_shift=1.0,
        random_state=0,
    )  # fmt: skip
    return train_test_by_client(data, 420)


def parties(clients, head, *, attack: bool):
    """The clients as parties; with ``attack``, client 3 trains on its rows five times over,
    their labels moved to the next class (consistent messages, inside the weight cap)."""
    out = {}
    for k, (X, y, Xt, yt) in clients.items():
        if attack and k == ATTACKER:
            X, y = np.tile(X, (5, 1)), np.tile((y + 1) % 4, 5)
        out[k] = ClientParty(X, y, head=head, classes=CLASSES, label=k, X_test=Xt, y_test=yt)
    return out


def run(clients, head, *, attack, tau="auto", screen="auto", defence=None):
    protocol = OneShotProtocol(
        head, tau=tau, taus=(0.0, 1.0), defence=defence or DefenceBounds(), screen=screen,
        random_state=0,
    )  # fmt: skip
    return protocol.run(InProcessTransport(parties(clients, head, attack=attack)), CLASSES)


def honest_accuracy(result) -> float:
    return float(np.mean([result.report.accuracy[k] for k in range(3)]))


# -- the rule --------------------------------------------------------------------------


def test_the_sign_test_is_the_exact_binomial_tail():
    """p = P(Bin(b + w, 1/2) >= b), for the weakest case: without the voter most against it."""
    votes = {"a": (7, 3, 50), "b": (0, 0, 50), "c": (9, 0, 50)}
    e = screening_evidence(votes, **SETTINGS)
    assert e.discounted == "c"
    assert (e.better, e.worse, e.rows) == (7, 3, 100)
    assert e.p_value == pytest.approx(sum(comb(10, k) for k in range(7, 11)) / 2**10, rel=1e-12)
    assert e.threshold == 0.01 / 4
    assert not e.excluded  # p = 0.17


@pytest.mark.parametrize(
    ("votes", "excluded"),
    [
        ({"a": (30, 2, 100), "b": (25, 1, 100), "c": (40, 0, 100)}, True),
        # a strict majority of the remaining voters must agree
        ({"a": (60, 2, 100), "b": (0, 1, 100), "c": (40, 0, 100)}, False),
        # the gain must reach min_gain (here 1 % of the rows)
        ({"a": (10, 0, 1000), "b": (10, 0, 1000), "c": (40, 0, 100)}, False),
        # one loud voter cannot make the case: it must hold without it
        ({"a": (1, 0, 100), "b": (1, 0, 100), "c": (100, 0, 100)}, False),
        # nor can a liar claiming a little less than the largest honest margin
        ({"h": (40, 27, 300), "liar": (12, 0, 300)}, False),
        # two voters, each making the case alone
        ({"a": (40, 0, 100), "b": (35, 1, 100)}, True),
        # two voters at least
        ({"a": (90, 0, 100)}, False),
        # voters that scored no row do not count
        ({"a": (90, 0, 100), "b": (0, 0, 0)}, False),
    ],
    ids=[
        "excluded", "no-majority", "small-gain", "loud-voter", "liar", "two-voters",
        "one-voter", "empty-voter",
    ],
)  # fmt: skip
def test_exclusion_needs_every_condition_without_any_one_voter(votes, excluded):
    assert screening_evidence(votes, **SETTINGS).excluded is excluded


def test_one_client_at_most_is_excluded_per_comparison():
    """The strongest case (smallest p-value); the others wait for heads without it."""
    votes = {
        0: {1: (30, 0, 100), 2: (28, 0, 100), 3: (90, 0, 100)},
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


def test_paired_counts_match_a_row_by_row_count():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 3)), rng.integers(0, 4, size=60)
    full = LinearScores(CLASSES, rng.normal(size=(4, 3)), rng.normal(size=4))
    others = [LinearScores(CLASSES, rng.normal(size=(4, 3)), rng.normal(size=4)) for _ in range(2)]
    masks = np.array([[True, True, False, True], [True, True, True, True]])
    identity = GaussianMap(np.eye(3), np.zeros(3))
    found = paired_counts(full, others, masks, identity, 0.7, X, y, CLASSES)
    for k, (head, mask) in enumerate(zip(others, masks, strict=True)):
        better = worse = rows = 0
        for x, label in zip(X, y, strict=True):
            if not mask[label]:
                continue
            allowed = np.flatnonzero(mask)
            a = allowed[np.argmax(full.decision_scores(x[None])[0, allowed])] == label
            b = allowed[np.argmax(head.decision_scores(x[None])[0, allowed])] == label
            better, worse, rows = better + (b and not a), worse + (a and not b), rows + 1
        assert (found.better[k], found.worse[k], found.rows[k]) == (better, worse, rows)


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
    stages = screened.stages  # chosen and screened again without it
    assert stages.count("screening") == 2 and stages.count("validation") == 2
    # on a reference built again without it: O-FedAvg's local heads are trained again
    assert stages.count("updates") == 2 * (name == "O-FedAvg")
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
    # and the clients were sent it: their heads are those of the run without it
    assert screened.tau == without.tau
    for a, b in zip(screened.candidate_heads, without.candidate_heads, strict=True):
        np.testing.assert_allclose(a.linear_scores().coef, b.linear_scores().coef, rtol=1e-7)


@pytest.mark.parametrize(
    ("name", "stages"),
    [
        ("FedCGS", ["upload", "screening", "screening", "evaluation"]),
        (
            "O-FedAvg",
            ["upload", "updates", "screening", "updates", "screening", "refit", "evaluation"],
        ),
    ],
)
def test_screening_at_a_fixed_tau_is_one_more_exchange(clients, name, stages):
    """One more exchange for statistics heads (two: the attacker out, the rest screened again);
    O-FedAvg trains again on the reference built without the attacker, then on all rows."""
    head = make_head(name, seed=0)
    plain = run(clients, head, attack=True, tau=0.4, screen="auto")  # auto: none at fixed tau
    assert "screening" not in plain.stages and plain.report.screening is None
    screened = run(clients, head, attack=True, tau=0.4, screen="on")
    assert screened.stages == stages
    assert screened.report.screening["excluded"] == [ATTACKER]
    assert screened.report.screening["candidate"] == {"tau": 0.4}


def test_screening_needs_three_clients(clients):
    head = make_head("FedCGS")
    two = {k: clients[k] for k in (0, 1)}
    result = run(two, head, attack=False)
    assert "screening needs 3 clients" in result.report.screening["skipped"]
    assert "screening" not in result.stages


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
    transport = FlowerTransport(
        grid, head=protocol.head, classes=CLASSES, summary_dtype="float64", num_clients=4
    )
    flower = protocol.run(transport, CLASSES)
    assert flower.stages == in_process.stages
    assert flower.report.screening["excluded"] == [11 + ATTACKER]
    assert in_process.report.screening["excluded"] == [ATTACKER]
    assert {c - 11: e for c, e in flower.report.screening["clients"].items()} == {
        c: {**e, "discounted": None if e["discounted"] is None else e["discounted"] + 11}
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
