"""The Flower apps' message handlers: equality with the in-process pipeline, faults, hostile input.

Messages go through :class:`tests.flower_harness.LocalGrid`, which calls the
real ``ClientApp`` handlers with per-node contexts and lets a test drop or
tamper with a node's replies.  Real processes are in test_flower_deployment.py.
"""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

flwr = pytest.importorskip("flwr", reason="Flower is not installed: pip install '.[flower]'")

from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict  # noqa: E402

from skslot import GaussianSummary, SLOTTransformer  # noqa: E402
from skslot.bench import DEFAULT_HEADS  # noqa: E402
from skslot.datasets import make_federated_classification  # noqa: E402
from skslot.flower import (  # noqa: E402
    DeploymentConfig,
    DeploymentError,
    ProtocolError,
    load_client_data,
    messages,
    run_one_shot,
    write_flower_app,
)
from skslot.flower.client_app import app as client_app  # noqa: E402

from .flower_harness import LocalGrid  # noqa: E402

N_CLIENTS = 4
M = 6


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
    folder = tmp_path_factory.mktemp("clients")
    configs = {}
    for k in range(N_CLIENTS):
        rows = np.flatnonzero(data.client == k)
        train, test = rows[: 2 * len(rows) // 3], rows[2 * len(rows) // 3 :]
        path = folder / f"client{k}.npz"
        np.savez(
            path,
            X_train=data.X[train],
            y_train=data.y[train],
            X_test=data.X[test],
            y_test=data.y[test],
        )
        configs[11 + k] = {"data": str(path), "client-id": k}
    return configs


def deploy(node_configs, faults=None, **settings):
    settings = {"num_clients": N_CLIENTS, "connect_timeout": 0.0, **settings}
    config = DeploymentConfig(**settings)
    grid = LocalGrid(client_app, node_configs, config.to_run_config(), faults)
    return (*run_one_shot(grid, config), grid)


def in_process(node_configs, config: DeploymentConfig):
    """The in-process scikit-learn pipeline on the same clients: SLOT, then the head."""
    parts = [load_client_data(nc, config) for nc in node_configs.values()]
    X = np.vstack([p.X_train for p in parts])
    y = np.concatenate([p.y_train for p in parts])
    client = np.concatenate([np.full(p.y_train.shape, p.client) for p in parts])
    slot = SLOTTransformer(tau=config.tau).fit(X, client=client)
    head = DEFAULT_HEADS[config.head](config.seed).fit(
        slot.transform(X, client=client), y, client=client
    )
    tests = {
        p.client: (slot.transform(p.X_test, client=np.full(p.y_test.shape, p.client)), p.y_test)
        for p in parts
    }
    return slot, head, tests


@pytest.mark.parametrize("head", list(DEFAULT_HEADS))
def test_deployment_equals_in_process_pipeline(node_configs, head):
    report, scores, reference, _ = deploy(node_configs, head=head, summary_dtype="float64")
    slot, expected, tests = in_process(node_configs, DeploymentConfig(head=head))
    received = GaussianSummary.from_bytes(reference)
    np.testing.assert_allclose(received.covariance, slot.reference_.covariance, rtol=1e-12)
    np.testing.assert_allclose(received.mean, slot.reference_.mean, rtol=1e-12)
    expected_scores = expected.linear_scores()
    scale = np.abs(expected_scores.coef).max()
    np.testing.assert_allclose(scores.coef, expected_scores.coef, rtol=1e-7, atol=1e-9 * scale)
    for client, (Z_test, y_test) in tests.items():
        np.testing.assert_array_equal(scores.predict(Z_test), expected.predict(Z_test))
        assert report.accuracy[client] == np.mean(expected.predict(Z_test) == y_test)
    assert report.macro_accuracy == pytest.approx(np.mean(list(report.accuracy.values())))
    assert report.missing == {"summary": [], "statistics": [], "evaluation": []}
    assert all(not r for r in report.rejected.values())


@pytest.mark.parametrize(("dtype", "itemsize"), [("float16", 2), ("float32", 4), ("float64", 8)])
def test_summary_bytes_are_accounted(node_configs, dtype, itemsize):
    report, _, _, _ = deploy(node_configs, summary_dtype=dtype)
    values = M * (M + 1) // 2 + M + 1
    assert report.summary_values == values
    # the header holds n (the "+1") with magic, version, dtype, m and shrinkage
    # in 28 bytes; an int client label takes 8 more; the rest is values at dtype
    for node, size in report.summary_payload_bytes.items():
        assert size == 28 + 8 + (values - 1) * itemsize
        assert report.bytes_received[node]["summary"] >= size
        assert report.bytes_received[node]["statistics"] > 0
        assert report.bytes_sent[node]["statistics"] >= 28 + (values - 1) * itemsize


def drop_at(stage: str):
    message_type = {
        "summary": "query.summary",
        "statistics": "train.statistics",
        "evaluation": "evaluate.head",
    }[stage]

    def fault(request: Message, reply: Message) -> Message | None:
        return None if request.metadata.message_type == message_type else reply

    return fault


@pytest.mark.parametrize("stage", ["summary", "statistics", "evaluation"])
def test_dropout_is_reported_and_the_round_completes(node_configs, stage):
    report, _, _, grid = deploy(node_configs, faults={13: drop_at(stage)}, min_clients=3)
    assert report.missing[stage] == [13]
    assert len(report.accuracy) == N_CLIENTS - 1
    assert 2 not in report.accuracy  # node 13 is client 2
    assert (13, "evaluate.head") not in grid.delivered or stage == "evaluation"


def test_dropout_at_summary_matches_in_process_without_that_client(node_configs):
    report, scores, _, _ = deploy(
        node_configs, faults={12: drop_at("summary")}, summary_dtype="float64"
    )
    rest = {node: nc for node, nc in node_configs.items() if node != 12}
    _, expected, tests = in_process(rest, DeploymentConfig())
    for client, (Z_test, y_test) in tests.items():
        np.testing.assert_array_equal(scores.predict(Z_test), expected.predict(Z_test))
        assert report.accuracy[client] == np.mean(expected.predict(Z_test) == y_test)


def test_below_min_clients_is_a_clear_error_naming_the_missing(node_configs):
    faults = {12: drop_at("summary"), 13: drop_at("summary")}
    with pytest.raises(
        DeploymentError,
        match=r"only 2 client\(s\) completed the summary stage, "
        r"fewer than min_clients = 3 \(node 12 missing; node 13 missing\)",
    ) as info:
        deploy(node_configs, faults=faults, min_clients=3)
    assert info.value.report.missing["summary"] == [12, 13]


def test_a_client_that_fails_is_rejected_with_its_reason(node_configs):
    broken = dict(node_configs)
    broken[14] = {"partition-id": 99}  # embedded Office-Caltech10 has 4 clients
    report, _, _, _ = deploy(broken, min_clients=3)
    assert "partition-id 99 is out of range" in report.rejected["summary"][14]
    assert sorted(report.accuracy) == [0, 1, 2]


def test_private_summaries_travel_through_the_same_protocol(node_configs):
    exact, _, exact_reference, _ = deploy(node_configs, summary_dtype="float64")
    private, _, private_reference, _ = deploy(
        node_configs, summary_dtype="float64", epsilon=8.0, clip_norm=20.0
    )
    assert sorted(private.accuracy) == [0, 1, 2, 3]
    a, b = (GaussianSummary.from_bytes(r) for r in (exact_reference, private_reference))
    assert not np.allclose(a.covariance, b.covariance)  # the noise reached the reference
    assert b.n == a.n and private.summary_values == exact.summary_values


# -- hostile summaries ------------------------------------------------------------------


def _valid(m=M, client=3, n=100, dtype="float64") -> bytes:
    rng = np.random.default_rng(0)
    A = rng.normal(size=(m, m))
    return GaussianSummary(n, rng.normal(size=m), A @ A.T + np.eye(m), client=client).to_bytes(
        dtype
    )


def _patched(payload: bytes, offset: int, raw: bytes) -> bytes:
    return payload[:offset] + raw + payload[offset + len(raw) :]


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
    "duplicate label": (_valid(client=0), "client label 0 is not unique"),
}


def replace_summary(payload):
    def fault(request: Message, reply: Message) -> Message:
        if request.metadata.message_type != "query.summary":
            return reply
        content = RecordDict(
            {
                messages.CONFIG: ConfigRecord({"summary": payload}),
                messages.LABELS: reply.content.array_records[messages.LABELS],
            }
        )
        return Message(content, reply_to=request)

    return fault


@pytest.mark.parametrize("case", list(HOSTILE_SUMMARIES))
def test_hostile_summary_is_rejected_and_the_others_proceed(node_configs, case):
    payload, reason = HOSTILE_SUMMARIES[case]
    report, _, _, _ = deploy(node_configs, faults={14: replace_summary(payload)})
    rejected = report.rejected["summary"]
    if case == "duplicate label":  # both claimants of label 0 are left out
        assert set(rejected) == {11, 14} and reason in rejected[14]
        assert sorted(report.accuracy) == [1, 2]
    else:
        assert list(rejected) == [14] and reason in rejected[14], rejected
        assert sorted(report.accuracy) == [0, 1, 2]


def test_summary_of_the_wrong_type_is_rejected(node_configs):
    def fault(request, reply):
        if request.metadata.message_type != "query.summary":
            return reply
        return Message(
            RecordDict({messages.CONFIG: ConfigRecord({"summary": "text"})}), reply_to=request
        )

    report, _, _, _ = deploy(node_configs, faults={14: fault})
    assert "'summary' has type str" in report.rejected["summary"][14]


# -- hostile statistics -----------------------------------------------------------------


def _npy(array: np.ndarray, *, allow_pickle: bool = False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


def tamper_statistics(edit):
    def fault(request: Message, reply: Message) -> Message:
        if request.metadata.message_type != "train.statistics" or reply.has_error():
            return reply
        record = reply.content.array_records[messages.STATISTICS]
        arrays = {name: array.numpy() for name, array in record.items()}
        raw = edit(arrays)
        record = ArrayRecord(
            {name: a if isinstance(a, Array) else Array(a) for name, a in raw.items()}
        )
        return Message(RecordDict({messages.STATISTICS: record}), reply_to=request)

    return fault


def _with(**changes):
    return lambda arrays: {**arrays, **changes}


def _nan_sums(arrays):
    sums = arrays["sums"].copy()
    sums[0, 0] = np.nan
    return {**arrays, "sums": sums}


def _pickled(arrays):
    data = _npy(np.array([{"payload": 1}], dtype=object), allow_pickle=True)
    return {**arrays, "counts": Array(dtype="object", shape=(1,), stype="numpy.ndarray", data=data)}


def _huge_header(arrays):
    fake = np.lib.format.header_data_from_array_1_0(np.zeros(1))
    fake["shape"] = (10**12,)
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, fake)
    header = buffer.getvalue()
    return {
        **arrays,
        "gram_upper": Array(
            dtype="float64", shape=(10**12,), stype="numpy.ndarray", data=header + bytes(64)
        ),
    }


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
    assert list(report.rejected["statistics"]) == [14]
    assert reason in report.rejected["statistics"][14], report.rejected["statistics"][14]
    assert sorted(report.accuracy) == [0, 1, 2]
    assert (14, "evaluate.head") not in grid.delivered


def test_inconsistent_evaluation_is_rejected(node_configs):
    def fault(request, reply):
        if request.metadata.message_type != "evaluate.head":
            return reply
        return messages.evaluation_reply(request, n_correct=50, n_test=10)

    report, _, _, _ = deploy(node_configs, faults={11: fault})
    assert "evaluation counts are inconsistent (50 of 10)" in report.rejected["evaluation"][11]
    assert sorted(report.accuracy) == [1, 2, 3]


def test_record_to_arrays_checks_the_header_before_allocating():
    huge = _huge_header({})["gram_upper"]
    with pytest.raises(ProtocolError, match="header does not match its size"):
        messages.record_to_arrays(ArrayRecord({"gram_upper": huge}), max_bytes=1 << 20)
    with pytest.raises(ProtocolError, match=r"not a valid \.npy"):
        messages.record_to_arrays(
            ArrayRecord(
                {"x": Array(dtype="float64", shape=(1,), stype="numpy.ndarray", data=b"junk")}
            ),
            max_bytes=1 << 20,
        )


# -- configuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_config", "message"),
    [
        ({"head": "SVM"}, "head must be one of"),
        ({"tau": 1.5}, "tau"),
        ({"alpha": "often"}, "alpha must be a number or 'none'"),
        ({"alpha": 0.0}, "alpha must be > 0"),
        ({"summary-dtype": "int8"}, "summary_dtype"),
        ({"min-clients": 0}, "min_clients"),
        ({"epsilon": "lots"}, "epsilon must be a number or 'none'"),
        ({"epsilon": 0.0}, "epsilon must be > 0"),
    ],
)
def test_bad_run_config_is_a_clear_error(run_config, message):
    with pytest.raises(ValueError, match=message):
        DeploymentConfig.from_run_config(run_config)


def test_run_config_round_trip_and_app_template(tmp_path):
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    config = DeploymentConfig(head="O-FedAvg", tau=0.6, alpha=None, seed=3, output_dir='C:\\x "y"')
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
