"""One protocol, two transports: the driver, its client side, the heads' protocols, the registry."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone

from skslot import (
    FederatedTauSearch,
    GaussianSummary,
    GaussianSummaryEstimator,
    SLOTTransformer,
)
from skslot._validation import spawn_seeds
from skslot.datasets import make_federated_classification
from skslot.defence import DefenceBounds, NoDefence
from skslot.defence.culprits import PROBE_ITERATIONS
from skslot.heads import (
    HEADS,
    FedCGSClassifier,
    FedPFTClassifier,
    OneShotFedAvgClassifier,
    make_head,
)
from skslot.label_mix import own_mix_accuracy
from skslot.label_shift import label_shift_distances
from skslot.protocol import (
    ClientParty,
    InProcessTransport,
    OneShotProtocol,
    ProtocolRunError,
    ReferenceStep,
    held_out_rows,
)
from skslot.protocol.stages import upload as upload_stage
from skslot.selection import validation_split

from ._clients import train_test_by_client
from .conftest import short_local_training

# O-FedAvg runs through most of these tests at its default local budget (conftest)
pytestmark = short_local_training

CLASSES = np.arange(4)


class WithinClassFedCGS(FedCGSClassifier):
    """A user's own head (here a FedCGS variant), deployable by its import path."""

    def __init__(self, *, shrinkage: float = 1e-2) -> None:
        super().__init__(covariance="within", shrinkage=shrinkage)

    def get_params(self, deep: bool = True) -> dict:
        return {"shrinkage": self.shrinkage}


@pytest.fixture(scope="module")
def clients():
    data = make_federated_classification(
        n_clients=4,
        n_samples_per_client=150,
        n_features=6,
        alpha=0.5,
        domain_shift=2.0,
        random_state=3,
    )
    return train_test_by_client(data, 100)


def parties(clients, head):
    return {
        k: ClientParty(X, y, head=head, classes=CLASSES, label=k, X_test=Xt, y_test=yt)
        for k, (X, y, Xt, yt) in clients.items()
    }


def test_the_stage_order_depends_on_the_head_s_protocol_only(clients):
    expected = {
        ("FedCGS", 0.4): ["upload", "evaluation"],
        ("FedPFT", 0.4): ["upload", "evaluation"],
        ("O-FedAvg", 0.4): ["upload", "updates", "evaluation"],
        ("FedCGS", "auto"): ["upload", "validation", "evaluation"],
        ("O-FedAvg", "auto"): ["upload", "updates", "validation", "refit", "evaluation"],
    }
    for (name, tau), stages in expected.items():
        head = make_head(name, seed=0)
        protocol = OneShotProtocol(head, tau=tau, taus=(0.0, 0.5), random_state=0)
        result = protocol.run(InProcessTransport(parties(clients, head)), CLASSES)
        assert result.stages == stages, (name, tau)
        assert result.report.status == "completed"
        assert sorted(result.report.accuracy) == [0, 1, 2, 3]


@pytest.mark.parametrize("name", ["FedCGS", "FedPFT", "O-FedAvg"])
@pytest.mark.parametrize(("tau", "screen"), [("auto", "auto"), (0.4, "on")])
def test_held_out_rows_are_outside_the_maps_they_validate(clients, name, tau, screen):
    """With a validation round, each map is estimated from the client's fitting rows only.

    Its summary is that of the fitting rows (FedCGS: derived from their statistics), the
    map deployed is the one it makes, and the final head is the screened one, fitted on the
    fitting rows too (no refit on the held-out rows, which the screening never judged)."""
    head = make_head(name, seed=0)
    transport = parties(clients, head)
    result = OneShotProtocol(
        head, tau=tau, taus=(0.0, 0.5), screen=screen, defence=DefenceBounds(), random_state=0
    ).run(InProcessTransport(transport), CLASSES)
    assert result.clients == [0, 1, 2, 3]
    for k, summary in zip(result.clients, result.summaries, strict=True):
        party = transport[k]
        fit, held = party.split
        assert held.size > 0 and summary.n == fit.size
        direct = GaussianSummaryEstimator().fit(party.X[fit]).summaries_[None]
        np.testing.assert_allclose(summary.mean, direct.mean, rtol=1e-12)
        np.testing.assert_allclose(summary.covariance, direct.covariance, rtol=1e-9, atol=1e-12)
        kept = party.state.summary  # the client maps with the summary the server received
        np.testing.assert_array_equal(kept.mean, summary.mean)
        np.testing.assert_array_equal(kept.covariance, summary.covariance)
    assert "refit" not in result.stages
    chosen = result.candidate_heads[0 if tau != "auto" else result.selection.index]
    np.testing.assert_array_equal(result.head.linear_scores().coef, chosen.linear_scores().coef)


class PoisonedValidation(ClientParty):
    """Honest fitting part and summary; its validation part's rows x50 + 500.

    The summary and every check against it describe the fitting part; the final head of an
    unscreened run is refitted on both parts."""

    def moved(self, X: np.ndarray, fit: np.ndarray) -> np.ndarray:
        return X * 50 + 500.0

    def answer(self, stage, request):
        if stage != "upload":
            return super().answer(stage, request)
        found = super().answer(stage, request)
        fit, val = self.split
        X = self.X.copy()
        X[val] = self.moved(X[val], X[fit])
        _, validation = self.head.strategy.client_upload(
            self.head, X, self.y, self.classes, (fit, val), client_index=request.client_index
        )
        return dataclasses.replace(found, validation=validation)


class MovedValidation(PoisonedValidation):
    """Its validation part's rows moved 30 standard deviations (their spread unchanged)."""

    def moved(self, X: np.ndarray, fit: np.ndarray) -> np.ndarray:
        return X + 30 * np.sqrt(np.trace(np.cov(fit.T))) / np.sqrt(X.shape[1])


def rejected_at_upload(head, transport) -> str:
    """Why client 0 was rejected at the upload of an unscreened run with a validation round
    (a screened run asks for no validation statistics)."""
    result = OneShotProtocol(
        head, tau="auto", taus=(0.0, 0.5), defence=DefenceBounds(), random_state=0,
        screen="off",
    ).run(InProcessTransport(transport), CLASSES)  # fmt: skip
    assert 0 not in result.clients
    return result.report.rejected["upload"][0]


@pytest.mark.parametrize("name", ["FedCGS", "FedPFT"])
def test_a_validation_part_out_of_line_with_the_fitting_part_is_rejected(clients, name):
    head = make_head(name, seed=0)
    transport = parties(clients, head)
    X, y, Xt, yt = clients[0]
    transport[0] = PoisonedValidation(
        X, y, head=head, classes=CLASSES, label=0, X_test=Xt, y_test=yt
    )
    why = rejected_at_upload(head, transport)
    assert "validation part's variance is" in why and "times its fitting part's" in why


def test_a_moved_fedpft_validation_part_is_rejected_though_it_skips_a_class(clients):
    """A class too small to be sent in the validation part does not switch off the mean's
    check: the two parts are compared on the classes both describe."""
    head = make_head("FedPFT", seed=0)
    transport = parties(clients, head)
    X, y, Xt, yt = clients[0]
    keep = np.r_[np.flatnonzero(y != 3), np.flatnonzero(y == 3)[:5]]  # 5 rows: 1 held out
    transport[0] = MovedValidation(
        X[keep], y[keep], head=head, classes=CLASSES, label=0, X_test=Xt, y_test=yt
    )
    why = rejected_at_upload(head, transport)
    assert "validation part's mean lies" in why and "standard deviations" in why


# at 1e3 from the origin the server's LogisticRegression on the synthetic rows stops at its
# max_iter: this test checks the upload's acceptance, not the server head's fit
@pytest.mark.filterwarnings("ignore:lbfgs failed to converge:sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("offset", [50.0, 1e3])
def test_an_honest_fedpft_validation_part_that_skips_its_classes_is_accepted(offset):
    """One held-out row per class: FedPFT sends none of them, far from the origin.

    Its validation part describes no row, so it has no mean to compare (not a mean of 0);
    and at 1e3 from the origin float16 keeps about 0.25 of each mean, which the check of
    its mixtures against its summary allows for in process as on the wire."""
    rng = np.random.default_rng(0)
    classes = np.arange(3)
    head = make_head("FedPFT", seed=0)
    transport = {}
    for k in range(4):
        y = np.repeat(classes, 5)  # 5 rows per class: 1 held out
        X = rng.normal(size=(15, 4)) + offset + classes[y][:, None]
        transport[k] = ClientParty(X, y, head=head, classes=classes, label=k)
    result = OneShotProtocol(
        head, tau="auto", taus=(0.0, 0.5), defence=DefenceBounds(), random_state=0,
        evaluate=False,
    ).run(InProcessTransport(transport), classes)  # fmt: skip
    assert "upload" not in result.report.rejected
    assert result.clients == [0, 1, 2, 3]


def test_a_party_run_again_with_another_split_summarises_its_new_fitting_rows(clients):
    """Its summary is kept within a run, never across splits: the held-out rows stay out."""
    head = make_head("O-FedAvg", seed=0)
    transport = parties(clients, head)
    for tau, seed in [(0.4, None), ("auto", 0), ("auto", 1)]:
        result = OneShotProtocol(head, tau=tau, taus=(0.0, 0.5), random_state=seed).run(
            InProcessTransport(transport), CLASSES
        )
        for k, summary in zip(result.clients, result.summaries, strict=True):
            party = transport[k]
            X, _ = party.fitting_rows()
            np.testing.assert_allclose(summary.mean, X.mean(axis=0), rtol=1e-12)


def test_held_out_rows_are_the_rows_the_clients_hold_out(clients):
    """The k-th client in the protocol's order splits with the run's k-th seed: the public
    helper gives exactly the rows each party of a run held out, for the labels and seeds the
    search takes (a RandomState is not consumed)."""
    head = make_head("O-FedAvg", seed=0)
    transport = parties(clients, head)
    labels = {1: 10, 0: 9, 3: 100, 2: 2}  # rows in this order; the protocol sorts the labels
    y = np.concatenate([transport[k].y for k in labels])
    who = np.concatenate([np.full(transport[k].y.shape, labels[k]) for k in labels])
    state = np.random.RandomState(5)
    rows = held_out_rows(y, list(who), random_state=state)  # a plain list, as the search takes
    assert list(rows) == [2, 9, 10, 100]
    seeds = spawn_seeds(5, 4)  # by position in that order, each client's own split
    for position, label in enumerate(rows):
        own = np.flatnonzero(who == label)
        expected = validation_split(y[own], 0.2, seeds[position])
        np.testing.assert_array_equal(rows[label][0], own[expected[0]])
        np.testing.assert_array_equal(rows[label][1], own[expected[1]])
    relabelled = {labels[k]: p for k, p in transport.items()}
    OneShotProtocol(head, tau="auto", taus=(0.0, 0.5), random_state=state).run(
        InProcessTransport(relabelled), CLASSES
    )
    for label, party in relabelled.items():  # each party's rows lie in one block of y
        start = np.flatnonzero(who == label)[0]
        fit, val = party.split
        np.testing.assert_array_equal(fit, rows[label][0] - start)
        np.testing.assert_array_equal(val, rows[label][1] - start)
    strings = held_out_rows(y, who.astype(str), random_state=5)
    assert list(strings) == ["10", "100", "2", "9"]  # strings sort as text
    with pytest.raises(ValueError, match="client has 399 labels but X has 400 rows"):
        held_out_rows(y, who[:-1])
    with pytest.raises(ValueError, match="mix integers and strings"):
        held_out_rows(y, [*who[:-1], "a"])
    with pytest.raises(ValueError, match=r"validation_fraction must be in \(0, 1\)"):
        held_out_rows(y, who, validation_fraction=0.0)


def _other_dimension(upload):
    m = upload.summary.dimension + 1
    return dataclasses.replace(
        upload, summary=GaussianSummary(upload.summary.n, np.zeros(m), np.eye(m), client=0)
    )


def _summary_of_more_rows(upload):
    summary = upload.summary
    return dataclasses.replace(
        upload, summary=GaussianSummary(summary.n + 1, summary.mean, summary.covariance, client=0)
    )


#: Each check of a client's upload, where it runs, and the reason it gives: the codec checks
#: types, sizes and dimensions before anything is allocated; the stage's ``check`` what the
#: decoded values mean.  Both transports run both, once.
UPLOAD_CHECKS = {
    "negative rows": (lambda u: dataclasses.replace(u, n_validation=-1),
                      "codec", "row counts must be >= 0"),
    "a float count": (lambda u: dataclasses.replace(u, n_validation=0.5),
                      "codec", "'n-validation' has type float"),
    "a boolean count": (lambda u: dataclasses.replace(u, n_test=True),
                        "codec", "'n-test' has type bool"),
    "too few class counts": (lambda u: dataclasses.replace(u, class_counts=u.class_counts[:-1]),
                             "codec", "class-counts must be a list of 4 integers"),
    "another dimension": (_other_dimension, "codec", "dimension 7, expected 6"),
    "class counts off the rows": (
        lambda u: dataclasses.replace(u, class_counts=u.class_counts + np.eye(4, dtype=int)[0]),
        "check", "class counts add up to"),
    "statistics of other rows": (lambda u: dataclasses.replace(u, n_fit=u.n_fit + 1),
                                 "codec", "mixtures describe 81 rows but the client announced 82"),
    "a summary of other rows": (_summary_of_more_rows, "check", "its summary counts 82 rows"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(UPLOAD_CHECKS))
def test_each_check_of_an_upload_runs_once_in_its_place_for_both_transports(clients, name):
    """In process, a reply passes the codec's checks as a Flower message does."""
    change, where, reason = UPLOAD_CHECKS[name]
    sent = {}

    class Hostile(ClientParty):
        def answer(self, stage, request):
            reply = super().answer(stage, request)
            if stage == "upload":
                sent["request"], sent["reply"] = request, change(reply)
                return sent["reply"]
            return reply

    head = make_head("FedPFT", seed=0)
    transport = parties(clients, head)
    X, y, Xt, yt = clients[0]
    transport[0] = Hostile(X, y, head=head, classes=CLASSES, label=0, X_test=Xt, y_test=yt)
    protocol = OneShotProtocol(head, tau="auto", taus=(0.0, 0.5), screen="off", random_state=0)
    result = protocol.run(InProcessTransport(transport), CLASSES)
    assert reason in result.report.rejected["upload"][0]
    # the Flower transport's path: the reply as a Flower message, decoded by the same codec
    pytest.importorskip("flwr", reason="Flower is not installed: pip install '.[flower]'")
    from flwr.app import Message

    from skslot.flower import messages
    from skslot.protocol import ServerWire

    from .flower_harness import as_server_app

    as_server_app()
    stage = upload_stage.STAGE
    payload = stage.encode_reply(sent["reply"], sent["request"])
    message = Message(messages.content(payload), dst_node_id=11, message_type="query.upload")
    wire = ServerWire(head, CLASSES, summary_dtype="float64", n_features=6)
    decoded, rejected = stage.decode_replies(
        {11: messages.received(message)}, {11: sent["request"]}, wire
    )
    if where == "codec":
        assert reason in rejected[11]
    else:  # past the codec: the stage's check refuses it, whichever the transport
        assert 11 not in rejected
        assert reason in upload_stage.check(
            decoded[11],
            sent["request"],
            head=head,
            defence=NoDefence(),
            n_classes=4,
            validation_fraction=protocol.validation_fraction,
        )


@pytest.mark.parametrize(
    ("settings", "stages"),
    [
        (
            {"head": "FedPFT", "head_params": '{"covariance_type": "full"}', "tau": "auto"},
            ["upload", "validation", "screening", "evaluation"],
        ),
        (
            {"head": "FedCGS", "tau": "auto", "client_tau": "label-shift"},
            ["upload", "validation", "screening", "evaluation"],
        ),
        (
            {
                "head": "O-FedAvg",
                "head_params": '{"max_iter": 50}',
                "tau": 1.0,
                "client_tau": "label-shift",
            },
            ["upload", "updates", "screening", "evaluation"],
        ),
        (
            {"head": "FedPFT", "tau": 0.6, "mean_tau": 1.0, "client_tau": "label-shift"}
            | {"screen": "off"},
            ["upload", "evaluation"],
        ),
        (
            {"head": "O-FedAvg", "head_params": '{"max_iter": 50}', "tau": "auto"}
            | {"mean_tau": 0.5, "screen": "off"},
            ["upload", "updates", "validation", "refit", "evaluation"],
        ),
    ],
    ids=[
        "FedPFT-full-auto",
        "FedCGS-label-shift-auto",
        "O-FedAvg-label-shift-rule",
        "FedPFT-mean-tau-label-shift",
        "O-FedAvg-mean-tau-auto",
    ],
)
def test_the_same_protocol_object_runs_over_both_transports(clients, tmp_path, settings, stages):
    """In process and over Flower (LocalGrid): the same choice, head and accuracies."""
    pytest.importorskip("flwr", reason="Flower is not installed: pip install '.[flower]'")
    from skslot.flower import DeploymentConfig
    from skslot.flower.client_app import app as client_app
    from skslot.flower.transport import FlowerTransport

    from .flower_harness import LocalGrid

    node_configs = {}
    for k, (X, y, Xt, yt) in clients.items():
        path = tmp_path / f"client{k}.npz"
        np.savez(path, X_train=X, y_train=y, X_test=Xt, y_test=yt)
        node_configs[11 + k] = {"data": str(path), "client-id": k}
    config = DeploymentConfig(
        taus="0,0.4,1",
        classes="0,1,2,3",
        summary_dtype="float64",
        seed=2,
        num_clients=4,
        connect_timeout=0.0,
        **settings,
    )
    protocol = config.protocol()
    in_process = protocol.run(InProcessTransport(parties(clients, protocol.head)), CLASSES)
    grid = LocalGrid(client_app, node_configs, config.to_run_config())
    transport = FlowerTransport(grid, summary_dtype="float64", num_clients=4)
    flower = protocol.run(transport, CLASSES)
    assert flower.stages == in_process.stages == stages
    assert flower.tau == in_process.tau
    if config.auto:
        assert flower.report.selection["chosen"] == in_process.report.selection["chosen"]
        np.testing.assert_array_equal(
            flower.report.selection["scores"], in_process.report.selection["scores"]
        )
    if "screening" in stages:
        assert {c - 11: e for c, e in flower.report.screening["clients"].items()} == {
            c: {**e, **{k: None if e[k] is None else e[k] + 11 for k in ("accuser",)}}
            for c, e in in_process.report.screening["clients"].items()
        }
    np.testing.assert_array_equal(
        flower.head.linear_scores().coef, in_process.head.linear_scores().coef
    )
    assert [flower.report.accuracy[11 + k] for k in range(4)] == [
        in_process.report.accuracy[k] for k in range(4)
    ]
    if config.client_tau == "label-shift":  # each client's factor, from the counts it sent
        counts = {k: np.bincount(y, minlength=4) for k, (_, y, _, _) in clients.items()}
        distances = label_shift_distances(counts)
        assert in_process.tau_scales == pytest.approx(distances, rel=1e-12)
        assert flower.report.tau_scales == {11 + k: round(d, 6) for k, d in distances.items()}
        assert len(set(distances.values())) == 4 and 0 < min(distances.values())


@pytest.mark.parametrize(
    "name, label_mix", [("FedCGS", "federation"), ("O-FedAvg", "federation"), ("FedCGS", "client")]
)
def test_the_mean_fraction_reaches_the_clients_and_the_server_as_the_transformer_s(
    clients, name, label_mix
):
    """mean_tau and label_mix in the protocol: each client's map is the transformer's, on both
    sides (with each client's own mix, its domain offset from the class sums it uploads)."""
    head = make_head(name, seed=0).set_params(label_mix=label_mix)
    protocol = OneShotProtocol(head, tau=0.6, mean_tau=1.0, client_tau="label-shift")
    transport = parties(clients, protocol.head)
    result = protocol.run(InProcessTransport(transport), CLASSES)
    X = np.vstack([c[0] for c in clients.values()])
    y = np.concatenate([c[1] for c in clients.values()])
    client = np.repeat(list(clients), [c[0].shape[0] for c in clients.values()])
    slot = SLOTTransformer(tau=0.6, mean_tau=1.0, client_tau="label-shift", label_mix=label_mix)
    slot.fit(X, y, client=client)
    for k, party in transport.items():
        Xt = clients[k][2]
        own = party.full_map().geodesic(0.6 * result.tau_scales[k]).apply(Xt)
        np.testing.assert_allclose(own, slot.transform(Xt, client=k), rtol=1e-9, atol=1e-9)
    expected = clone(head).fit(slot.transform(X, client=client), y, client=client)
    np.testing.assert_allclose(
        result.head.linear_scores().coef, expected.linear_scores().coef, rtol=1e-6, atol=1e-8
    )
    with pytest.raises(ValueError, match="mean_tau must"):
        OneShotProtocol(head, mean_tau=-0.1)


def test_a_user_head_is_deployable_by_its_import_path(clients):
    """A fourth head touches nothing outside its own class: registry, driver, search."""
    pytest.importorskip("flwr", reason="Flower is not installed: pip install '.[flower]'")
    from skslot.flower import DeploymentConfig

    name = "tests.test_protocol:WithinClassFedCGS"
    config = DeploymentConfig(head=name, head_params='{"shrinkage": 0.1}', tau="auto")
    head = config.make_head()
    assert type(head) is WithinClassFedCGS and head.shrinkage == 0.1
    X = np.vstack([c[0] for c in clients.values()])
    y = np.concatenate([c[1] for c in clients.values()])
    client = np.repeat(list(clients), [c[0].shape[0] for c in clients.values()])
    search = FederatedTauSearch(head, random_state=0).fit(X, y, client=client)
    assert search.stages_ == ["upload", "validation"]
    assert search.best_estimator_.covariance == "within"


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("SVM", {}, r"unknown head 'SVM': choose from \['O-FedAvg', 'FedCGS', 'FedPFT'\]"),
        ("FedCGS", {"ridge": 1.0}, "has no parameter 'ridge'; its parameters are covariance"),
        ("FedCGS", {"covariance": "diag"}, "covariance must be one of"),
        ("FedPFT", {"covariance_type": "lowrank", "n_components": 2}, "fits one component"),
        ("O-FedAvg", {"C": 0.0}, "C must be"),
        ("numpy:ndarray", {}, "is not a skslot.heads.OneShotHead subclass"),
        ("no_such_module:Head", {}, "cannot be imported"),
    ],
)
def test_make_head_checks_names_and_parameters_before_any_work(name, params, message):
    with pytest.raises(ValueError, match=message):
        make_head(name, params)


def test_make_head_builds_every_registered_head_with_the_run_seed():
    assert make_head("FedPFT", {"rank": 8}, seed=3).get_params()["random_state"] == 3
    assert make_head("O-FedAvg", {"random_state": 1}, seed=3).random_state == 1
    assert isinstance(make_head("FedCGS", seed=3), FedCGSClassifier)
    assert {name: type(make_head(name)) for name in HEADS} == {
        "O-FedAvg": OneShotFedAvgClassifier,
        "FedCGS": FedCGSClassifier,
        "FedPFT": FedPFTClassifier,
    }


def test_server_side_head_parameters_are_checked_before_any_client_is_contacted():
    """FedCGS's covariance was once checked only in the server step, after every upload."""
    with pytest.raises(ValueError, match="covariance must be one of"):
        OneShotProtocol(FedCGSClassifier(covariance="diag"))
    with pytest.raises(ValueError, match="covariance must be one of"):
        FedCGSClassifier(covariance="diag").client_statistics(np.ones((3, 2)), [0, 1, 0], [0, 1])


def test_a_failing_client_is_rejected_or_raised_as_the_transport_says(clients):
    head = FedCGSClassifier()
    bad = parties(clients, head)
    bad[2].y = bad[2].y + 10  # labels outside the agreed class set
    protocol = OneShotProtocol(head, tau=0.4, min_clients=2)
    with pytest.raises(ValueError, match="not in the global class set"):
        protocol.run(InProcessTransport(bad), CLASSES)
    result = protocol.run(InProcessTransport(bad, errors="reject"), CLASSES)
    assert list(result.report.rejected["upload"]) == [2]
    assert "not in the global class set" in result.report.rejected["upload"][2]
    assert sorted(result.report.accuracy) == [0, 1, 3]
    with pytest.raises(ProtocolRunError, match="fewer than min_clients = 4"):
        OneShotProtocol(head, min_clients=4).run(InProcessTransport(bad, errors="reject"), CLASSES)


def test_no_module_outside_the_heads_branches_on_the_kind_of_head():
    """The driver asks the head's protocol; only skslot/heads knows the kinds (and the
    privacy package's mechanisms, one release per head: skslot/privacy/_statistics.py and
    _heads.py)."""
    root = Path(__file__).resolve().parents[1] / "skslot"
    releases = {root / "privacy" / "_statistics.py", root / "privacy" / "_heads.py"}
    offenders = []
    for path in root.rglob("*.py"):
        if path.parent.name == "heads" or path in releases:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "aligns_statistics":
                offenders.append(f"{path.relative_to(root)}:{node.lineno}")
            if isinstance(node, ast.Name) and node.id in ("ClassStatistics", "LinearHeadUpdate"):
                if isinstance(node.ctx, ast.Load) and path.name not in ("__init__.py",):
                    offenders.append(f"{path.relative_to(root)}:{node.lineno} {node.id}")
    assert not offenders, offenders


class ScaledSummaryParty(ClientParty):
    """A client whose summary's covariance is scaled (valid, but it breaks a float32 reference)."""

    def summarise(self):
        own = super().summarise()
        return GaussianSummary(own.n, own.mean, own.covariance * 1e60, client=own.client)


def with_a_broken_summary(data, head, classes, *, broken):
    """One party per client of ``data``; client ``broken``'s summary breaks a float32 reference."""
    return {
        k: (ScaledSummaryParty if k == broken else ClientParty)(
            data.X[data.client == k], data.y[data.client == k], head=head, classes=classes, label=k
        )
        for k in np.unique(data.client).tolist()
    }


def test_the_culprit_search_costs_a_few_barycenter_iterations_per_client(monkeypatch):
    """K = 12, one summary breaking the float32 reference: about K iterations, not K barycenters."""
    import skslot.barycenter as barycenter_module

    data = make_federated_classification(
        n_clients=12, n_samples_per_client=80, n_features=6, random_state=0
    )
    iterations = []
    kernel = barycenter_module.bures_wasserstein_barycenter

    def counting(*args, **kwargs):
        result = kernel(*args, **kwargs)
        iterations.append(result.n_iter)
        return result

    monkeypatch.setattr(barycenter_module, "bures_wasserstein_barycenter", counting)
    head = FedPFTClassifier(random_state=0)  # a head whose clients send their summaries
    classes = np.unique(data.y)
    parties = with_a_broken_summary(data, head, classes, broken=7)
    protocol = OneShotProtocol(head, reference=ReferenceStep(wire_dtype="float32"))
    result = protocol.run(InProcessTransport(parties), classes)
    assert list(result.report.rejected["upload"]) == [7]
    assert "its summary breaks the reference" in result.report.rejected["upload"][7]
    full = iterations[-1]  # the final reference, without client 7
    # the failed build, one iteration per client alone, the final build
    assert len(iterations) == 1 + 12 + 1
    assert iterations[1:-1] == [1] * 12
    assert sum(iterations) <= 12 + 3 * full


def test_label_shift_factors_count_only_the_clients_the_reference_kept():
    data = make_federated_classification(
        n_clients=5, n_samples_per_client=80, n_features=6, alpha=0.3, random_state=0
    )
    head = FedPFTClassifier(random_state=0)
    classes = np.unique(data.y)
    parties = with_a_broken_summary(data, head, classes, broken=2)
    protocol = OneShotProtocol(
        head, client_tau="label-shift", reference=ReferenceStep(wire_dtype="float32")
    )
    result = protocol.run(InProcessTransport(parties), classes)
    assert list(result.report.rejected["upload"]) == [2]
    kept = {
        k: np.bincount(data.y[data.client == k], minlength=classes.shape[0]) for k in (0, 1, 3, 4)
    }
    assert result.tau_scales == pytest.approx(label_shift_distances(kept), rel=1e-12)


class FailsWith(ReferenceStep):
    """A reference step that breaks whenever ``client`` is among two or more clients."""

    def __init__(self, client, together=None):
        super().__init__()
        self.client, self.together = client, together
        self.probes = []

    def build(self, clients, summaries, weights, *, max_iter=None):
        self.probes.append((tuple(clients), max_iter))
        others = [c for c in clients if c != self.client]
        if self.client in clients and others and (self.together is None or self.together in others):
            raise np.linalg.LinAlgError("the barycenter broke")
        return super().build(clients, summaries, weights, max_iter=max_iter)


@pytest.mark.parametrize("together", [None, 1])
def test_the_culprit_search_probes_leave_one_out_sets_when_no_summary_breaks_alone(
    clients, together
):
    head = FedCGSClassifier()
    step = FailsWith(3, together)
    protocol = OneShotProtocol(head, reference=step, evaluate=False)
    if together is None:  # only leaving out client 3 lets the step through
        result = protocol.run(InProcessTransport(parties(clients, head)), CLASSES)
        assert list(result.report.rejected["upload"]) == [3]
    else:  # clients 1 and 3 break it only together: no single culprit, the run fails
        with pytest.raises(ProtocolRunError, match="could not be built"):
            protocol.run(InProcessTransport(parties(clients, head)), CLASSES)
    alone = [p for p in step.probes if len(p[0]) == 1]
    leave_one_out = [p[0] for p in step.probes if p[1] == PROBE_ITERATIONS]
    assert [p[1] for p in alone] == [1] * 4
    assert sorted(leave_one_out) == [(0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)]


class SummarySendingParty(ClientParty):
    """A FedCGS client that sends a summary of its own beside its statistics."""

    def answer(self, stage, request):
        if stage != "upload":
            return super().answer(stage, request)
        upload = super().answer(stage, request)
        own = GaussianSummaryEstimator().fit(self.X).summaries_[None]
        return dataclasses.replace(upload, summary=own, shrinkage=None)


class ShrinkageParty(ClientParty):
    """A FedCGS client announcing the shrinkage ``value`` (its statistics honest)."""

    value = 2.0

    def answer(self, stage, request):
        if stage != "upload":
            return super().answer(stage, request)
        return dataclasses.replace(super().answer(stage, request), shrinkage=self.value)


@pytest.mark.parametrize(
    ("party", "reason"),
    [
        (SummarySendingParty, "must carry the shrinkage, not a summary of its own"),
        (ShrinkageParty, "its statistics make no summary: the shrinkage must be in [0, 1]"),
    ],
)
def test_a_fedcgs_upload_carries_its_shrinkage_and_no_summary(party, reason):
    """FedCGS's statistics determine the summary: the server derives it, never receives it."""
    data = make_federated_classification(n_clients=4, n_features=6, random_state=0)
    head, classes = FedCGSClassifier(), np.unique(data.y)
    parties = {
        k: (party if k == 2 else ClientParty)(
            data.X[data.client == k], data.y[data.client == k], head=head, classes=classes, label=k
        )
        for k in range(4)
    }
    result = OneShotProtocol(head).run(InProcessTransport(parties), classes)
    assert list(result.report.rejected["upload"]) == [2]
    assert reason in result.report.rejected["upload"][2]
    assert set(result.report.summary_values.values()) == {1}


def test_a_fedcgs_client_refuses_summary_settings_other_than_the_runs():
    """The server derives a FedCGS client's summary with the run's settings: a client
    summarising otherwise would map its rows with another summary, so it refuses."""
    data = make_federated_classification(n_clients=3, n_features=5, random_state=0)
    head, classes = FedCGSClassifier(), np.unique(data.y)
    parties = {
        k: ClientParty(
            data.X[data.client == k],
            data.y[data.client == k],
            head=head,
            classes=classes,
            label=k,
            summary_estimator=GaussianSummaryEstimator(covariance="within" if k == 1 else "total"),
        )
        for k in range(3)
    }
    with pytest.raises(ValueError, match=r"covariance='within'.*but the run derives summaries"):
        OneShotProtocol(head).run(InProcessTransport(parties), classes)
    # the same clients in a run of their kind: each keeps exactly the summary the server
    # derived (with a validation split: from its fitting part alone)
    parties[1].summary_estimator = None
    result = OneShotProtocol(head, tau="auto", random_state=0).run(
        InProcessTransport(parties), classes
    )
    assert result.clients == [0, 1, 2]
    for k, derived in zip(result.clients, result.summaries, strict=True):
        own = parties[k].state.summary
        assert own.n == derived.n == parties[k].split[0].shape[0] < parties[k].y.shape[0]
        np.testing.assert_array_equal(own.covariance, derived.covariance)
        np.testing.assert_array_equal(own.mean, derived.mean)


@pytest.mark.parametrize("name", sorted(HEADS))
@pytest.mark.parametrize("scale", [1e60, 1e-60])
def test_every_heads_upload_refuses_features_out_of_float64s_range(name, scale):
    """Whether a client sends its summary or the statistics it is derived from (FedCGS), rows
    whose second moments leave float64 get the summary estimator's error, not a NaN (FedPFT's
    float16 mixtures overflow first, and say so)."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(120, 4)) * scale, np.arange(120) % 2
    expected = "in magnitude, outside .*rescale the features"
    if name == "FedPFT" and scale > 1:
        expected = "mixture parameters overflow float16"
    with pytest.raises(ValueError, match=expected):
        FederatedTauSearch(make_head(name, seed=0), random_state=0).fit(
            X, y, client=np.repeat([0, 1, 2], 40)
        )


@pytest.mark.parametrize("name", ["FedCGS", "FedPFT"])
def test_a_screened_run_asks_for_no_validation_statistics(clients, name):
    """Its final head is fitted on the fitting parts alone: the validation part's statistics
    are not sent, and one sent anyway is refused."""
    head = make_head(name, seed=0)
    protocol = OneShotProtocol(head, tau=0.4, defence=DefenceBounds(), random_state=0)
    result = protocol.run(InProcessTransport(parties(clients, head)), CLASSES)
    assert "screening" in result.stages and result.clients == [0, 1, 2, 3]
    transport = parties(clients, head)
    X, y, Xt, yt = clients[0]
    transport[0] = PoisonedValidation(
        X, y, head=head, classes=CLASSES, label=0, X_test=Xt, y_test=yt
    )
    result = protocol.run(InProcessTransport(transport), CLASSES)
    assert result.report.rejected["upload"][0] == "the run asked for no validation statistics"


def test_a_head_without_class_sums_in_its_statistics_sends_its_own(clients):
    """O-FedAvg's statistics are local heads: with each client's own mix it sends the class
    sums of its fitting rows, and each client's mean moves by its domain offset measured
    within classes, as SLOTTransformer measures it."""
    head = make_head("O-FedAvg", seed=0)
    protocol = OneShotProtocol(head, tau=0.6, client_tau="uniform")
    transport = parties(clients, protocol.head)
    result = protocol.run(InProcessTransport(transport), CLASSES)
    assert result.clients == [0, 1, 2, 3]
    X = np.vstack([c[0] for c in clients.values()])
    y = np.concatenate([c[1] for c in clients.values()])
    who = np.concatenate([np.full(c[1].shape[0], k) for k, c in clients.items()])
    offsets = SLOTTransformer().fit(X, y, client=who).domain_offsets_
    for k, party in transport.items():
        mean = party.state.summary.mean
        moved = party.full_map().apply(mean[None])[0]
        np.testing.assert_allclose(moved, mean - offsets[k], atol=1e-8)
        assert np.linalg.norm(offsets[k]) > 0.1


def _moved_sums(upload):
    counts, sums = upload.class_sums
    return dataclasses.replace(upload, class_sums=(counts, sums + 100.0 * counts[:, None]))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda u: dataclasses.replace(u, class_sums=(u.class_sums[0] + 1, u.class_sums[1])),
         "its class sums count"),
        (_moved_sums, "its class sums' mean lies"),
        (lambda u: dataclasses.replace(u, class_sums=(u.class_sums[0], u.class_sums[1][:, :2])),
         "array 'sums'"),
    ],
)  # fmt: skip
def test_class_sums_that_do_not_describe_the_fitting_rows_are_refused(clients, change, reason):
    class Hostile(ClientParty):
        def answer(self, stage, request):
            reply = super().answer(stage, request)
            return change(reply) if stage == "upload" else reply

    head = make_head("O-FedAvg", seed=0)
    transport = parties(clients, head)
    X, y, Xt, yt = clients[0]
    transport[0] = Hostile(X, y, head=head, classes=CLASSES, label=0, X_test=Xt, y_test=yt)
    result = OneShotProtocol(head, tau=0.6).run(InProcessTransport(transport), CLASSES)
    assert reason in result.report.rejected["upload"][0]
    assert result.clients == [1, 2, 3]


def _scores_an_unheld_class(update):
    intercept = update.intercept.copy()
    intercept[update.class_rows == 0] = 9.5
    return type(update)(
        update.classes, update.coef, intercept, update.n, update.n_iter, update.class_rows
    )


def _other_class_rows(update):
    rows = update.class_rows.copy()
    held = np.flatnonzero(rows)
    rows[held[0]] -= 1
    rows[held[1]] += 1
    return type(update)(update.classes, update.coef, update.intercept, update.n, 0, rows)


def _negated(update):
    return type(update)(
        update.classes, -3.0 * update.coef, -3.0 * update.intercept, update.n, update.n_iter,
        update.class_rows,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (_scores_an_unheld_class, "scores a class it holds no rows of"),
        (_other_class_rows, "class counts are not those of its fitting rows"),
        (_negated, "places the means of 0 % of its own rows in their class"),
    ],
)
def test_a_local_head_is_tied_to_the_classes_its_client_declared(clients, change, reason):
    """A head spanning its held classes scores no other class, holds the rows of each class
    its upload declared, and places the means of those classes, as its upload's class sums
    give them, in their classes."""

    class Hostile(ClientParty):
        def answer(self, stage, request):
            reply = super().answer(stage, request)
            if stage != "updates":
                return reply
            return type(reply)(change(u) for u in reply)

    head = make_head("O-FedAvg", seed=0)
    transport = parties(clients, head)
    X, y, Xt, yt = clients[0]
    assert np.count_nonzero(np.bincount(y, minlength=4)) < 4  # a class it does not hold
    transport[0] = Hostile(X, y, head=head, classes=CLASSES, label=0, X_test=Xt, y_test=yt)
    protocol = OneShotProtocol(
        head, tau="auto", taus=(0.0, 0.5), random_state=0, defence=DefenceBounds()
    )
    result = protocol.run(InProcessTransport(transport), CLASSES)
    assert reason in result.report.rejected["updates"][0]
    assert 0 not in result.clients


def test_every_honest_local_head_places_its_own_class_means(clients):
    """A defended O-FedAvg run asks for class sums whatever its label mix, and each honest
    head places its client's class means, aligned by its map, in their classes: no client is
    refused.  Without the defence a negated head is not checked against them."""

    class Negating(ClientParty):
        def answer(self, stage, request):
            reply = super().answer(stage, request)
            return type(reply)(_negated(u) for u in reply) if stage == "updates" else reply

    head = make_head("O-FedAvg", seed=0).set_params(label_mix="federation")
    for label_mix in ("federation", "client"):
        head.set_params(label_mix=label_mix)
        protocol = OneShotProtocol(head, tau=0.5, defence=DefenceBounds(), screen="off")
        result = protocol.run(InProcessTransport(parties(clients, head)), CLASSES)
        assert result.report.rejected == {}
        assert result.clients == [0, 1, 2, 3]
    head.set_params(label_mix="federation")
    transport = parties(clients, head)
    X, y, Xt, yt = clients[0]
    transport[0] = Negating(X, y, head=head, classes=CLASSES, label=0, X_test=Xt, y_test=yt)
    result = OneShotProtocol(head, tau=0.5).run(InProcessTransport(transport), CLASSES)
    assert result.report.rejected == {}


def test_a_local_head_scaled_up_is_clipped_to_the_median_norm(clients):
    """Scaling its heads by 3 or by 7 changes nothing: the defence clips them back to the
    median client's norm (their direction kept), reports the factor, and the final head is
    that of the run whose hostile heads were clipped by hand; without the defence the
    scale passes."""

    def scaled(factor):
        class Scaling(ClientParty):
            def answer(self, stage, request):
                reply = super().answer(stage, request)
                if stage not in ("updates", "refit"):
                    return reply
                return type(reply)(u.clipped(factor) for u in reply)

        return Scaling

    head = make_head("O-FedAvg", seed=0).set_params(label_mix="federation")
    X, y, Xt, yt = clients[1]
    finals = []
    for factor in (3.0, 7.0):
        transport = parties(clients, head)
        transport[1] = scaled(factor)(
            X, y, head=head, classes=CLASSES, label=1, X_test=Xt, y_test=yt
        )
        protocol = OneShotProtocol(head, tau=0.5, defence=DefenceBounds(), screen="off")
        result = protocol.run(InProcessTransport(transport), CLASSES)
        assert result.clients == [0, 1, 2, 3]
        assert 0.0 < result.report.clipped[1] < 1.0
        finals.append(result.head.linear_scores())
    np.testing.assert_allclose(finals[0].coef, finals[1].coef, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(finals[0].intercept, finals[1].intercept, rtol=1e-10, atol=1e-12)
    protocol = OneShotProtocol(
        head, tau=0.5, defence=DefenceBounds(clip_norm_ratio=np.inf), screen="off"
    )
    unclipped = protocol.run(InProcessTransport(transport), CLASSES)
    assert unclipped.report.clipped == {}
    assert not np.allclose(unclipped.head.linear_scores().coef, finals[1].coef)


def test_a_client_keeping_back_the_class_sums_the_others_send_is_refused(clients):
    """Its local heads could not be tied to its rows: refused at the updates stage (where no
    client sends them, each summary private, nothing is checked: tests/test_flower.py)."""

    class Silent(ClientParty):
        def answer(self, stage, request):
            reply = super().answer(stage, request)
            return dataclasses.replace(reply, class_sums=None) if stage == "upload" else reply

    head = make_head("O-FedAvg", seed=0).set_params(label_mix="federation")
    transport = parties(clients, head)
    X, y, Xt, yt = clients[2]
    transport[2] = Silent(X, y, head=head, classes=CLASSES, label=2, X_test=Xt, y_test=yt)
    protocol = OneShotProtocol(head, tau=0.5, defence=DefenceBounds(), screen="off")
    result = protocol.run(InProcessTransport(transport), CLASSES)
    assert "it sent no class sums of its fitting rows" in result.report.rejected["updates"][2]
    assert result.clients == [0, 1, 3]


def test_each_client_predicts_with_its_own_label_mix_at_the_evaluation(clients):
    """The evaluation's counts are the client's own-mix predictions: equal to the final head
    predicting the client's rows with its counts, and to no prior for the federation's mix."""
    for label_mix in ("client", "federation"):
        head = make_head("FedCGS").set_params(label_mix=label_mix)
        protocol = OneShotProtocol(head, tau=0.0, mean_tau=0.0)
        transport = parties(clients, protocol.head)
        result = protocol.run(InProcessTransport(transport), CLASSES)
        for k, (_, y, X_test, y_test) in clients.items():
            counts = np.bincount(y, minlength=len(CLASSES))
            scores = result.head.linear_scores()
            mix = counts if label_mix == "client" else None
            right = scores.predict(X_test, class_counts=mix) == y_test
            assert result.report.test_accuracy[k] == pytest.approx(np.mean(right))
            if label_mix == "client":  # the figure in the run's case: weighted to its mix
                expected = own_mix_accuracy(right, y_test, np.zeros(len(y_test)), {0: counts},
                                            np.arange(len(CLASSES)))[0]  # fmt: skip
            else:
                expected = np.mean(right)
            assert result.report.accuracy[k] == pytest.approx(expected)
        assert (scores.federation is not None) == (label_mix == "client")
        case = "own label mix" if label_mix == "client" else "whole test split"
        assert result.report.accuracy_case == case


@pytest.mark.parametrize("label_mix", ["federation", "client"])
def test_at_tau_zero_the_server_still_moves_each_mean(clients, label_mix):
    """tau = 0 with mean_tau = 1 is a translation, not the identity: the server pushes the
    statistics through it as each client moves its rows (its final head is the pipeline's)."""
    head = make_head("FedCGS").set_params(label_mix=label_mix)
    result = OneShotProtocol(head, tau=0.0).run(InProcessTransport(parties(clients, head)), CLASSES)
    X = np.vstack([c[0] for c in clients.values()])
    y = np.concatenate([c[1] for c in clients.values()])
    client = np.repeat(list(clients), [c[0].shape[0] for c in clients.values()])
    slot = SLOTTransformer(tau=0.0, label_mix=label_mix).fit(X, y, client=client)
    expected = clone(head).fit(slot.transform(X, client=client), y, client=client)
    np.testing.assert_allclose(result.head.coef_, expected.coef_, rtol=1e-6, atol=1e-8)
