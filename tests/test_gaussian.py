import ast
import struct
from pathlib import Path

import numpy as np
import pytest

from skslot import GaussianMap, GaussianSummary, InvalidSummaryError, SummaryFormatError
from skslot.maps import bures_wasserstein_distance, rebased_scores
from skslot.wire import WireFormatError, decode_summary, encode_summary, summary_payload_size
from skslot.wire.summary_codec import SummaryFields

from .conftest import random_spd


def make_summary(rng, m=4, n=50, client="a", condition=10.0):
    return GaussianSummary(
        n=n,
        mean=rng.normal(size=m),
        covariance=random_spd(rng, m, condition),
        shrinkage=0.25,
        client=client,
    )


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("client", [None, 7, "site-é"])
def test_wire_round_trip(rng, dtype, client):
    s = make_summary(rng, client=client)
    back = GaussianSummary.from_bytes(s.to_bytes(dtype=dtype))
    rtol = {"float16": 1e-3, "float32": 1e-6, "float64": 0}[dtype]
    np.testing.assert_allclose(back.mean, s.mean, rtol=rtol, atol=rtol * 10)
    np.testing.assert_allclose(back.covariance, s.covariance, rtol=rtol, atol=rtol * 10)
    assert (back.n, back.shrinkage, back.client) == (s.n, s.shrinkage, s.client)


def test_payload_size_matches_paper_figure(rng):
    m = 512
    s = GaussianSummary(n=1000, mean=rng.normal(size=m), covariance=random_spd(rng, m, 5.0))
    payload = s.to_bytes(dtype="float16")
    values = m * (m + 1) // 2 + m
    assert len(payload) == 28 + 2 * values  # header + values, no label
    assert 263_000 < len(payload) < 265_000  # "about 264 KB"


def test_summary_is_immutable_and_copies_input(rng):
    mean = rng.normal(size=3)
    s = GaussianSummary(n=5, mean=mean, covariance=np.eye(3))
    mean[0] = 99.0
    assert s.mean[0] != 99.0
    with pytest.raises(ValueError):
        s.mean[0] = 1.0
    with pytest.raises(AttributeError):
        s.n = 3
    with pytest.raises(AttributeError, match="cannot delete 'mean'"):
        del s.mean
    assert s.mean.shape == (3,)


def test_a_payload_is_sized_only_in_a_form_the_summary_has(rng):
    dense = GaussianSummary(n=5, mean=rng.normal(size=3), covariance=np.eye(3))
    assert summary_payload_size(dense, "float32") == len(encode_summary(dense, "float32"))
    for form in ("low-rank", "factor"):
        with pytest.raises(ValueError, match=f"cannot size a '{form}' form"):
            summary_payload_size(dense, "float32", form=form)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n": 1}, "n must be between 2"),
        ({"n": 2.5}, "n must be an integer"),
        ({"mean": [np.nan, 0.0]}, "NaN"),
        ({"covariance": [[1.0, 0.5], [0.0, 1.0]]}, "not symmetric"),
        ({"covariance": [[1.0, 2.0], [2.0, 1.0]]}, "not positive definite"),
        ({"covariance": np.eye(3)}, "expected \\(2, 2\\)"),
        ({"shrinkage": 1.5}, "shrinkage"),
        ({"client": 1.5}, "client label"),
    ],
)
def test_summary_validation(kwargs, match):
    base = {"n": 10, "mean": np.zeros(2), "covariance": np.eye(2)}
    with pytest.raises(InvalidSummaryError, match=match) as info:
        GaussianSummary(**{**base, **kwargs})
    assert not isinstance(info.value, WireFormatError)  # given values, not a received payload


def test_decoding_errors_are_invalid_summary_errors_too():
    assert issubclass(SummaryFormatError, WireFormatError)
    assert issubclass(SummaryFormatError, InvalidSummaryError)
    assert issubclass(InvalidSummaryError, ValueError)
    with pytest.raises(InvalidSummaryError, match="bad magic"):
        GaussianSummary.from_bytes(b"XXXX" + bytes(24))


def _tamper(payload: bytes, offset: int, fmt: str, value) -> bytes:
    out = bytearray(payload)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


def test_from_bytes_rejects_hostile_payloads(rng):
    s = make_summary(rng, m=3, client=None)
    p = s.to_bytes(dtype="float64")
    m_bytes = 8 * (3 + 6)
    cases = {
        "truncated": p[:-1],
        "shorter than the": p[:10],
        "oversized": p + b"\x00",
        "bad magic": b"XXXX" + p[4:],
        "format version": _tamper(p, 4, "<B", 2),
        "dtype code": _tamper(p, 5, "<B", 9),
        "flags": _tamper(p, 6, "<B", 0x80),
        "outside the accepted range": _tamper(p, 8, "<I", 10**6),
        "n must be between": _tamper(p, 12, "<Q", 1),
        "between 2 and 2\\*\\*53": _tamper(p, 12, "<Q", 2**60),
        "NaN or infinite": p[:-8] + struct.pack("<d", np.nan),
        "not positive definite": p[: len(p) - m_bytes + 24] + struct.pack("<6d", 1, 5, 0, 1, 0, 1),
    }
    for match, payload in cases.items():
        with pytest.raises(SummaryFormatError, match=match):
            GaussianSummary.from_bytes(payload)
    with pytest.raises(SummaryFormatError, match="dimension mismatch"):
        GaussianSummary.from_bytes(p, expected_dimension=4)
    with pytest.raises(SummaryFormatError, match="must be bytes"):
        GaussianSummary.from_bytes("not bytes")


def test_values_the_constructor_rejects_are_a_format_error_of_the_payload(rng):
    """A well-formed payload whose values fail the summary's checks raises SummaryFormatError."""
    s = make_summary(rng, m=2, client=None)
    fields = SummaryFields(s.n, s.mean, s.covariance, 1.5, None)  # shrinkage outside [0, 1]
    with pytest.raises(SummaryFormatError, match="shrinkage must lie in"):
        GaussianSummary.from_bytes(encode_summary(fields, "float64"))
    huge = SummaryFields(s.n, s.mean, 1e120 * np.eye(2), None, None)
    with pytest.raises(SummaryFormatError, match="outside the supported range"):
        GaussianSummary.from_bytes(encode_summary(huge, "float64"))


@pytest.mark.parametrize("client", [None, 3, "site"])
def test_the_codec_works_on_plain_fields(rng, client):
    s = make_summary(rng, m=3, client=client)
    payload = encode_summary(s, "float64")
    fields = decode_summary(payload, expected_dimension=3)
    assert isinstance(fields, SummaryFields)
    assert (fields.n, fields.shrinkage, fields.client) == (s.n, s.shrinkage, s.client)
    np.testing.assert_array_equal(fields.mean, s.mean)
    np.testing.assert_array_equal(fields.covariance, s.covariance)
    assert encode_summary(fields, "float64") == payload  # the fields round-trip as they are
    assert GaussianSummary(*fields).to_bytes("float64") == payload


SKSLOT = Path(__file__).resolve().parents[1] / "skslot"


def _imported_modules(module: str) -> dict[str, bool]:
    """The skslot modules ``module`` imports, each with whether it does so at module level."""
    parts = module.split(".")
    path = SKSLOT.parent.joinpath(*parts)
    is_package = path.is_dir()
    source = (path / "__init__.py") if is_package else path.with_suffix(".py")
    tree = ast.parse(source.read_text())
    top = {id(node) for node in tree.body}
    found: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = parts[: len(parts) - node.level + (1 if is_package else 0)]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            names = [stem] + [f"{stem}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            candidate = SKSLOT.parent.joinpath(*name.split("."))
            if not name.startswith("skslot.") or not (
                candidate.with_suffix(".py").is_file() or candidate.is_dir()
            ):
                continue
            prefixes = name.split(".")  # a submodule's packages are imported first
            for end in range(2, len(prefixes) + 1):
                imported = ".".join(prefixes[:end])
                if not f"{module}.".startswith(f"{imported}."):  # nor its own packages
                    found[imported] = found.get(imported, False) or id(node) in top
    return found


def test_the_summary_layers_import_one_way():
    """gaussian -> wire.summary_codec -> wire._errors -> exceptions; maps -> gaussian; no cycle."""
    gaussian = _imported_modules("skslot.gaussian")
    assert "skslot.maps" not in gaussian  # not even inside a function
    assert gaussian.get("skslot.wire.summary_codec") is True
    assert _imported_modules("skslot.maps").get("skslot.gaussian") is True  # at module level
    wire = ["skslot.wire", *(f"skslot.wire.{p.stem}" for p in (SKSLOT / "wire").glob("[!_]*.py"))]
    for module in [*wire, "skslot.wire._errors", "skslot.exceptions"]:
        imported = _imported_modules(module)
        assert "skslot.gaussian" not in imported and "skslot.maps" not in imported, module


def test_no_import_cycle_through_the_summary():
    """The modules the summary and the maps need, followed through every import, never loop."""

    done: set[str] = set()

    def follow(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, " -> ".join([*path, module])
        if module not in done:
            for child in _imported_modules(module):
                follow(child, (*path, module))
            done.add(module)

    follow("skslot.maps", ())
    assert {"skslot.gaussian", "skslot.wire", "skslot.exceptions"} <= done


def test_to_bytes_refuses_lossy_dtype():
    s = GaussianSummary(n=10, mean=np.array([1e6, 0.0]), covariance=np.eye(2))
    with pytest.raises(SummaryFormatError, match="overflow float16"):
        s.to_bytes(dtype="float16")
    ill = GaussianSummary(
        n=10, mean=np.zeros(2), covariance=np.array([[1.0, 1 - 1e-6], [1 - 1e-6, 1.0]])
    )
    with pytest.raises(SummaryFormatError, match="rounded to float16"):
        ill.to_bytes(dtype="float16")


def test_w2_closed_form_commuting():
    a = GaussianSummary(2, np.zeros(2), np.diag([1.0, 9.0]))
    b = GaussianSummary(2, np.ones(2), np.diag([4.0, 1.0]))
    expected = np.sqrt(2.0 + (1 - 2) ** 2 + (3 - 1) ** 2)
    assert bures_wasserstein_distance(a, b) == pytest.approx(expected, rel=1e-12)
    assert bures_wasserstein_distance(a, a) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("m", [1, 3, 8])
def test_ot_map_pushes_gaussian_exactly(rng, m):
    src, tgt = make_summary(rng, m, condition=100.0), make_summary(rng, m, client="b")
    T = GaussianMap.optimal_transport(src, tgt)
    pushed = T.push(src)
    np.testing.assert_allclose(pushed.mean, tgt.mean, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pushed.covariance, tgt.covariance, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(T.linear, T.linear.T, atol=1e-12)
    assert np.linalg.eigvalsh(T.linear).min() > 0


@pytest.mark.parametrize("tau", [0.0, 0.4, 1.0])
def test_rebased_scores_score_every_row_the_same(rng, tau):
    """Linear scores of rows after one map, carried to another: the same score for every
    row; a low-rank map is carried as its dense form, and a translation moves the
    intercept alone."""
    from skslot.ledoit_wolf import low_rank_summary

    m = 6
    src, tgt, other = (make_summary(rng, m, condition=30.0) for _ in range(3))
    source = GaussianMap.optimal_transport(src, tgt).geodesic(tau)
    target = GaussianMap.optimal_transport(src, other).geodesic(0.5)
    W, b = rng.normal(size=(4, m)), rng.normal(size=4)
    X = rng.normal(size=(50, m))
    W2, b2 = rebased_scores(W, b, source, target)
    np.testing.assert_allclose(target.apply(X) @ W2.T + b2, source.apply(X) @ W.T + b, atol=1e-9)
    few = [low_rank_summary(rng.normal(size=(4, m)) * s) for s in (1.0, 2.0)]
    low = GaussianMap.optimal_transport(*few).geodesic(0.3)
    assert low.form == "low-rank"
    W3, b3 = rebased_scores(W, b, source, low)
    np.testing.assert_allclose(low.apply(X) @ W3.T + b3, source.apply(X) @ W.T + b, atol=1e-8)
    shift = GaussianMap(np.eye(m), rng.normal(size=m))
    W4, b4 = rebased_scores(W, b, GaussianMap.identity(m), shift)
    np.testing.assert_allclose(W4, W, atol=1e-12)
    np.testing.assert_allclose(b4, b - W @ shift.offset, atol=1e-12)


@pytest.mark.parametrize("tau", [0.0, 0.2, 0.4, 0.7, 1.0])
def test_geodesic_contracts_w2_linearly(rng, tau):
    src, tgt = make_summary(rng, 5, condition=50.0), make_summary(rng, 5)
    # squared distances: W2 itself is the root of a difference that cancels
    full2 = bures_wasserstein_distance(src, tgt) ** 2
    partial = GaussianMap.optimal_transport(src, tgt).geodesic(tau).push(src)
    assert bures_wasserstein_distance(partial, tgt) ** 2 == pytest.approx(
        (1 - tau) ** 2 * full2, rel=1e-8, abs=1e-8 * full2
    )
    # and the point tau along the way is at distance tau * W2 from the source
    assert bures_wasserstein_distance(partial, src) ** 2 == pytest.approx(
        tau**2 * full2, rel=1e-8, abs=1e-8 * full2
    )


def test_apply_keeps_float32_and_writes_out(rng):
    T = GaussianMap(random_spd(rng, 4), rng.normal(size=4))
    X = rng.normal(size=(10, 4)).astype(np.float32)
    out = np.empty_like(X)
    res = T.apply(X, out=out, chunk_size=3)
    assert res is out and res.dtype == np.float32
    np.testing.assert_allclose(res, X @ T.linear.T + T.offset, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("client", [None, 7, "amazon", "é" * 10])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_payload_size_is_the_length_of_the_encoding(client, dtype):
    rng = np.random.default_rng(0)
    A = rng.normal(size=(5, 5))
    s = GaussianSummary(12, rng.normal(size=5), A @ A.T + np.eye(5), client=client)
    assert s.payload_size(dtype) == len(s.to_bytes(dtype))
