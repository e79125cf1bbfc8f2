"""The Flower apps' message handlers: equality with the in-process pipeline, faults, hostile input.

Messages go through :class:`tests.flower_harness.LocalGrid`, which calls the
real ``ClientApp`` handlers with per-node contexts and lets a test drop or
tamper with a node's replies.  Real processes are in test_flower_deployment.py.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import re
import struct
import time

import numpy as np
import pytest

flwr = pytest.importorskip("flwr", reason="Flower is not installed: pip install '.[flower]'")

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict  # noqa: E402

from skslot import (  # noqa: E402
    FederatedTauSearch,
    GaussianSummary,
    GaussianSummaryEstimator,
    SLOTTransformer,
)
from skslot.datasets import make_federated_classification  # noqa: E402
from skslot.flower import (  # noqa: E402
    DeploymentConfig,
    load_client_data,
    messages,
    run_one_shot,
    write_flower_app,
)
from skslot.flower.client_app import app as client_app  # noqa: E402
from skslot.flower.client_app import (  # noqa: E402
    node_lifetime,
    reply_seconds,
)
from skslot.heads import HEADS, OneShotFedAvgClassifier, make_head, message_bytes  # noqa: E402
from skslot.label_mix import own_mix_accuracy  # noqa: E402
from skslot.privacy import LifetimeBudget, refusal  # noqa: E402
from skslot.protocol import ClientParty, ProtocolRunError, UploadRequest  # noqa: E402
from skslot.protocol.stages import upload as upload_stage  # noqa: E402
from skslot.wire import MessageFormatError  # noqa: E402

from .conftest import PAPER, assert_close_in_norm, short_local_training  # noqa: E402
from .flower_harness import (  # noqa: E402
    LocalGrid,
    as_server_app,
    evaluated_rows,
    evaluation_reply,
    inflated_count,
    lost_reply,
    own_summary,
    record_arrays,
    rewrite_upload,
    scaled_heads,
    scaled_summary,
    tamper_statistics,
    upload_request,
    write_node_files,
)

# O-FedAvg runs through most of these tests at its default local budget (conftest)
pytestmark = short_local_training

N_CLIENTS = 4
M = 6
CLASSES = "0,1,2,3"


@pytest.fixture(scope="module")
def node_configs(tmp_path_factory):
    """Four clients' own .npz files (the user's-own-data mode), node ids 11..14."""
    data = make_federated_classification(
        n_clients=N_CLIENTS,
        n_samples_per_client=240,
        n_features=M,
        alpha=0.5,
        domain_shift=2.0,
        random_state=3,
    )
    return write_node_files(
        tmp_path_factory.mktemp("clients"),
        data.X,
        data.y,
        data.client,
        first_node=11,
        train_fraction=2 / 3,
    )


def deploy(node_configs, faults=None, latency=None, **settings):
    settings = {
        "num_clients": N_CLIENTS,
        "connect_timeout": 0.0,
        "reply_timeout": 0.5,  # LocalGrid answers at once: a dropped reply never comes
        "classes": CLASSES,
        **settings,
    }
    config = DeploymentConfig(**settings)
    grid = LocalGrid(client_app, node_configs, config.to_run_config(), faults, latency)
    return (*run_one_shot(grid, config), grid)


def client_rows(node_configs, config: DeploymentConfig):
    """The clients' training rows stacked in node order, as one in-process data set."""
    parts = [load_client_data(nc, config) for nc in node_configs.values()]
    X = np.vstack([p.X_train for p in parts])
    y = np.concatenate([p.y_train for p in parts])
    client = np.concatenate([np.full(p.y_train.shape, p.client) for p in parts])
    return parts, X, y, client


def in_process(node_configs, config: DeploymentConfig):
    """The same clients in process: SLOT, then the head.

    FedCGS and O-FedAvg: the scikit-learn pipeline (the server-aligned FedCGS
    statistics equal the aligned rows' ones to rounding).  FedPFT: the same
    library calls as the deployment, mixtures of unaligned rows cast to
    float16 by each client and pushed through the maps by the server (a
    Pipeline casts the mixtures of aligned rows instead).
    """
    parts, X, y, client = client_rows(node_configs, config)
    protocol = config.protocol()
    slot = SLOTTransformer(
        tau=protocol.tau,
        mean_tau=config.mean_tau,
        client_tau=config.client_tau,
        label_mix=config.label_mix,
    )
    slot.fit(X, y, client=client)
    head = config.make_head()
    if config.head == "FedPFT":
        classes = config.class_set
        stats = [
            head.client_statistics(X[client == k], y[client == k], classes, client_index=i)
            for i, k in enumerate(np.unique(client))
        ]
        maps = [slot.client_map(k) for k in np.unique(client)]
        head.fit_from_statistics(stats, classes, maps=maps)
    else:
        head.fit(slot.transform(X, client=client), y, client=client)
    tests = {
        p.client: (slot.transform(p.X_test, client=np.full(p.y_test.shape, p.client)), p.y_test)
        for p in parts
    }
    return slot, head, tests


def node_of(client: int) -> int:
    return 11 + client


@pytest.mark.parametrize("head", list(HEADS))
def test_deployment_equals_in_process_pipeline(node_configs, head):
    # the in-process pipeline has no screening and clips no local head: the deployment
    # without them
    report, scores, reference, _ = deploy(
        node_configs,
        head=head,
        summary_dtype="float64",
        screen="off",
        clip_norm_ratio=None,
        label_mix="federation",
    )
    config = DeploymentConfig(head=head, classes=CLASSES, label_mix="federation")
    slot, expected, tests = in_process(node_configs, config)
    received = GaussianSummary.from_bytes(reference)
    np.testing.assert_allclose(received.covariance, slot.reference_.covariance, rtol=1e-12)
    np.testing.assert_allclose(received.mean, slot.reference_.mean, rtol=1e-12)
    expected_scores = expected.linear_scores()
    scale = np.abs(expected_scores.coef).max()
    np.testing.assert_allclose(scores.coef, expected_scores.coef, rtol=1e-7, atol=1e-9 * scale)
    for client, (Z_test, y_test) in tests.items():
        np.testing.assert_array_equal(scores.predict(Z_test), expected.predict(Z_test))
        assert report.accuracy[node_of(client)] == np.mean(expected.predict(Z_test) == y_test)
    assert report.macro_accuracy == pytest.approx(np.mean(list(report.accuracy.values())))
    assert all(not missing for missing in report.missing.values())
    assert all(not r for r in report.rejected.values())
    assert report.status == "completed" and report.tau == config.protocol().tau


@pytest.mark.parametrize("head", ["FedCGS", "O-FedAvg"])
def test_each_nodes_own_label_mix_on_flower_equals_in_process(node_configs, head):
    """label-mix = "client" (the default): each node's mean moves by its domain offset from
    the class sums it uploads (with its statistics, or alone for O-FedAvg), and it predicts
    with its own counts."""
    report, scores, _, _ = deploy(node_configs, head=head, summary_dtype="float64", screen="off")
    config = DeploymentConfig(head=head, classes=CLASSES)
    _, expected, tests = in_process(node_configs, config)
    assert scores.federation is not None  # the head tells each node to use its own mix
    parts = {p.client: p for p in client_rows(node_configs, config)[0]}
    assert report.accuracy_case == "own label mix"
    for client, (Z_test, y_test) in tests.items():
        own = np.bincount(parts[client].y_train, minlength=4)
        predicted = scores.predict(Z_test, class_counts=own)
        node = node_of(client)
        assert report.test_accuracy[node] == pytest.approx(np.mean(predicted == y_test))
        # the figure reported is the in-process own-mix figure: test rows weighted to its mix
        (in_process_own,) = own_mix_accuracy(
            predicted == y_test, y_test, np.zeros(len(y_test)), {0: own}, np.arange(4)
        ).values()
        assert report.accuracy[node] == report.own_mix_accuracy[node] == in_process_own
        if head == "FedCGS":  # the same maps, hence the same head
            np.testing.assert_array_equal(predicted, expected.predict(Z_test, client=client))
    assert report.macro_accuracy == pytest.approx(np.mean(list(report.own_mix_accuracy.values())))
    assert report.accuracy != report.test_accuracy  # label-skewed nodes: another figure


def test_degenerate_nodes_each_get_one_clear_message(node_configs, tmp_path, caplog):
    """A node with one training row is rejected with the estimators' reason; a class one
    node alone trained is reported and logged once, by node."""
    configs = {node: dict(config) for node, config in node_configs.items()}
    with np.load(configs[14]["data"]) as arrays:
        parts = {key: arrays[key] for key in arrays.files}
    parts["X_train"], parts["y_train"] = parts["X_train"][:1], parts["y_train"][:1]
    np.savez(tmp_path / "one_row.npz", **parts)
    configs[14]["data"] = str(tmp_path / "one_row.npz")
    for node in (11, 12):  # class 3: node 13's training rows alone (node 14 is rejected)
        with np.load(configs[node]["data"]) as arrays:
            kept = {key: arrays[key] for key in arrays.files}
        train = kept["y_train"] != 3
        kept["X_train"], kept["y_train"] = kept["X_train"][train], kept["y_train"][train]
        np.savez(tmp_path / f"no_three_{node}.npz", **kept)
        configs[node]["data"] = str(tmp_path / f"no_three_{node}.npz")
    with caplog.at_level(logging.WARNING, logger="skslot.protocol"):
        report, _, _, _ = deploy(configs, screen="off", min_clients=2)
    assert (
        "client 3 has 1 sample; at least 2 are needed to estimate a covariance"
        in (report.rejected["upload"][14])
    )
    held = {}  # the accepted nodes' training classes
    for node in (11, 12, 13):
        with np.load(configs[node]["data"]) as arrays:
            held[node] = set(arrays["y_train"].tolist())
    expected = {
        c: node
        for c in range(4)
        for node in (11, 12, 13)
        if [c in classes for classes in held.values()].count(True) == 1 and c in held[node]
    }
    assert report.lone_classes == expected and expected[3] == 13
    lone = [r.getMessage() for r in caplog.records if "one node only" in r.getMessage()]
    assert len(lone) == 1 and "class 3 by node 13 (client 2)" in lone[0]


def test_a_streamed_parallel_server_step_gives_the_same_run(node_configs):
    """client-batch and server-jobs change the server's memory and time, not the run."""
    report, scores, reference, _ = deploy(node_configs, summary_dtype="float64")
    streamed = deploy(node_configs, summary_dtype="float64", server_jobs=2, client_batch=1)
    expected, received = (
        GaussianSummary.from_bytes(r).covariance for r in (reference, streamed[2])
    )
    assert_close_in_norm(received, expected, rtol=1e-12)
    scale = np.abs(scores.coef).max()
    np.testing.assert_allclose(streamed[1].coef, scores.coef, rtol=1e-9, atol=1e-12 * scale)
    assert streamed[0].accuracy == report.accuracy
    assert streamed[0].barycenter_iterations == report.barycenter_iterations


@pytest.mark.parametrize("head", list(HEADS))
def test_auto_tau_equals_the_in_process_search(node_configs, head):
    """tau = "auto" on Flower and FederatedTauSearch: the same choice, head and predictions."""
    report, scores, _, _ = deploy(  # the search has no screening and no clip: without them
        node_configs,
        head=head,
        tau="auto",
        summary_dtype="float64",
        seed=5,
        screen="off",
        clip_norm_ratio=None,
        label_mix="federation",
    )
    config = DeploymentConfig(head=head, seed=5, classes=CLASSES, label_mix="federation")
    parts, X, y, client = client_rows(node_configs, config)
    search = FederatedTauSearch(
        config.make_head(),
        slot=SLOTTransformer(label_mix="federation"),
        random_state=config.seed,
    )
    search.fit(X, y, client=client)
    assert report.tau == search.best_tau_
    assert report.selection["chosen"] == search.best_params_
    np.testing.assert_array_equal(
        report.selection["mean_validation_score"], search.cv_results_["mean_validation_score"]
    )
    np.testing.assert_array_equal(scores.coef, search.best_estimator_.linear_scores().coef)
    for p in parts:
        labels = np.full(p.y_test.shape, p.client)
        predicted = search.predict(p.X_test, client=labels)
        assert report.accuracy[node_of(p.client)] == np.mean(predicted == p.y_test)


@pytest.mark.parametrize(
    ("head", "tau", "screen", "stages"),
    [
        ("FedCGS", 0.4, "auto", ["upload", "screening", "evaluation"]),
        ("FedPFT", 0.4, "auto", ["upload", "screening", "evaluation"]),
        ("O-FedAvg", 0.4, "auto", ["upload", "updates", "screening", "evaluation"]),
        ("FedCGS", "auto", "auto", ["upload", "validation", "screening", "evaluation"]),
        (
            "O-FedAvg",
            "auto",
            "auto",
            ["upload", "updates", "validation", "screening", "evaluation"],
        ),
        ("FedCGS", 0.4, "off", ["upload", "evaluation"]),
        ("O-FedAvg", 0.4, "off", ["upload", "updates", "evaluation"]),
        ("O-FedAvg", "auto", "off", ["upload", "updates", "validation", "refit", "evaluation"]),
    ],
)
def test_stages_and_bytes_per_client(node_configs, head, tau, screen, stages):
    """Statistics heads: one upload, one download (head and reference) at a fixed tau without
    the screening; the screening (the default, with a defence) is one more exchange, and the
    final head is the screened one (no refit)."""
    report, _, reference, grid = deploy(node_configs, head=head, tau=tau, screen=screen)
    assert report.stages == stages
    for node in node_configs:
        sent = [m for m in grid.messages if m.metadata.dst_node_id == node]
        assert [m.metadata.message_type.split(".")[0] for m in sent] == [
            {"upload": "query", "updates": "train", "refit": "train"}.get(s, "query")
            if s != "evaluation"
            else "evaluate"
            for s in stages
        ]
        # the reference travels once per client, in the first message after it is built
        carries = ["reference" in m.content.config_records["skslot"] for m in sent]
        assert carries == [False, True] + [False] * (len(stages) - 2)
        assert report.bytes_sent[node][stages[1]] >= len(reference)
        assert set(report.bytes_sent[node]) == set(report.bytes_received[node]) == set(stages)


def test_a_fedcgs_client_sends_its_shrinkage_and_the_server_derives_its_summary(node_configs):
    """FedCGS's statistics determine the summary: 8 bytes (the shrinkage) instead of 28 + 8 +
    27 values; the server's summary is the client's Ledoit-Wolf one (up to rounding), and the
    run equals the one where every client sends the summary it derives itself."""
    report, _, reference, _ = deploy(node_configs, summary_dtype="float64", screen="off")
    assert report.summary_values == {node: 1 for node in node_configs}
    assert report.summary_payload_bytes == {node: 8 for node in node_configs}
    config = DeploymentConfig(classes=CLASSES)
    grid = LocalGrid(client_app, node_configs, config.to_run_config())
    total = 0
    for node in node_configs:
        upload = grid._deliver(upload_request(node))
        values = upload.content.config_records[messages.CONFIG]
        assert "summary" not in values and 0.0 <= values["shrinkage"] <= 1.0
        own = load_client_data(node_configs[node], config)
        lw = GaussianSummaryEstimator().fit(own.X_train).summaries_[None]
        derived = own_summary(upload)
        # computed from the statistics and one pass over the rows: Ledoit-Wolf's, to rounding
        np.testing.assert_allclose(values["shrinkage"], lw.shrinkage, rtol=1e-10)
        np.testing.assert_allclose(derived.mean, lw.mean, rtol=1e-12)
        np.testing.assert_allclose(derived.covariance, lw.covariance, rtol=1e-10, atol=1e-12)
        total += own.X_train.shape[0]
    assert GaussianSummary.from_bytes(reference).n == total


@pytest.mark.parametrize(("dtype", "itemsize"), [("float16", 2), ("float32", 4), ("float64", 8)])
def test_summary_bytes_are_accounted(node_configs, dtype, itemsize):
    report, _, _, _ = deploy(node_configs, summary_dtype=dtype, head="FedPFT")
    values = M * (M + 1) // 2 + M + 1
    assert report.summary_values == {node: values for node in node_configs}
    # the header holds n (the "+1") with magic, version, dtype, m and shrinkage
    # in 28 bytes; an int client label takes 8 more; the rest is values at dtype
    for node, size in report.summary_payload_bytes.items():
        assert size == 28 + 8 + (values - 1) * itemsize
        assert report.bytes_received[node]["upload"] > size  # with the head's statistics
        assert report.bytes_sent[node]["evaluation"] >= 28 + (values - 1) * itemsize


@pytest.fixture(scope="module")
def wide_node_configs(tmp_path_factory):
    """Four nodes of 20 training rows in 100 dimensions: each sends its factor form."""
    data = make_federated_classification(
        n_clients=N_CLIENTS, n_samples_per_client=30, n_features=100, alpha=None,
        domain_shift=2.0, random_state=3,
    )  # fmt: skip
    return write_node_files(
        tmp_path_factory.mktemp("wide"), data.X, data.y, data.client, first_node=11,
        train_fraction=2 / 3,
    )  # fmt: skip


@pytest.mark.filterwarnings("ignore::skslot.SmallClientWarning")
@pytest.mark.parametrize("head", ["FedPFT", "O-FedAvg"])
def test_nodes_of_few_rows_send_their_factor_form_and_the_run_is_the_dense_one(
    wide_node_configs, head
):
    """``summary-form = "auto"``: each node's exact factor form (a 40-byte header, the label,
    m (r + 1) + r values), the reference built on the span of the factors (rank 76 of 100)
    and sent in the smaller form, dense here (5,150 values against 7,776), the same
    accuracies as with dense summaries."""
    settings = {"head": head, "summary_dtype": "float64", "screen": "off", "tau": 0.6}
    low, _, reference, _ = deploy(wide_node_configs, **settings)
    dense, _, dense_reference, _ = deploy(wide_node_configs, summary_form="dense", **settings)
    m, r = 100, 19  # 20 fitting rows each
    assert low.summary_values == {node: m * (r + 1) + r + 2 for node in wide_node_configs}
    assert dense.summary_values == {node: m * (m + 1) // 2 + m + 1 for node in wide_node_configs}
    assert set(low.summary_payload_bytes.values()) == {40 + 8 + (m * (r + 1) + r) * 8}
    received = GaussianSummary.from_bytes(reference)
    assert isinstance(received, GaussianSummary)
    assert len(reference) == received.payload_size("float64")
    # the dense barycenter runs in mixed precision: equal to its tolerance, as a matrix
    dense_covariance = GaussianSummary.from_bytes(dense_reference).covariance
    assert_close_in_norm(received.covariance, dense_covariance, 1e-9)
    assert low.accuracy == pytest.approx(dense.accuracy, abs=1e-12)
    assert low.status == dense.status == "completed"


def drop_at(stage: str):
    message_type = {
        "upload": "query.upload",
        "updates": "train.updates",
        "validation": "query.validation",
        "evaluation": "evaluate.head",
    }[stage]

    def fault(request: Message, reply: Message) -> Message | None:
        return None if request.metadata.message_type == message_type else reply

    return fault


@pytest.mark.parametrize(
    ("head", "tau", "stage"),
    [
        ("FedCGS", 0.4, "upload"),
        ("FedCGS", 0.4, "evaluation"),
        ("O-FedAvg", 0.4, "updates"),
        ("FedCGS", "auto", "validation"),
    ],
)
def test_dropout_is_reported_and_the_round_completes(node_configs, head, tau, stage):
    report, _, _, grid = deploy(
        node_configs, faults={13: drop_at(stage)}, min_clients=3, head=head, tau=tau
    )
    assert report.missing[stage] == [13]
    if stage == "validation":  # it leaves the run: the reference and the choice without it
        assert report.selection["left_out"] == {}  # the choice made again, without it
        assert report.reference_clients == [11, 12, 14]
        assert report.stages.count("validation") == 2
    assert len(report.accuracy) == N_CLIENTS - 1
    assert 13 not in report.accuracy
    assert (13, "evaluate.head") not in grid.delivered or stage == "evaluation"


@pytest.mark.parametrize("head", ["FedCGS", "O-FedAvg"])
def test_a_client_silent_after_its_upload_costs_one_reply_timeout(node_configs, head):
    """It misses the next stage it is asked to, leaves the run, and is asked nothing more:
    the reference, the candidates and the choice are made again without it."""

    def silent(request, reply):
        return reply if request.metadata.message_type == "query.upload" else None

    report, _, _, grid = deploy(
        node_configs, faults={13: silent}, head=head, tau="auto", min_clients=3
    )
    asked = [kind for node, kind in grid.delivered if node == 13]
    assert asked[0] == "query.upload" and len(asked) == 2  # one message after its upload
    missing = {stage: nodes for stage, nodes in report.missing.items() if nodes}
    assert missing == {report.stages[1]: [13]}  # no answer at one stage only
    assert report.reference_clients == [11, 12, 14]
    assert sorted(report.accuracy) == [11, 12, 14]


def test_dropout_at_upload_matches_in_process_without_that_client(node_configs):
    report, scores, _, _ = deploy(
        node_configs,
        faults={12: drop_at("upload")},
        summary_dtype="float64",
        screen="off",
        label_mix="federation",
    )
    rest = {node: nc for node, nc in node_configs.items() if node != 12}
    _, expected, tests = in_process(rest, DeploymentConfig(classes=CLASSES, label_mix="federation"))
    for client, (Z_test, y_test) in tests.items():
        np.testing.assert_array_equal(scores.predict(Z_test), expected.predict(Z_test))
        assert report.accuracy[node_of(client)] == np.mean(expected.predict(Z_test) == y_test)


def test_below_min_clients_is_a_clear_error_naming_the_missing(node_configs):
    faults = {12: drop_at("upload"), 13: drop_at("upload")}
    with pytest.raises(
        ProtocolRunError,
        match=r"only 2 client\(s\) completed the upload stage, "
        r"fewer than min_clients = 3 \(node 12 missing; node 13 missing\)",
    ) as info:
        deploy(node_configs, faults=faults, min_clients=3)
    assert info.value.report.missing["upload"] == [12, 13]


def test_a_client_that_fails_is_rejected_with_its_reason(node_configs):
    broken = dict(node_configs)
    broken[14] = {"partition-id": 99}  # embedded Office-Caltech10 has 4 clients
    report, _, _, _ = deploy(broken, min_clients=3)
    assert "partition-id 99 is out of range" in report.rejected["upload"][14]
    assert sorted(report.accuracy) == [11, 12, 13]


def test_labels_outside_the_configured_class_set_fail_that_client(node_configs):
    """The class set is the configuration's: a client cannot enlarge it."""
    with pytest.raises(ProtocolRunError, match="only 0 client") as info:
        deploy(node_configs, classes="0,1,2", min_clients=1)
    rejected = info.value.report.rejected["upload"]
    assert sorted(rejected) == [11, 12, 13, 14]
    assert all("labels [3] are not in the run's class set" in why for why in rejected.values())


@pytest.mark.parametrize("n_train", [0, 1])
def test_a_node_of_fewer_than_two_training_rows_fails_with_the_estimators_message(
    node_configs, tmp_path, n_train
):
    with np.load(node_configs[12]["data"]) as a:
        arrays = {key: a[key] for key in a.files}
    path = tmp_path / "toys.npz"
    np.savez(
        path,
        X_train=arrays["X_train"][:n_train],
        y_train=arrays["y_train"][:n_train],
        X_test=arrays["X_test"],
        y_test=arrays["y_test"],
    )
    report = deploy({**node_configs, 12: {"data": str(path), "client-id": "toys"}})[0]
    s = "" if n_train == 1 else "s"
    assert report.status == "completed" and report.rejected["upload"] == {
        12: f"client error: ValueError: client 'toys' has {n_train} sample{s}; at least 2 are "
        "needed to estimate a covariance"
    }


def test_a_private_node_names_no_label_outside_the_class_set(node_configs):
    """The error naming a label would tell the server something exact about a private
    node's rows: its rows with such a label enter as null rows and it answers as usual."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    report, *_ = deploy(
        node_configs, classes="0,1,2", epsilon=8.0, clip_norm=20.0, tau=0.4, min_clients=1
    )
    assert report.rejected == {} and sorted(report.accuracy) == [11, 12, 13, 14]
    # what enters each release: the node's rows with label 3 replaced by the null row
    config = DeploymentConfig(classes="0,1,2", epsilon=8.0, clip_norm=20.0, tau=0.4)
    data = load_client_data(node_configs[11], config)
    party = ClientParty(
        data.X_train, data.y_train, head=config.make_head(), classes=config.class_set,
        privacy=config.privacy_budget(),
    )  # fmt: skip
    outside = ~np.isin(data.y_train, config.class_set)
    assert outside.any() and np.isin(party.y, config.class_set).all()
    np.testing.assert_array_equal(party.X[outside], 0.0)
    np.testing.assert_array_equal(party.X[~outside], data.X_train[~outside])
    assert outside.any()  # the node's own data are not modified


def test_a_private_node_s_release_is_the_in_process_client_s_bytes(node_configs):
    """The privacy audits run ClientParty.answer in process: the ClientApp runs the same code,
    so a private node's release equals, byte for byte, the in-process client's answer to the
    same request under the same secret seed."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    from skslot.flower.client_app import STATE
    from skslot.protocol import ClientState
    from skslot.protocol.stages import ClientWire

    private = {11: {**node_configs[11], "epsilon": 8.0, "clip-norm": 20.0}}
    config = DeploymentConfig(classes=CLASSES, epsilon=8.0, clip_norm=20.0, tau=0.4)
    grid = LocalGrid(client_app, private, config.to_run_config())
    budget = config.privacy_budget()
    releases = config.protocol().releases
    split = budget.split(releases)
    request = upload_request(
        11, privacy=(8.0, 1e-5, 20.0), releases=releases,
        shares=tuple(split[r] for r in releases),
    )  # fmt: skip
    reply = grid._deliver(request)
    assert not reply.has_error()
    state = ClientState.from_config(dict(grid.contexts[11].state[STATE]))
    data = load_client_data(private[11], config)
    party = ClientParty(
        data.X_train, data.y_train, head=config.make_head(), classes=config.class_set,
        label=data.client, X_test=data.X_test, y_test=data.y_test, privacy=budget,
        state=ClientState(noise_seed=state.noise_seed),
    )  # fmt: skip
    stage = upload_stage.STAGE
    wire = ClientWire(config.class_set, data.X_train.shape[1])
    decoded = stage.decode_request(messages.received(request), wire)
    answer = stage.encode_reply(party.answer("upload", decoded), decoded)
    sent = messages.received(reply)
    same = messages.received(Message(messages.content(answer), reply_to=request))
    assert sent.config == same.config and "statistics" in sent.arrays_bytes
    assert sent.arrays_bytes == same.arrays_bytes  # the released statistics, byte for byte


def test_a_node_answers_no_sooner_than_its_reply_seconds(node_configs):
    """A node's reply time can tell the server about its rows: with reply-seconds it answers,
    and fails, at that time."""
    as_server_app()
    config = DeploymentConfig(classes=CLASSES, num_clients=1)
    slow = {11: {**node_configs[11], "reply-seconds": 0.4}}
    for request, answered in ((upload_request(11), True), (upload_request(11, "float8"), False)):
        grid = LocalGrid(client_app, slow, config.to_run_config())
        start = time.monotonic()
        reply = grid._deliver(request)
        assert time.monotonic() - start >= 0.4
        assert reply.has_error() is not answered  # an error waits too
    with pytest.raises(ValueError, match="'reply-seconds' must be a number >= 0"):
        reply_seconds({"reply-seconds": -1.0})
    assert reply_seconds({}) == 0.0


def test_a_private_fedavg_run_travels_through_the_same_protocol(node_configs):
    """With epsilon, O-FedAvg's clients release their summaries and local heads too."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    exact, _, exact_reference, _ = deploy(node_configs, summary_dtype="float64", head="O-FedAvg")
    private, _, private_reference, _ = deploy(
        node_configs, summary_dtype="float64", epsilon=8.0, clip_norm=20.0, head="O-FedAvg"
    )
    assert sorted(private.accuracy) == [11, 12, 13, 14]
    assert exact.privacy is None and "local_head" in private.privacy
    for node in node_configs:  # its summary, its local head, its test count
        assert set(private.bytes_sent[node]) == {"upload", "updates", "evaluation"}
        assert 0.99 * 8.0 < private.privacy_spent[node] <= 8.0
    a, b = (GaussianSummary.from_bytes(r) for r in (exact_reference, private_reference))
    assert not np.allclose(a.covariance, b.covariance)  # the noise reached the reference
    # a private client holds out no rows (the exact run screens, on its fitting rows)
    assert b.n > a.n and private.summary_values == exact.summary_values != {}
    assert exact.screening["excluded"] == [] and "a private run" in private.screening["skipped"]


def test_a_nodes_lifetime_budget_refuses_the_run_past_it(node_configs, tmp_path):
    """Each node's own record charges each run once; the run past it is refused."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    own = {
        node: {
            **nc, "epsilon": 8.0, "clip-norm": 20.0,
            "lifetime-epsilon": 12.0, "budget-file": str(tmp_path / f"{node}.json"),
        }
        for node, nc in node_configs.items()
    }  # fmt: skip
    first, *_ = deploy(own, summary_dtype="float64", epsilon=8.0, clip_norm=20.0)
    assert sorted(first.accuracy) == [11, 12, 13, 14]
    with pytest.raises(ProtocolRunError) as refused:
        deploy(own, summary_dtype="float64", epsilon=8.0, clip_norm=20.0)
    rejected = refused.value.report.rejected["upload"]
    assert sorted(rejected) == [11, 12, 13, 14]
    # the one refusal, naming neither the record nor what is left in it
    assert all(why.endswith(str(refusal("upload"))) for why in rejected.values())
    assert not any(str(tmp_path) in why for why in rejected.values())
    for node in own:  # charged once each, and nothing for the refused run
        assert LifetimeBudget(tmp_path / f"{node}.json", epsilon=12.0).spent()[0] == 8.0
    lone = {**own[11]}
    del lone["epsilon"]  # a lifetime budget needs the node's own run budget
    with pytest.raises(ValueError, match="node's own 'epsilon'"):
        node_lifetime(lone)


# -- hostile summaries ------------------------------------------------------------------


def _valid(m=M, client=3, n=100, dtype="float64") -> bytes:
    rng = np.random.default_rng(0)
    A = rng.normal(size=(m, m))
    return GaussianSummary(n, rng.normal(size=m), A @ A.T + np.eye(m), client=client).to_bytes(
        dtype
    )


def _patched(payload: bytes, offset: int, raw: bytes) -> bytes:
    return payload[:offset] + raw + payload[offset + len(raw) :]


def _factor(complement=1.0, eigenvalue=2.0, skew=0.0, m=M, client=3, n=100) -> bytes:
    """A factor-form payload (rank 2) with its complement (header bytes 32-39), its first
    eigenvalue (after the 40-byte header, the label and the mean) and its basis as a hostile
    client may write them."""
    from types import SimpleNamespace

    from skslot.wire import encode_summary

    U = np.linalg.qr(np.random.default_rng(1).normal(size=(m, 2)))[0]
    U[:, 1] += skew * U[:, 0]
    fields = SimpleNamespace(
        n=n, mean=np.zeros(m), basis=U, eigenvalues=np.array([2.0, 3.0]),
        complement=1.0, shrinkage=0.1, client=client,
    )  # fmt: skip
    payload = encode_summary(fields, "float64")
    payload = _patched(payload, 32, struct.pack("<d", complement))
    return _patched(payload, 40 + 8 + 8 * m, struct.pack("<d", eigenvalue))


BODY = 28 + 8  # header + int label: the first float64 value
HOSTILE_SUMMARIES = {
    "wrong dimension": (_valid(m=M + 1), "dimension 7, expected 6"),
    "NaN": (_patched(_valid(), BODY, struct.pack("<d", np.nan)), "NaN or infinite"),
    "not positive definite": (
        _patched(_valid(), BODY + 8 * M, struct.pack("<d", -5.0)),  # first variance < 0
        "not positive definite",
    ),
    "oversized": (_valid() + bytes(1 << 16), "payload oversized"),
    "truncated": (_valid()[:-3], "payload truncated"),
    "wrong version": (_patched(_valid(), 4, b"\x09"), "unsupported summary format version 9"),
    "absurd n": (_patched(_valid(), 12, struct.pack("<Q", 2**63)), "n must be between 2 and 2**53"),
    "huge dimension": (
        _patched(_valid(), 8, struct.pack("<I", 2**31)),
        "outside the accepted range",
    ),
    "pickle": (b"\x80\x04\x95" + bytes(64), "bad magic"),
    "factor form: complement not positive": (
        _factor(complement=-1.0),
        "complement must be positive",
    ),
    "factor form: eigenvalue not positive": (
        _factor(eigenvalue=-3.0),
        "eigenvalues must be positive",
    ),
    "factor form: basis not orthonormal": (
        _factor(skew=1e-3),
        "basis is not orthonormal",
    ),
}


def replace_summary(payload):
    def fault(request: Message, reply: Message) -> Message:
        if request.metadata.message_type != "query.upload":
            return reply
        config = dict(reply.content.config_records[messages.CONFIG])
        content = RecordDict({messages.CONFIG: ConfigRecord({**config, "summary": payload})})
        for name, record in reply.content.array_records.items():
            content[name] = record
        return Message(content, reply_to=request)

    return fault


@pytest.mark.parametrize("case", list(HOSTILE_SUMMARIES))
def test_hostile_summary_is_rejected_and_the_others_proceed(node_configs, case):
    payload, reason = HOSTILE_SUMMARIES[case]
    report, _, _, _ = deploy(node_configs, faults={14: replace_summary(payload)}, head="FedPFT")
    rejected = report.rejected["upload"]
    assert list(rejected) == [14] and reason in rejected[14], rejected
    assert sorted(report.accuracy) == [11, 12, 13]


HOSTILE_DERIVED = {
    "a summary beside the shrinkage": (
        lambda config: {
            **{k: v for k, v in config.items() if k != "dimension"},
            "summary": _valid(n=config["n-fit"]),  # of its rows: only its form is wrong
        },
        "must carry the shrinkage, not a summary of its own",
    ),
    "a summary beside the dimension": (
        lambda config: {**config, "summary": _valid()},
        "either a summary or the dimension",
    ),
    "shrinkage above 1": (lambda config: {**config, "shrinkage": 1.5}, "shrinkage must be in"),
    "NaN shrinkage": (lambda config: {**config, "shrinkage": float("nan")}, "shrinkage must be"),
    "no shrinkage": (
        lambda config: {k: v for k, v in config.items() if k != "shrinkage"},
        "lacks the shrinkage its summary is derived with",
    ),
    "another dimension": (lambda config: {**config, "dimension": M + 1}, "dimension 7, expected"),
    "a label of another type": (lambda config: {**config, "label": 1.5}, "a client label must"),
}


@pytest.mark.parametrize("case", list(HOSTILE_DERIVED))
def test_hostile_derived_summary_values_are_rejected(node_configs, case):
    """A FedCGS upload carries its shrinkage, label and dimension, checked like a summary."""
    edit, reason = HOSTILE_DERIVED[case]

    def fault(request: Message, reply: Message) -> Message:
        if request.metadata.message_type != "query.upload":
            return reply
        config = edit(dict(reply.content.config_records[messages.CONFIG]))
        content = RecordDict({messages.CONFIG: ConfigRecord(config)})
        for name, record in reply.content.array_records.items():
            content[name] = record
        return Message(content, reply_to=request)

    report, _, _, _ = deploy(node_configs, faults={14: fault})
    rejected = report.rejected["upload"]
    assert list(rejected) == [14] and reason in rejected[14], rejected
    assert sorted(report.accuracy) == [11, 12, 13]


@pytest.mark.parametrize("head", ["FedPFT", "FedCGS"])
def test_a_node_claiming_another_clients_label_evicts_nobody(node_configs, head):
    """A client is its node: a declared label is only shown, never trusted."""

    def relabel(request: Message, reply: Message) -> Message:
        if request.metadata.message_type != "query.upload":
            return reply
        config = dict(reply.content.config_records[messages.CONFIG])
        if "summary" in config:
            own = GaussianSummary.from_bytes(config["summary"])
            claimed = GaussianSummary(own.n, own.mean, own.covariance, own.shrinkage, client=0)
            config["summary"] = claimed.to_bytes("float64")
        else:  # FedCGS: the label of the summary the server derives
            config["label"] = 0
        content = RecordDict({messages.CONFIG: ConfigRecord(config)})
        for name, record in reply.content.array_records.items():
            content[name] = record
        return Message(content, reply_to=request)

    report, _, _, _ = deploy(node_configs, faults={14: relabel}, summary_dtype="float64", head=head)
    assert not report.rejected.get("upload")
    assert report.clients[11] == report.clients[14] == 0
    assert sorted(report.accuracy) == [11, 12, 13, 14]


def test_summary_of_the_wrong_type_is_rejected(node_configs):
    def fault(request, reply):
        if request.metadata.message_type != "query.upload":
            return reply
        return Message(
            RecordDict(
                {messages.CONFIG: ConfigRecord({"summary": "text", "n-fit": 1, "n-test": 1})}
            ),
            reply_to=request,
        )

    report, _, _, _ = deploy(node_configs, faults={14: fault})
    assert "'summary' has type str" in report.rejected["upload"][14]


# -- hostile statistics -----------------------------------------------------------------


def _npy(array: np.ndarray, *, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def _with(**changes):
    return lambda arrays: {**arrays, **changes}


def _nan_sums(arrays):
    sums = arrays["sums"].copy()
    sums[0, 0] = np.nan
    return {**arrays, "sums": sums}


def _pickled(arrays):
    data = _npy(np.array([{"payload": 1}], dtype=object), allow_pickle=True)
    return {**arrays, "counts": Array(dtype="object", shape=(1,), stype="numpy.ndarray", data=data)}


def _header_array(shape_text: str, descr: str = "<f8", body: int = 64) -> Array:
    """An Array whose .npy header declares ``shape_text`` verbatim (written by hand)."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}".encode()
    header += b" " * (-(11 + len(header)) % 16) + b"\n"
    data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(body)
    return Array(dtype="float64", shape=(1,), stype="numpy.ndarray", data=data)


def _huge_header(arrays):
    return {**arrays, "gram_upper": _header_array("(1000000000000,)")}


def _counts_off(arrays):
    counts = arrays["counts"].copy()
    counts[0] += 1
    return {**arrays, "counts": counts}


def _not_psd(arrays):
    upper = arrays["gram_upper"].copy()
    upper[1] = 10 * np.abs(upper).max()  # G_01 = G_10 with |G_01| > sqrt(G_00 G_11)
    return {**arrays, "gram_upper": upper}


HOSTILE_STATISTICS = {
    "NaN": (_nan_sums, "array 'sums' contains NaN"),
    "wrong shape": (_with(sums=np.zeros((4, M + 1))), "array 'sums' has shape (4, 7)"),
    "missing array": (
        lambda a: {k: v for k, v in a.items() if k != "gram_upper"},
        "lacks the array 'gram_upper'",
    ),
    "pickled object": (_pickled, "has dtype object"),
    "huge header": (_huge_header, "its header does not match its size"),
    "oversized": (_with(padding=np.zeros(2**18)), "more than the"),
    "counts do not add up": (_counts_off, "class counts add up to"),
    "n differs from summary": (_with(n=np.array(10**6)), "statistics count 1000000 rows"),
    "Gram not PSD": (_not_psd, "not positive semi-definite"),
    "strings": (_with(sums=np.array(["a", "b"])), "has dtype <U1"),
}


@pytest.mark.parametrize("case", list(HOSTILE_STATISTICS))
def test_hostile_statistics_are_rejected_and_the_others_proceed(node_configs, case):
    edit, reason = HOSTILE_STATISTICS[case]
    report, _, _, grid = deploy(node_configs, faults={14: tamper_statistics(edit)})
    assert list(report.rejected["upload"]) == [14]
    assert reason in report.rejected["upload"][14], report.rejected["upload"][14]
    assert sorted(report.accuracy) == [11, 12, 13]
    assert (14, "evaluate.head") not in grid.delivered


@pytest.mark.parametrize(
    ("n_correct", "n_test", "own_mix", "reason"),
    [
        (81, 80, None, "evaluation counts are inconsistent (81 of 80)"),
        (2**62, 2**62, None, "evaluated 4611686018427387904 test rows, but announced 80"),
        (40, 80, 1.5, "own-mix accuracy 1.5 is not in [0, 1] for 80 test rows"),
        (40, 80, float("nan"), "own-mix accuracy nan is not in [0, 1] for 80 test rows"),
        (0, 80, 0.5, "own-mix accuracy 0.5 with no test row predicted right"),
    ],
)
def test_inconsistent_evaluation_is_rejected(node_configs, n_correct, n_test, own_mix, reason):
    """Node 11 announced 80 test rows in its upload; its accuracy cannot exceed 1."""

    def fault(request, reply):
        if request.metadata.message_type != "evaluate.head":
            return reply
        return evaluation_reply(request, n_correct=n_correct, n_test=n_test, own_mix=own_mix)

    report, _, _, _ = deploy(node_configs, faults={11: fault})
    assert reason in report.rejected["evaluation"][11]
    assert sorted(report.accuracy) == [12, 13, 14]


@pytest.mark.parametrize("n_test", [2**62, 100 * 80 + 80])
def test_a_test_size_out_of_line_with_the_others_is_not_evaluated(node_configs, n_test):
    """Announced alike in the upload and the evaluation, to report a perfect accuracy.

    Beyond 2**53 the upload itself is malformed; a size far above the others'
    keeps the client in training but out of the evaluation."""

    def fault(request, reply):
        if request.metadata.message_type == "query.upload":
            return rewrite_upload(request, reply, config={"n-test": n_test})
        if request.metadata.message_type == "evaluate.head":
            return evaluation_reply(request, n_correct=n_test, n_test=n_test)
        return reply

    report = deploy(node_configs, faults={11: fault}, min_clients=3)[0]
    if n_test > 2**53:
        assert "n-test and n-validation must be at most 2**53 rows" in report.rejected["upload"][11]
    else:
        assert "upload" not in report.rejected and 11 in report.clients  # it trained
        why = report.rejected["evaluation"][11]
        assert "declares 8.08e+03 test rows" in why and "max-count-ratio = 100" in why
    assert sorted(report.accuracy) == [12, 13, 14]  # its claimed accuracy of 1 counts nowhere
    assert report.macro_accuracy == pytest.approx(np.mean(list(report.accuracy.values())))


def test_a_fitting_part_its_summary_does_not_count_is_rejected(node_configs):
    """The summary describes the fitting rows: one check at intake, on Flower as in process."""

    def fault(request, reply):
        if request.metadata.message_type == "query.upload":
            n_fit = reply.content.config_records[messages.CONFIG]["n-fit"]
            return rewrite_upload(request, reply, config={"n-fit": n_fit + 1})
        return reply

    report = deploy(node_configs, faults={11: fault}, head="O-FedAvg", min_clients=3)[0]
    assert "its summary counts" in report.rejected["upload"][11], report.rejected["upload"][11]
    assert sorted(report.accuracy) == [12, 13, 14]


@pytest.mark.parametrize(
    ("tau", "n_validation", "reason"),
    [
        (0.4, 5, "this run has no validation part"),  # without the screening
        ("auto", -1, "row counts must be >= 0"),
        ("auto", 2**60, "n-validation must be at most 2**53 rows"),
        ("auto", 2**30, "a split at validation_fraction = 0.2 over 4 classes holds out"),
        ("auto", 0, "a split at validation_fraction = 0.2 over 4 classes holds out"),
    ],
)
def test_a_validation_part_the_split_cannot_make_is_rejected(
    node_configs, tau, n_validation, reason
):
    """O-FedAvg sends no statistics to count its held-out rows: its split bounds them.

    A client announcing a larger validation part would have the refit accept local heads
    of rows it does not hold, and one announcing none would stay out of the choice."""

    def fault(request, reply):
        if request.metadata.message_type == "query.upload":
            return rewrite_upload(request, reply, config={"n-validation": n_validation})
        return reply

    report = deploy(
        node_configs, faults={11: fault}, head="O-FedAvg", tau=tau, min_clients=3,
        screen="off" if tau != "auto" else "auto",
    )[0]  # fmt: skip
    assert reason in report.rejected["upload"][11], report.rejected["upload"][11]
    assert sorted(report.accuracy) == [12, 13, 14]


@pytest.mark.parametrize(
    ("shape", "descr"),
    [
        ("(1000000000000,)", "<f8"),
        ("(True,)", "<i8"),
        ("(0, 18446744073709551616)", "<f8"),
        ("(-1,)", "<f8"),
        ("(1.5,)", "<f8"),
        ("[8]", "<f8"),
        ("(8,)", "|O"),
        ("(8,)", "<V8"),
    ],
)
def test_hostile_npy_headers_raise_only_the_protocol_error(shape, descr):
    record = ArrayRecord({"classes": _header_array(shape, descr)})
    with pytest.raises(MessageFormatError):
        record_arrays(record, max_bytes=10**6)


def test_record_to_arrays_checks_the_header_before_allocating():
    huge = _huge_header({})["gram_upper"]
    with pytest.raises(MessageFormatError, match="header does not match its size"):
        record_arrays(ArrayRecord({"gram_upper": huge}), max_bytes=1 << 20)
    with pytest.raises(MessageFormatError, match=r"not a valid \.npy"):
        record_arrays(
            ArrayRecord(
                {"x": Array(dtype="float64", shape=(1,), stype="numpy.ndarray", data=b"junk")}
            ),
            max_bytes=1 << 20,
        )


# -- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_config", "message"),
    [
        ({"head": "SVM"}, "unknown head 'SVM': choose from"),
        ({"head": "FedPFT", "head-params": '{"ranks": 2}'}, "has no parameter 'ranks'"),
        ({"head": "FedPFT", "head-params": '{"rank": 0}'}, "rank must be"),
        ({"head-params": "[1]"}, "head_params must be a JSON object"),
        ({"head-params": "{"}, "head_params must be a JSON object"),
        ({"head": "numpy:ndarray"}, "is not a skslot.heads.OneShotHead subclass"),
        ({"tau": 1.5}, "tau"),
        ({"alpha": "often"}, "alpha must be a number or 'none'"),
        ({"alpha": 0.0}, "alpha must be > 0"),
        ({"summary-dtype": "int8"}, "summary_dtype"),
        ({"min-clients": 0}, "min_clients"),
        ({"epsilon": "lots"}, r"epsilon must be a number in \(0, 1e\+06\] or 'none'"),
        ({"epsilon": 0.0}, r"epsilon must be in \(0, 1e\+06\] or 'none', got 0.0"),
        ({"epsilon": 1e7}, r"epsilon must be in \(0, 1e\+06\]"),
        ({"tau": "sometimes"}, "tau must be a number in"),
        ({"tau": "auto", "taus": "0,0.4,0.4"}, "taus repeats"),
        ({"tau": "auto", "taus": "0,2"}, r"each tau must be in \[0.0, 1.0\]"),
        ({"taus": "a,b"}, "taus must be comma-separated numbers"),
        ({"validation-fraction": 1.0}, "validation_fraction must be in"),
        (
            {"tau": "auto", "head-grid": '{"shrinkage": [0.1]}', "head": "FedPFT"},
            "head_grid can only search server-side parameters of FedPFTClassifier",
        ),
        ({"tau": "auto", "head-grid": '{"shrinkage": 0.1}'}, "must be a JSON list"),
        ({"classes": "1"}, "at least 2 distinct labels"),
        ({"selection-rule": "max"}, "rule must be one of"),
        ({"n-features": 10**6}, "n_features must be"),
        ({"defence": "yes"}, "defence must be true or false"),
        ({"server-jobs": 0}, "server_jobs must be a non-zero int"),
        ({"client-batch": -1}, "client_batch must be a non-negative integer"),
        ({"client-batch": 2.5}, "client_batch must be a non-negative integer"),
        ({"epsilon": 8.0, "summary-form": "low-rank"}, "a private run releases dense ones"),
        ({"summary-form": "sparse"}, "summary_form must be one of"),
    ],
)
def test_bad_run_config_is_a_clear_error(run_config, message):
    with pytest.raises(ValueError, match=message):
        DeploymentConfig.from_run_config(run_config)


def test_run_config_round_trip_and_app_template(tmp_path):
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = DeploymentConfig(
        head="O-FedAvg", tau=0.6, alpha=None, seed=3, output_dir='C:\\x "y"', defence=False
    )
    assert DeploymentConfig.from_run_config(config.to_run_config()) == config
    path = write_flower_app(tmp_path / "app", config) / "pyproject.toml"
    parsed = tomllib.loads(path.read_text())
    assert parsed["tool"]["flwr"]["app"]["components"] == {
        "serverapp": "skslot.flower.server_app:app",
        "clientapp": "skslot.flower.client_app:app",
    }
    assert DeploymentConfig.from_run_config(parsed["tool"]["flwr"]["app"]["config"]) == config


def test_node_config_dataset_overrides_the_run_config(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "two_domains.npz"
    np.savez(
        path,
        X=rng.normal(size=(120, 3)),
        y=np.tile(np.arange(3), 40),
        domain=np.repeat([0, 1], 60),
        domains=np.array(["a", "b"]),
        classes=np.array(["c0", "c1", "c2"]),
    )
    config = DeploymentConfig(alpha=None, dataset="office-caltech10")
    own = load_client_data({"partition-id": 1, "dataset": str(path)}, config)
    assert own.X_train.shape[1] == 3 and own.client == 1
    default = load_client_data({"partition-id": 1}, config)
    assert default.X_train.shape[1] == 800  # the run config's data set
    with pytest.raises(ValueError, match="partition-id 2 is out of range"):
        load_client_data({"partition-id": 2, "dataset": str(path)}, config)
    with pytest.raises(ValueError, match="node config 'partition-id' must be"):
        load_client_data({"partition-id": "one"}, config)


class ExactLocalHeads(OneShotFedAvgClassifier):
    """A head that trains locally with no private release of its own (a user's head: a
    private release is written per head class, a subclass has none)."""


def test_a_head_without_a_private_release_gets_a_private_summary_alone(node_configs):
    """epsilon then protects the summary only, and the run says so."""
    report, _, _, _ = deploy(
        node_configs, epsilon=8.0, clip_norm=20.0, head=f"{__name__}:ExactLocalHeads"
    )
    assert sorted(report.accuracy) == [11, 12, 13, 14]
    assert "NOT private" in report.privacy and not report.privacy_spent


def test_private_summaries_are_released_once_per_run(node_configs):
    """A server asking again gets the same bytes, not fresh noise to average out."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    config = DeploymentConfig(epsilon=1.0, clip_norm=20.0, classes=CLASSES, head="O-FedAvg")
    grid = LocalGrid(client_app, node_configs, config.to_run_config())
    releases = ("summary", "local_head", "evaluation")
    shares = config.privacy_budget().split(releases)
    request = upload_request(
        11,
        privacy=(1.0, 1e-5, 20.0),
        releases=releases,
        shares=tuple(shares[r] for r in releases),
    )
    first, second = (grid._deliver(request) for _ in range(2))
    payload = [messages.received(r).value("summary", bytes) for r in (first, second)]
    assert payload[0] == payload[1]


@pytest.mark.parametrize("head", ["FedCGS", "FedPFT"])
def test_private_summaries_are_refused_beside_statistics_that_reveal_the_moments(
    node_configs, head
):
    """A statistics head's upload holds the exact moments a private summary would protect."""
    # in a deployment, epsilon is then each client's budget for everything it sends
    private = DeploymentConfig(epsilon=1.0, clip_norm=20.0, classes=CLASSES, head=head)
    assert private.privacy_budget().epsilon == 1.0
    assert private.summary_estimator().epsilon is None  # derived from the release
    with pytest.raises(ValueError, match=r"a private summary \(epsilon\) is refused"):
        ClientParty(
            np.eye(3), np.arange(3), head=make_head(head), classes=np.arange(3),
            summary_estimator=GaussianSummaryEstimator(epsilon=1.0, clip_norm=1.0),
        ).answer("upload", UploadRequest(0))  # fmt: skip
    # why: the statistics give the server the client's exact mean
    config = DeploymentConfig(classes=CLASSES, head=head)
    grid = LocalGrid(client_app, node_configs, config.to_run_config())
    upload = messages.received(grid._deliver(upload_request(11)))
    stats = config.make_head().decode_statistics(
        upload.arrays(upload_stage.STATISTICS, max_bytes=1 << 20),
        classes=config.class_set,
        n_features=M,
        n_samples=upload.value("n-fit", int),
    )
    own = load_client_data(node_configs[11], config)
    implied = stats.implied_moments()
    np.testing.assert_allclose(implied.mean, own.X_train.mean(axis=0), rtol=1e-2)


def serve(node_configs, config: DeploymentConfig, run_id: int, faults=None, run_config=None):
    """The ServerApp's entry point, as Flower calls it for run ``run_id``."""
    from flwr.app import Context

    from skslot.flower import server_app

    run_config = config.to_run_config() if run_config is None else run_config
    grid = LocalGrid(client_app, node_configs, config.to_run_config(), faults)
    context = Context(
        run_id=run_id, node_id=1, node_config={}, state=RecordDict(), run_config=run_config
    )
    server_app.main(grid, context)


def test_the_report_says_what_each_node_read_and_the_classes_no_node_holds(
    node_configs, tmp_path, caplog
):
    """Nodes reading their own files: the report names what each read, not the partition
    settings it did not use, and the classes of the run's set no node trained on."""
    from flwr.common.logger import FLOWER_LOGGER

    from skslot.protocol.report import logger as protocol_logger

    out = tmp_path / "out"
    config = DeploymentConfig(
        classes="0,1,2,3,4,5", num_clients=N_CLIENTS, connect_timeout=0.0, output_dir=str(out)
    )
    FLOWER_LOGGER.addHandler(caplog.handler)  # the ServerApp's own lines
    try:
        serve(node_configs, config, 3)
    finally:  # the ServerApp forwards the protocol's log to Flower's handlers
        FLOWER_LOGGER.removeHandler(caplog.handler)
        protocol_logger.removeHandler(caplog.handler)
    report = json.loads((out / "run-3" / "report.json").read_text())
    assert report["status"] == "completed"
    assert report["untrained_classes"] == [4, 5]
    assert set(report["data"].values()) == {"its own .npz of train and test rows"}
    assert not {"dataset", "alpha", "clients-per-domain"} & set(report["config"])
    assert "skslot: data read: every node: its own .npz of train and test rows" in caplog.text
    # the protocol's warning, on the ServerApp's console
    assert "no accepted client trained on class(es) 4, 5 of the run's class set" in caplog.text

    # nodes reading partitions of the run's data set: its settings stay, each node says so
    rng = np.random.default_rng(0)
    path = tmp_path / "two_domains.npz"
    np.savez(
        path,
        X=rng.normal(size=(240, 3)) + np.repeat([0.0, 1.0], 120)[:, None],
        y=np.tile(np.arange(4), 60),
        domain=np.repeat([0, 1], 120),
        domains=np.array(["a", "b"]),
        classes=np.array(["c0", "c1", "c2", "c3"]),
    )
    partitions = {11 + k: {"partition-id": k} for k in range(2)}
    config = DeploymentConfig(
        classes=CLASSES,
        num_clients=2,
        connect_timeout=0.0,
        alpha=None,
        dataset=str(path),
        min_clients=2,
        output_dir=str(out),
    )
    serve(partitions, config, 4)
    report = json.loads((out / "run-4" / "report.json").read_text())
    assert report["untrained_classes"] == []
    assert report["data"] == {
        str(11 + k): f"partition {k} of two_domains (no label skew, seed 0)" for k in range(2)
    }
    assert report["config"]["dataset"] == str(path) and report["config"]["alpha"] == "none"


def test_a_failed_run_says_so_and_leaves_no_stale_outputs(node_configs, tmp_path):
    """Each run its own folder: running, then completed or failed; earlier runs untouched."""
    from skslot.flower.outputs import LAST_COMPLETED, LATEST

    from .flower_harness import read_pointer

    out = tmp_path / "out"
    ok = DeploymentConfig(
        classes=CLASSES, num_clients=N_CLIENTS, connect_timeout=0.0, output_dir=str(out)
    )
    seen = []

    def look(request, reply):  # the report as node 11 is asked to upload: running
        if request.metadata.message_type == "query.upload":
            seen.append(json.loads((read_pointer(out) / "report.json").read_text()))
        return reply

    serve(node_configs, ok, 7, faults={11: look})
    assert [r["status"] for r in seen] == ["running"] and seen[0]["run_id"] == 7
    first = out / "run-7"
    assert read_pointer(out, LATEST) == read_pointer(out, LAST_COMPLETED) == first
    report = json.loads((first / "report.json").read_text())
    assert report["status"] == "completed" and report["error"] is None
    assert report["run_id"] == 7 and report["started_at"] <= report["finished_at"]
    assert report["waits"]["upload"]["answered"] == N_CLIENTS
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    assert sorted(before) == ["global_head.npz", "reference.bin", "report.json"]

    with pytest.raises(ProtocolRunError, match="fewer than min_clients = 5"):
        serve(node_configs, dataclasses.replace(ok, min_clients=5), 8)
    failed = out / "run-8"
    report = json.loads((failed / "report.json").read_text())
    assert report["status"] == "failed" and "min_clients = 5" in report["error"]
    assert report["finished_at"] and report["waits"]["upload"]["answered"] == N_CLIENTS
    assert sorted(p.name for p in failed.iterdir()) == ["report.json"]
    assert read_pointer(out, LATEST) == failed and read_pointer(out, LAST_COMPLETED) == first

    # a run config the server refuses fails the run too, with its own folder
    with pytest.raises(ValueError, match="unknown head 'SVM'"):
        serve(node_configs, ok, 9, run_config={**ok.to_run_config(), "head": "SVM"})
    report = json.loads((out / "run-9" / "report.json").read_text())
    assert report["status"] == "failed" and "unknown head 'SVM'" in report["error"]

    # the same run id again (a ServerApp started twice), and no run id: new folders
    serve(node_configs, ok, 7)
    serve(node_configs, ok, 0)
    stamp = read_pointer(out, LAST_COMPLETED).name
    assert re.fullmatch(r"\d{8}T\d{6}Z(-\d+)?", stamp), stamp
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [LAST_COMPLETED, LATEST, "run-7", "run-7-2", "run-8", "run-9", stamp]
    )
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert not list(out.rglob("*.tmp"))


def test_the_launcher_reads_the_outcome_from_flower_and_the_report(tmp_path):
    """Flower's status says finished; the run's report says why it failed, in one line."""
    from skslot.flower.launch import COMPLETED, FAILED, PARTIAL, _outcome

    folder = tmp_path / "run-5"
    folder.mkdir()
    error = "ProtocolRunError: only 1 client(s) completed the upload stage,\n fewer than 2"
    (folder / "report.json").write_text(json.dumps({"status": "failed", "error": error}))
    outcome = _outcome(5, "finished:failed", "ServerApp failed with exception: ...", tmp_path)
    assert outcome.exit_code == FAILED and outcome.folder == folder
    assert outcome.line == (
        "skslot: run 5 failed: ProtocolRunError: only 1 client(s) completed the upload "
        "stage, fewer than 2"
    )
    (folder / "report.json").write_text(json.dumps({"status": "running"}))
    outcome = _outcome(5, "finished:failed", "No heartbeat received", tmp_path, settle=0.0)
    assert outcome.exit_code == FAILED and "still says 'running'" in outcome.reason
    report = {"status": "completed", "macro_accuracy": 0.75}
    (folder / "report.json").write_text(json.dumps(report))
    outcome = _outcome(5, "finished:completed", "", tmp_path)
    assert outcome.exit_code == COMPLETED and outcome.report == report
    assert outcome.line == f"skslot: run 5 completed: macro accuracy 0.7500; outputs in {folder}"
    case = {"config": {"label-mix": "client"}, "accuracy_case": "own label mix"}
    (folder / "report.json").write_text(json.dumps({**report, **case}))
    outcome = _outcome(5, "finished:completed", "", tmp_path)
    assert outcome.line == (  # the case its accuracy is of
        f"skslot: run 5 completed: macro accuracy 0.7500 (label-mix 'client': own label mix); "
        f"outputs in {folder}"
    )
    # a node rejected or missing: a partial run, named, unless the run config accepts it
    nodes = {"nodes": [11, 12, 13], "rejected": {"upload": {"12": "array 'counts': bad"}},
             "missing": {"evaluation": [13]}}  # fmt: skip
    (folder / "report.json").write_text(json.dumps({**report, **nodes, "config": {}}))
    outcome = _outcome(5, "finished:completed", "", tmp_path)
    assert outcome.exit_code == PARTIAL
    assert outcome.line == (
        "skslot: run 5 completed without every node: macro accuracy 0.7500 with 1 of 3 nodes; "
        "node 12 rejected at the upload stage: array 'counts': bad; node 13 missing at the "
        f"evaluation stage; outputs in {folder} (set accept-partial = true in the run config "
        "to accept it)"
    )
    accepted = {**report, **nodes, "config": {"accept-partial": True}}
    (folder / "report.json").write_text(json.dumps(accepted))
    assert _outcome(5, "finished:completed", "", tmp_path).exit_code == COMPLETED
    # without a readable report, Flower's word alone
    assert _outcome(6, "finished:stopped", "N/A", tmp_path).reason == "finished:stopped"
    assert _outcome(6, "finished:completed", "", None).exit_code == COMPLETED


def test_the_launcher_takes_a_completed_run_from_its_report_at_the_stream_s_end(tmp_path):
    """A log stream that ended with a report saying completed needs no ``flwr ls``; a
    failed or running report, a dropped stream or an unseen folder still ask Flower."""
    from skslot.flower.launch import _ended_by_report

    folder = tmp_path / "run-7"
    folder.mkdir()
    assert _ended_by_report(tmp_path, 7, True) == ("", "")  # no report yet
    for status in ("running", "failed"):
        (folder / "report.json").write_text(json.dumps({"status": status}))
        assert _ended_by_report(tmp_path, 7, True) == ("", "")
    (folder / "report.json").write_text(json.dumps({"status": "completed"}))
    assert _ended_by_report(tmp_path, 7, True) == ("finished:completed", "")
    assert _ended_by_report(tmp_path, 7, False) == ("", "")  # the stream dropped or timed out
    assert _ended_by_report(None, 7, True) == ("", "")  # the folder is not visible here
    assert _ended_by_report(tmp_path, 8, True) == ("", "")  # another run's report


def test_the_launcher_shows_a_reattached_log_stream_once(tmp_path):
    """After a dropped stream the log comes again from its start: only the new lines show."""
    import io
    import sys

    from skslot.flower.launch import _Stream

    log = tmp_path / "log.txt"
    printer = f"import sys; sys.stdout.write(open({str(log)!r}).read())"
    shown = io.StringIO()
    stream = _Stream([sys.executable, "-c", printer], os.environ, shown)
    for text in ("Using SuperLink: local\na\nb\n", "Using SuperLink: local\na\nb\nc\n"):
        log.write_text(text)
        assert stream.follow(60) == 0
    assert shown.getvalue() == "a\nb\nc\n"


def test_the_launcher_says_when_a_run_could_not_start(tmp_path):
    from skslot.flower.launch import NOT_STARTED, launch

    outcome = launch(tmp_path / "no-app", "local", env={**os.environ, "FLWR_HOME": str(tmp_path)})
    assert outcome.exit_code == NOT_STARTED and outcome.run_id is None
    assert outcome.line.startswith("skslot: the run was not started: ")


def test_a_lost_reply_is_sent_again_and_the_run_is_the_undisturbed_one(node_configs, caplog):
    """The SuperLink reports node 13's reply lost (as after a restart): asked again, it counts."""
    expected = deploy(node_configs, summary_dtype="float64")
    for message_type, stage in (("query.upload", "upload"), ("evaluate.head", "evaluation")):
        with caplog.at_level(logging.INFO, logger="skslot.protocol"):
            report, scores, _, grid = deploy(
                node_configs,
                faults={13: lost_reply(message_type)},
                summary_dtype="float64",
                retry_interval=0.05,
            )
        assert report.status == "completed" and not any(report.missing.values())
        assert report.waits[stage]["resent"] == {13: 1}
        assert report.accuracy == expected[0].accuracy
        np.testing.assert_array_equal(scores.coef, expected[1].coef)
        assert grid.delivered.count((13, message_type)) == 2
        assert report.bytes_sent[13][stage] == 2 * expected[0].bytes_sent[13][stage]
    # named by node id and, once its summary is known, by the label it declared
    assert "the message to node 13 or its reply was lost" in caplog.text
    assert "the message to node 13 (client 2) or its reply was lost" in caplog.text
    assert "skslot: stage evaluation: 4 of 4 clients answered" in caplog.text


def test_a_reply_lost_every_time_leaves_the_node_missing_when_time_is_up(node_configs):
    report, _, _, grid = deploy(
        node_configs,
        faults={13: lost_reply("query.upload", times=10**6)},
        min_clients=3,
        reply_timeout=0.6,
        retry_interval=0.1,
    )
    assert report.missing["upload"] == [13] and sorted(report.accuracy) == [11, 12, 14]
    why = report.waits["upload"]["missing"][13]
    assert why.startswith("did not answer within reply-timeout = 0.6 s: hung or disconnected")
    assert "last lost: Reply Message Unavailable" in why
    assert 3 <= grid.delivered.count((13, "query.upload")) <= 8  # every 0.1 s, not in a loop


def test_a_slow_node_counts_and_a_hung_one_is_missing(node_configs, caplog):
    """Replies are polled until the stage's reply-timeout, with progress lines meanwhile."""
    with caplog.at_level(logging.INFO, logger="skslot.protocol"):
        slow = {"latency": {12: 0.4}, "reply_timeout": 5.0, "progress_interval": 0.1}
        report = deploy(node_configs, **slow)[0]
    assert not any(report.missing.values()) and len(report.accuracy) == N_CLIENTS
    assert 0.3 < report.waits["upload"]["seconds"] < 3.0
    assert "skslot: stage upload: 3 of 4 clients answered" in caplog.text
    assert "waiting for node 12" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="skslot.protocol"):
        report = deploy(node_configs, latency={12: 60.0}, reply_timeout=0.5, min_clients=3)[0]
    assert report.missing["upload"] == [12] and 12 not in report.accuracy
    assert 0.5 <= report.waits["upload"]["seconds"] < 3.0
    assert report.waits["upload"]["missing"] == {
        12: "did not answer within reply-timeout = 0.5 s: hung or disconnected"
    }
    assert re.search(r"stage upload: 3 of 4 clients answered \(\d\.\d s\)", caplog.text)
    # said once, by the driver, with the transport's reason
    said = "node 12 missing at the upload stage: did not answer within reply-timeout = 0.5 s"
    assert caplog.text.count(said) == 1 and caplog.text.count("did not answer within") == 1


def test_the_first_reply_of_a_node_counts_and_later_ones_are_ignored(node_configs):
    """A node answering twice (say, once more after a re-send): only its first reply counts."""

    def twice(first, second):
        def fault(request, reply):
            if request.metadata.message_type != "evaluate.head":
                return reply
            n_test = evaluated_rows(reply)
            replies = {"honest": reply, "none": evaluation_reply(request, 0, n_test)}
            return [replies[first], replies[second]]

        return fault

    honest = deploy(node_configs)[0]
    report = deploy(node_configs, faults={13: twice("honest", "none")})[0]
    assert report.accuracy == honest.accuracy and not report.rejected
    report = deploy(node_configs, faults={13: twice("none", "honest")})[0]
    assert report.accuracy[13] == 0.0


@pytest.mark.parametrize(
    ("factor", "shift", "reason"),
    [
        (1e8, 0.0, "mean variance 5.86e+07 times the clients' median"),
        (1e50, 0.0, "times the clients' median (max-variance-ratio = 100)"),
        (1e-90, 0.0, "mean variance 2.4e-90 times"),
        (1.0, 1e50, "median standard deviations from the clients' median"),
    ],
)
def test_implausible_summaries_are_rejected_and_the_run_equals_the_others(
    node_configs, factor, shift, reason
):
    """Valid on the wire but out of line with the other clients: left out, not a crash.

    The client sends its summary alone, without the class sums a defended O-FedAvg run asks
    for (as a client whose summary is private does): FedCGS's statistics, or the class sums,
    would first be found inconsistent with it (see the next test).
    """
    # the bounds alone: the run of four (a screening's split) would differ from that of three
    settings = {
        "summary_dtype": "float64",
        "head": "O-FedAvg",
        "screen": "off",
        "label_mix": "federation",
    }
    report, scores, _, _ = deploy(
        node_configs, faults={14: scaled_summary(factor, shift, class_sums=False)}, **settings
    )
    assert reason in report.rejected["upload"][14]
    honest, expected, _ = deploy(
        {n: c for n, c in node_configs.items() if n != 14}, num_clients=3, **settings
    )[:3]
    np.testing.assert_array_equal(scores.coef, expected.coef)
    assert report.accuracy == honest.accuracy


def test_with_the_defence_off_an_implausible_summary_counts(node_configs, caplog):
    """``defence = false`` (for studying attacks): the x1e8 summary is accepted, and it hurts.

    (FedCGS: O-FedAvg now trains at any feature scale, so the x1e8 reference no
    longer stops its local training, and that head shrugs this attack off.)
    """
    settings = {"summary_dtype": "float64", "head": "FedCGS"}  # its summary: from the Gram
    faults = {14: tamper_statistics(lambda a: {**a, "gram_upper": a["gram_upper"] * 1e8})}
    with caplog.at_level(logging.WARNING, logger="flwr"):
        report = deploy(node_configs, faults=faults, defence=False, **settings)[0]
    assert "the defence is off" in caplog.text
    assert not report.rejected and sorted(report.accuracy) == [11, 12, 13, 14]
    defended = deploy(node_configs, faults=faults, **settings)[0]
    assert 14 in defended.rejected["upload"]
    honest = [11, 12, 13]
    assert np.mean([report.accuracy[n] for n in honest]) < np.mean(
        [defended.accuracy[n] for n in honest]
    )


def test_an_inflated_count_is_rejected_or_its_weight_capped(node_configs):
    """Counts are self-declared: beyond 100x the median a client is left out, beyond 10x capped.

    Every client alike, so no class counts travel to tie its count to (they would
    reject the count at the intake first).
    """
    report, _, _, _ = deploy(
        node_configs,
        faults={14: inflated_count(10**6)},
        summary_dtype="float64",
        screen="off",
        **PAPER,
    )
    assert "declares 1.6e+08 rows, 1e+06 times the clients' median" in report.rejected["upload"][14]
    report, scores, _, _ = deploy(
        node_configs,
        faults={14: inflated_count(50)},
        summary_dtype="float64",
        screen="off",
        **PAPER,
    )
    assert not report.rejected.get("upload") and report.capped == {14: 0.2}
    # capped at 10x the median count: the same head as an honest client weighing 10x
    honest, expected, _ = deploy(
        node_configs,
        faults={14: inflated_count(10)},
        summary_dtype="float64",
        screen="off",
        **PAPER,
    )[:3]
    assert honest.capped == {}
    np.testing.assert_allclose(scores.coef, expected.coef, rtol=1e-9)


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ("gram", "times the clients' median (max-variance-ratio = 100)"),
        ("sums", "median standard deviations from the clients' median"),
    ],
)
def test_fedcgs_statistics_are_its_summary_and_cannot_hide(node_configs, edit, reason):
    """FedCGS's summary is derived from its statistics: a Gram x 1e8, or every class sum and
    the total shifted alike (self-consistent), makes an implausible summary."""

    def tamper(arrays):
        if edit == "sums":
            shift = 50.0 * np.sqrt(np.abs(arrays["gram_upper"]).max())
            sums = arrays["sums"] + shift * arrays["counts"][:, None]
            return {**arrays, "sums": sums, "shift": arrays["shift"] + shift}
        return {**arrays, "gram_upper": arrays["gram_upper"] * 1e8}

    report, _, _, _ = deploy(node_configs, faults={14: tamper_statistics(tamper)}, screen="off")
    assert reason in report.rejected["upload"][14], report.rejected
    assert sorted(report.accuracy) == [11, 12, 13]


@pytest.mark.parametrize("covariance_type", ["lowrank", "full", "diag", "spherical"])
@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        ("covariances", "the statistics imply a total variance"),
        ("means", "standard deviations from the summary's"),
    ],
)
def test_mixtures_inconsistent_with_the_summary_are_rejected(
    node_configs, covariance_type, edit, reason
):
    """FedPFT's mixtures imply the client's mean and total variance: they must match its summary."""
    settings = {"head": "FedPFT", "head_params": json.dumps({"covariance_type": covariance_type})}
    honest = deploy(node_configs, **settings)[0]
    assert not honest.rejected  # the honest mixtures agree with the summaries (float16 on the wire)

    def tamper(arrays):
        if edit == "covariances":  # covariances x 100, inside float16's range
            covariances = arrays["covariances"].astype(np.float64)
            if covariance_type == "lowrank":  # [W | d]: W x 10, d x 100
                covariances[..., :-1] *= 10.0
                covariances[..., -1] *= 100.0
            else:
                covariances *= 100.0
            return {**arrays, "covariances": covariances.astype(arrays["covariances"].dtype)}
        spread = np.sqrt(np.abs(arrays["covariances"].astype(np.float64)).max())
        return {**arrays, "means": arrays["means"] + 50 * spread}

    report = deploy(node_configs, faults={14: tamper_statistics(tamper)}, **settings)[0]
    assert reason in report.rejected["upload"][14], report.rejected
    assert sorted(report.accuracy) == [11, 12, 13]


def test_a_summary_collapsed_where_its_own_class_means_lie_apart_is_rejected(node_configs):
    """FedPFT: the trace kept, the largest variances crushed, the statistics real.

    The summary's mean and total variance agree with the mixtures, but its
    covariance cannot be narrower than its own class means are apart (the
    reference it would shape moved the honest clients 14.6 points)."""

    def collapse(request, reply):
        if request.metadata.message_type != "query.upload":
            return reply
        own = own_summary(reply)
        values, vectors = np.linalg.eigh(own.covariance)
        trace = values.sum()
        values[-2:] = 1e-9 * values.mean()
        values *= trace / values.sum()
        covariance = (vectors * values) @ vectors.T
        return rewrite_upload(
            request, reply, GaussianSummary(own.n, own.mean, covariance, client=own.client)
        )

    report = deploy(node_configs, faults={14: collapse}, head="FedPFT")[0]
    assert "along its own class means' direction" in report.rejected["upload"][14]
    assert sorted(report.accuracy) == [11, 12, 13]


def test_oversized_local_heads_are_rejected(node_configs):
    """O-FedAvg: coefficients x 1e3 at an honest count would dominate the average."""

    report, _, reference, _ = deploy(
        node_configs, faults={14: scaled_heads(1e3)}, head="O-FedAvg", screen="off"
    )
    why = report.rejected["updates"][14]
    assert re.search(r"local head norm [\d.e+]+ times the clients' median", why), why
    assert sorted(report.accuracy) == [11, 12, 13]
    # its summary does not shape the final head: the reference is built again without it, and
    # the others train again on that one
    assert report.reference_clients == [11, 12, 13]
    assert report.stages.count("updates") == 2
    honest = {k: v for k, v in node_configs.items() if k != 14}
    alone, _, alone_reference, _ = deploy(honest, head="O-FedAvg", num_clients=3, screen="off")
    assert reference == alone_reference  # the same bytes
    assert report.accuracy == alone.accuracy


@pytest.mark.parametrize("name", list(HEADS))
def test_message_bytes_is_flowers_count_and_the_heads_report_it(name, federated):
    """One count of a client's statistics: skslot's ``message_bytes`` = Flower's ``count_bytes``."""
    X, y, client = federated.X, federated.y, federated.client
    head = make_head(name, seed=0).fit(X, y, client=client)
    classes = np.unique(y)
    for k in np.unique(client):
        arrays = (
            make_head(name, seed=0)
            .client_statistics(X[client == k], y[client == k], classes, client_index=int(k))
            .to_arrays()
        )
        flower = messages.arrays_to_record(arrays).count_bytes()
        assert message_bytes(arrays) == flower
        assert head.upload_bytes_[k] == flower


def test_a_summary_that_breaks_the_reference_is_found_and_left_out(node_configs):
    """Defence off, a covariance x1e60 passes every check but overflows the float32 reference:
    the server finds the one client whose removal lets the step succeed, rejects it, goes on."""
    settings = {"head": "O-FedAvg", "defence": False}
    faults = {14: scaled_summary(1e60)}
    report, scores, _, _ = deploy(node_configs, faults=faults, **settings)
    assert "its summary breaks the reference" in report.rejected["upload"][14]
    assert sorted(report.accuracy) == [11, 12, 13] and report.status == "completed"
    honest, expected, _ = deploy(
        {n: c for n, c in node_configs.items() if n != 14}, num_clients=3, **settings
    )[:3]
    np.testing.assert_array_equal(scores.coef, expected.coef)
    assert report.accuracy == honest.accuracy
    # with only two clients nobody can be singled out: the run fails, saying why
    two = {n: c for n, c in node_configs.items() if n in (11, 14)}
    with pytest.raises(ProtocolRunError, match="the reference could not be built"):
        deploy(two, faults=faults, num_clients=2, **settings)


def test_a_node_reads_its_own_table_with_named_columns(node_configs, tmp_path):
    """A CSV (and a Parquet) node, string class names, a split column: the same run as the .npz."""
    pd = pytest.importorskip("pandas", reason="pandas is not installed: pip install '.[tables]'")
    names = ["ant", "bee", "cat", "dog"]
    tables = {}
    for k, (node, nc) in enumerate(node_configs.items()):
        with np.load(nc["data"]) as a:
            X = np.vstack([a["X_train"], a["X_test"]])
            y = np.concatenate([a["y_train"], a["y_test"]])
            part = ["train"] * len(a["y_train"]) + ["test"] * len(a["y_test"])
        frame = pd.DataFrame({f"f{j}": X[:, j] for j in range(M)})
        frame["animal"], frame["part"] = [names[c] for c in y], part
        path = tmp_path / (f"client{k}.parquet" if k == 0 else f"client{k}.csv")
        if k == 0:
            frame.to_parquet(path)
        else:
            frame.to_csv(path, index=False)
        tables[node] = {
            "data": str(path),
            "label": "animal",
            "features": "f",
            "split": "part",
            "client-id": k,
        }
    expected = deploy(node_configs, summary_dtype="float64")
    report, scores, _, _ = deploy(tables, summary_dtype="float64", classes=",".join(names))
    assert report.status == "completed" and not report.rejected
    assert report.accuracy == expected[0].accuracy
    np.testing.assert_array_equal(scores.coef, expected[1].coef)
    unsplit = {key: value for key, value in tables[11].items() if key != "split"}
    bad = {**tables, 11: {**unsplit, "label": "part"}}  # labels "train" and "test"
    report = deploy(bad, summary_dtype="float64", classes=",".join(names))[0]
    assert report.rejected["upload"][11].endswith(
        "labels ['test', 'train'] of "
        f"{tables[11]['data']} are not in the run's class set 'ant,bee,cat,dog': set `classes` "
        "in the run config to every class of the federation (names or integers, comma-separated)"
    )


@pytest.mark.parametrize("head", ["FedCGS", "FedPFT"])
def test_a_private_run_charges_every_message_to_each_client_s_budget(node_configs, head):
    """With epsilon, a statistics head's clients release everything they send under one budget."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    clip = 20.0
    report, _, _, _ = deploy(node_configs, epsilon=8.0, clip_norm=clip, tau=0.4, head=head)
    assert report.status == "completed" and len(report.accuracy) == N_CLIENTS
    for node in node_configs:  # each client sent two messages: its statistics, its counts
        assert set(report.bytes_sent[node]) == {"upload", "evaluation"}
        assert 0.99 * 8.0 < report.privacy_spent[node] <= 8.0
    assert "a private run" in report.screening["skipped"]
    assert "(epsilon = 8, delta = 1e-05) budget" in report.privacy


def test_a_private_node_repeats_its_release_and_never_sends_exact_moments(node_configs):
    """A repeated request (a retry, a restarted node) gets the same release, not fresh noise."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    clip = 20.0
    config = DeploymentConfig(classes=CLASSES, epsilon=8.0, clip_norm=clip, tau=0.4)
    grid = LocalGrid(client_app, node_configs, config.to_run_config())
    request = upload_request(
        11, privacy=(8.0, 1e-5, clip), releases=("statistics", "evaluation"), shares=(0.9, 0.1)
    )
    first, second = (messages.received(grid._deliver(request)) for _ in range(2))
    arrays = [u.arrays(upload_stage.STATISTICS, max_bytes=1 << 20) for u in (first, second)]
    for name in arrays[0]:
        np.testing.assert_array_equal(arrays[0][name], arrays[1][name])
    # the statistics are noisy: the exact mean is not what the server reads
    own = load_client_data(node_configs[11], config)
    sums = arrays[0]["sums"].sum(axis=0)
    assert not np.allclose(sums / own.X_train.shape[0], own.X_train.mean(axis=0), rtol=1e-6)


def test_a_node_enforces_its_own_budget(node_configs):
    """A node whose node config sets a stricter budget than the run's refuses the run."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    strict = {**node_configs, 11: {**node_configs[11], "epsilon": 1.0, "clip-norm": 20.0}}
    report, _, _, _ = deploy(strict, epsilon=8.0, clip_norm=20.0, tau=0.4)
    assert report.rejected["upload"][11].endswith(str(refusal("upload")))
    assert 11 not in report.accuracy and len(report.accuracy) == N_CLIENTS - 1


def test_a_private_node_splits_its_own_table_by_position_alone(tmp_path):
    """Its split's sizes are public: they must not depend on its labels."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = rng.integers(0, 4, size=60)
    config = DeploymentConfig(classes=CLASSES, epsilon=8.0, clip_norm=20.0, tau=0.4)
    splits = []
    for labels in (y, np.where(np.arange(60) == 7, (y + 1) % 4, y)):  # one label changed
        path = tmp_path / f"own{len(splits)}.csv"
        pd.DataFrame({"f0": X[:, 0], "f1": X[:, 1], "f2": X[:, 2], "label": labels}).to_csv(
            path, index=False
        )
        data = load_client_data({"data": str(path), "epsilon": 8.0, "clip-norm": 20.0}, config)
        splits.append(data.X_test)
    np.testing.assert_array_equal(splits[0], splits[1])
    assert splits[0].shape[0] == round(0.3 * 60)


# -- a deviating server against a private node ----------------------------------------------


def _neighbouring_nodes(node_configs, folder):
    """Node 11's rows and a neighbouring copy (its first training row beyond the clip bound
    and relabelled), each a private node of its own."""
    own = dict(np.load(node_configs[11]["data"]))
    other = {k: v.copy() for k, v in own.items()}
    other["X_train"][0] = 100.0 * np.eye(M)[1]
    other["y_train"][0] = (other["y_train"][0] + 1) % 4
    nodes = {}
    for node, arrays in ((11, own), (12, other)):
        path = folder / f"private{node}.npz"
        np.savez(path, **arrays)
        nodes[node] = {"data": str(path), "client-id": 0, "epsilon": 8.0, "clip-norm": 20.0}
    return nodes


def _message(stage, request, node, config):
    from skslot.flower import messages
    from skslot.protocol import ServerWire

    wire = ServerWire(config.make_head(), config.class_set, summary_dtype="float64")
    payload = stage.encode_request(request, wire)
    return Message(messages.content(payload), dst_node_id=node, message_type=stage.message_type)


def test_a_private_node_answers_a_deviating_server_only_with_its_plan(node_configs, tmp_path):
    """Each request kind the protocol defines, crafted, to two private nodes whose rows differ
    in one row: a release of the plan, or the same refusal from both, over Flower."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    from skslot.flower.client_app import STATE
    from skslot.heads import LinearScores
    from skslot.protocol import (
        ClientState,
        EvaluationRequest,
        ScreeningRequest,
        UpdatesRequest,
        ValidationRequest,
    )
    from skslot.protocol.stages import STAGES

    config = DeploymentConfig(classes=CLASSES, epsilon=8.0, clip_norm=20.0, tau=0.4)
    nodes = _neighbouring_nodes(node_configs, tmp_path)
    grid = LocalGrid(client_app, nodes, config.to_run_config())
    budget, releases = config.privacy_budget(), config.protocol().releases
    split = budget.split(releases)
    honest = {"privacy": (8.0, 1e-5, 20.0), "releases": releases}
    honest["shares"] = tuple(split[r] for r in releases)
    C = config.class_set.shape[0]
    zero = LinearScores(config.class_set, np.zeros((C, M)), np.zeros(C))

    def replies(stage, make):
        out = []
        for node in nodes:
            state = grid.contexts[node].state.config_records.get(STATE)
            summary = None if state is None else ClientState.from_config(dict(state)).summary
            reply = grid._deliver(_message(STAGES[stage], make(summary), node, config))
            out.append(reply.error.reason if reply.has_error() else reply)
        return out

    refused = f"RequestRefused: {refusal('upload')}"
    for crafted in (
        {"class_sums": True},
        {"split_seed": 1},
        {"summary_covariance": "within"},
        {"privacy": (8.0, 1e-5, 40.0)},
        {"releases": ("summary", "statistics", "evaluation"), "shares": (0.4, 0.5, 0.1)},
    ):
        request = UploadRequest(0, **{**honest, **crafted})
        assert replies("upload", lambda _, r=request: r) == [refused, refused], crafted
    first = replies("upload", lambda _: UploadRequest(0, **honest))
    assert not any(isinstance(r, str) for r in first)  # the plan's release
    # the exact class sums attack once the plan is announced reads nothing either
    sums = UploadRequest(0, **{**honest, "class_sums": True})
    assert replies("upload", lambda _: sums) == [refused, refused]
    crafted_requests = {
        "updates": lambda s: UpdatesRequest(s, (0.4,), "all"),
        "refit": lambda s: UpdatesRequest(s, (0.4,), "all"),
        "validation": lambda s: ValidationRequest(s, (zero,), (0.4,)),
        "screening": lambda s: ScreeningRequest(
            s, zero, (zero,), np.ones((1, C), bool), 0.4, full_mask=np.ones(C, bool)
        ),
    }
    for stage, make in crafted_requests.items():
        # a refit travels as an updates message: the node answers it by the updates rules
        answered = "updates" if STAGES[stage].message_type == "train.updates" else stage
        expected = f"RequestRefused: {refusal(answered)}"
        assert replies(stage, make) == [expected, expected], stage
    # one test count per run: the same head again repeats it, another head is refused
    once = replies("evaluation", lambda s: EvaluationRequest(s, zero, 0.4))
    again = replies("evaluation", lambda s: EvaluationRequest(s, zero, 0.4))
    count = messages.received  # the released counts, equal on a retry
    for a, b in zip(once, again, strict=True):
        assert count(a).metrics == count(b).metrics
    other = LinearScores(config.class_set, np.zeros((C, M)), np.arange(C, dtype=float))
    expected = f"RequestRefused: {refusal('evaluation')}"
    assert replies("evaluation", lambda s: EvaluationRequest(s, other, 0.4)) == [expected] * 2


def test_a_node_reads_its_table_s_split_column_and_refuses_a_text_cell(tmp_path):
    """A node's own table: its 'split' column splits it without a node-config 'split', and a
    feature column with one text cell is refused, naming the column and the row."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(40, 3)), columns=["f0", "f1", "f2"])
    frame["label"] = np.arange(40) % 4
    frame["split"] = np.where(np.arange(40) < 10, "test", "train")
    path = tmp_path / "shop.csv"
    frame.to_csv(path, index=False)
    config = DeploymentConfig(classes=CLASSES)
    data = load_client_data({"data": str(path)}, config)
    assert data.X_test.shape == (10, 3) and data.X_train.shape == (30, 3)
    np.testing.assert_array_equal(data.X_test, frame[["f0", "f1", "f2"]].to_numpy()[:10])
    frame["f1"] = frame["f1"].astype(object)
    frame.loc[7, "f1"] = "abc"
    frame.to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"feature column 'f1' is not numeric .*row 7 holds 'abc'"):
        load_client_data({"data": str(path)}, config)


def _private_table_node(tmp_path, name, cell):
    """A private node's own CSV with ``cell`` in feature f1 of row 7."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(60, M)), columns=[f"f{j}" for j in range(M)])
    frame["label"] = np.arange(60) % 4
    frame["f1"] = frame["f1"].astype(object)
    frame.loc[7, "f1"] = cell
    path = tmp_path / f"{name}.csv"
    frame.to_csv(path, index=False)
    return {"data": str(path), "client-id": 0, "epsilon": 8.0, "clip-norm": 20.0}


def test_a_private_node_s_own_table_names_no_cell_to_the_server(tmp_path):
    """A missing or infinite value is the node's null row; a text cell (which no table reader
    can take) gets the one refusal, naming neither the file, the column nor the row."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    config = DeploymentConfig(classes=CLASSES, epsilon=8.0, clip_norm=20.0, tau=0.4)
    nodes = {
        11: _private_table_node(tmp_path, "nan", "nan"),
        12: _private_table_node(tmp_path, "inf", "inf"),
        13: _private_table_node(tmp_path, "text", "secret-note"),
        14: _private_table_node(tmp_path, "other", "another-note"),
    }
    grid = LocalGrid(client_app, nodes, config.to_run_config())
    releases = config.protocol().releases
    split = config.privacy_budget().split(releases)
    request = {"privacy": (8.0, 1e-5, 20.0), "releases": releases}
    request["shares"] = tuple(split[r] for r in releases)
    replies = {node: grid._deliver(upload_request(node, **request)) for node in nodes}
    assert not replies[11].has_error() and not replies[12].has_error()
    refused = f"RequestRefused: {refusal('upload')}"
    assert replies[13].error.reason == replies[14].error.reason == refused


def test_a_private_node_keeps_its_run_when_a_step_fails(node_configs, tmp_path, monkeypatch):
    """A step that fails after the plan was admitted answers with the refusal; the node keeps
    its run's seed, so a retry is the same run to its lifetime budget (charged once)."""
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    from skslot.privacy.client import PrivateRelease

    def failing(release, request):
        begin(release, request)  # admitted and charged, then the step fails
        raise RuntimeError("a failure after the charge")

    begin = PrivateRelease.begin
    monkeypatch.setattr(PrivateRelease, "begin", failing)
    budget_file = tmp_path / "budget.json"
    node = {
        **node_configs[11], "epsilon": 8.0, "clip-norm": 20.0,
        "lifetime-epsilon": 40.0, "budget-file": str(budget_file),
    }  # fmt: skip
    config = DeploymentConfig(classes=CLASSES, epsilon=8.0, clip_norm=20.0, tau=0.4)
    grid = LocalGrid(client_app, {11: node}, config.to_run_config())
    releases = config.protocol().releases
    split = config.privacy_budget().split(releases)
    request = upload_request(
        11, privacy=(8.0, 1e-5, 20.0), releases=releases,
        shares=tuple(split[r] for r in releases),
    )  # fmt: skip
    for _ in range(3):
        reply = grid._deliver(request)
        assert reply.error.reason == f"RequestRefused: {refusal('upload')}"
    assert LifetimeBudget(budget_file, epsilon=40.0).spent()[0] == 8.0


def test_a_private_node_s_npz_table_keeps_a_non_finite_value_for_its_null_row(tmp_path):
    pytest.importorskip("dp_accounting", reason="the privacy extra is not installed")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, M))
    X[7, 1] = np.nan
    path = tmp_path / "table.npz"
    np.savez(path, X=X, y=np.arange(60) % 4, domain=np.zeros(60, dtype=int))
    node = {"data": str(path), "label": "y", "client-id": 0, "epsilon": 8.0, "clip-norm": 20.0}
    config = DeploymentConfig(classes=CLASSES, epsilon=8.0, clip_norm=20.0, tau=0.4)
    grid = LocalGrid(client_app, {11: node}, config.to_run_config())
    releases = config.protocol().releases
    split = config.privacy_budget().split(releases)
    request = upload_request(
        11, privacy=(8.0, 1e-5, 20.0), releases=releases, shares=tuple(split[r] for r in releases)
    )
    reply = grid._deliver(request)
    assert not reply.has_error()
    with pytest.raises(ValueError, match="X holds NaN or infinite values"):  # without a budget
        load_client_data({"data": str(path), "label": "y"}, DeploymentConfig(classes=CLASSES))
