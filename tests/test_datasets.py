import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from skslot.datasets import (
    EMBEDDED_DATASETS,
    digits_projection,
    dirichlet_partition,
    load_dataset,
    load_digits_effnet,
    load_npz,
    load_office_caltech10,
)

from .conftest import PAPER, shared_npz


def toy(n_domains=3, n_classes=4, per=40):
    y = np.tile(np.repeat(np.arange(n_classes), per), n_domains)
    domain = np.repeat(np.arange(n_domains), n_classes * per)
    return y, domain


def test_no_label_skew_keeps_a_stratified_70_30_split():
    y, domain = toy()
    part = dirichlet_partition(y, domain, alpha=None, random_state=0)
    assert part.n_clients == 3
    assert len(part.train_index) + len(part.test_index) == len(y)
    assert len(np.intersect1d(part.train_index, part.test_index)) == 0
    np.testing.assert_array_equal(part.class_counts, np.full((3, 4), 28))  # 70% of 40
    np.testing.assert_array_equal(domain[part.test_index], part.client_domain[part.test_client])
    np.testing.assert_array_equal(domain[part.train_index], part.train_client)


def test_dirichlet_rule_keeps_floor_of_own_rows():
    y, domain = toy(per=100)
    part = dirichlet_partition(y, domain, alpha=0.1, random_state=1)
    rng = np.random.default_rng(1)
    for _ in range(3 * 4):  # replay the permutations drawn in the split
        rng.permutation(100)  # test/train split of the (domain, class) rows
        rng.permutation(70)  # order of the client's own training rows
    for c in range(4):  # then one Dirichlet draw per class, in class order
        p = rng.dirichlet(np.full(3, 0.1))
        np.testing.assert_array_equal(part.class_counts[:, c], np.floor(p * 70).astype(int))
    for k in range(3):
        rows = part.train_index[part.train_client == k]
        np.testing.assert_array_equal(np.bincount(y[rows], minlength=4), part.class_counts[k])
        assert np.all(domain[rows] == k)  # a client keeps only its own rows
    # test sets stay full
    assert len(part.test_index) == 3 * 4 * 30


def test_skew_grows_as_alpha_shrinks():
    y, domain = toy(per=200)

    def skew(alpha):
        counts = [
            dirichlet_partition(y, domain, alpha=alpha, random_state=s).class_counts
            for s in range(10)
        ]
        return np.mean([np.mean(c.max(0) / np.maximum(c.sum(0), 1)) for c in counts])

    assert skew(0.01) > skew(1.0) > skew(100.0)


def test_several_clients_per_domain_and_empty_clients_reported():
    y, domain = toy(per=10)
    part = dirichlet_partition(y, domain, alpha=0.01, clients_per_domain=3, random_state=0)
    assert part.n_clients == 9
    np.testing.assert_array_equal(part.client_domain, np.repeat([0, 1, 2], 3))
    assert part.empty_clients  # with alpha=0.01 most of 9 clients keep nothing
    for k in part.empty_clients:
        assert part.class_counts[k].sum() < 2
    assert len(np.unique(part.test_client)) == 9


def test_partition_is_deterministic_and_validates():
    y, domain = toy()
    a = dirichlet_partition(y, domain, random_state=5)
    b = dirichlet_partition(y, domain, random_state=5)
    np.testing.assert_array_equal(a.train_index, b.train_index)
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_partition(y, domain, alpha=0.0)
    with pytest.raises(ValueError, match="same length"):
        dirichlet_partition(y, domain[:-1])


def test_embedded_office_caltech10():
    data = load_office_caltech10()
    assert data.X.shape == (2533, 800) and data.X.dtype == np.uint8
    np.testing.assert_array_equal(np.bincount(data.domain), [958, 1123, 157, 295])
    assert len(data.classes) == 10 and data.name == "office_caltech10"


def test_load_npz_validates(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, X=np.zeros((3, 2)), y=np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="missing key"):
        load_npz(path)
    np.savez(path, X=np.zeros((3, 2)), y=np.zeros(2, dtype=int), domain=np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="rows"):
        load_npz(path)
    np.savez(
        path,
        X=np.zeros((3, 2)),
        y=np.zeros(3, dtype=int),
        domain=np.zeros(3, dtype=int),
        domains=np.array([{"evil": 1}], dtype=object),
    )
    with pytest.raises(ValueError) as error:
        load_npz(path)
    assert str(error.value) == (
        f"{path}: array 'domains' holds Python objects (dtype object), which are never "
        "unpickled; store numbers or fixed-width strings"
    )  # never numpy's advice to load it with allow_pickle
    np.savez(path, X=np.ones((3, 2)), y=np.array([0, 1, 0]), domain=np.array([0, 0, 1]))
    data = load_npz(path)
    assert list(data.domains) == ["domain0", "domain1"] and data.name == "bad"
    assert data.provenance == {}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a zip", "not a NumPy .npz archive (pickled data)"),
        (b"", "not a NumPy .npz archive (No data left in file)"),
        (b"PK\x03\x04broken", "not a NumPy .npz archive (File is not a zip file)"),
    ],
)
def test_load_npz_refuses_other_files_in_one_line(tmp_path, content, message):
    path = tmp_path / "bad.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError) as error:
        load_npz(path)
    assert str(error.value) == f"{path}: {message}"


def test_load_npz_refuses_a_single_array_non_finite_rows_and_short_names(tmp_path):
    path = tmp_path / "one.npz"
    with open(path, "wb") as f:
        np.save(f, np.zeros(3))
    with pytest.raises(ValueError, match=r"one.npz: not an .npz archive but a single .npy array$"):
        load_npz(path)
    X = np.ones((3, 2))
    X[2, 1] = np.nan
    path = tmp_path / "nan.npz"
    np.savez(path, X=X, y=np.array([0, 1, 0]), domain=np.array([0, 0, 1]))
    with pytest.raises(
        ValueError, match=r"X holds NaN or infinite values \(first at row 2, column 1\)"
    ):
        load_npz(path)
    np.savez(path, X=np.ones((0, 2)), y=np.zeros(0, dtype=int), domain=np.zeros(0, dtype=int))
    with pytest.raises(ValueError, match="X has no rows"):
        load_npz(path)
    np.savez(path, X=np.ones((3, 2)), y=np.array([0, 1, 2]), domain=np.zeros(3, int), classes=["a"])
    with pytest.raises(ValueError, match="classes must be 1-D with a name for each index up to 2"):
        load_npz(path)
    with pytest.raises(FileNotFoundError, match=r"absent\.npz: no such file"):
        load_npz(tmp_path / "absent.npz")


# -- the embedded digits features ----------------------------------------------------------


#: The projection as tests/test_bench.py, benchmarks/attacks.py and benchmarks/finer_partitions.py
#: wrote it before skslot.datasets.digits_projection: the committed results used this matrix.
def _projection_as_written_in_the_benchmarks(n_features_in=1280):
    P, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(n_features_in, 256)))
    return P


def test_digits_projection_is_the_benchmarks_matrix_bit_for_bit():
    P = digits_projection()
    assert P.shape == (1280, 256) and P.dtype == np.float64
    np.testing.assert_array_equal(P, _projection_as_written_in_the_benchmarks())
    np.testing.assert_allclose(P.T @ P, np.eye(256), atol=1e-12)
    np.testing.assert_array_equal(digits_projection(), P)  # deterministic
    with pytest.raises(ValueError, match=r"n_components \(9\) must not exceed n_features_in \(8\)"):
        digits_projection(8, 9)
    with pytest.raises(ValueError, match="n_components must be a positive integer"):
        digits_projection(8, 0)


def test_embedded_digits():
    data = load_digits_effnet()
    assert data.X.shape == (5597, 256) and data.X.dtype == np.float32
    assert data.name == "digits_effnet_lite0_256"
    assert data.domains.tolist() == ["mnist", "usps", "sklearn_digits"]
    assert data.classes.tolist() == [str(c) for c in range(10)]
    np.testing.assert_array_equal(np.bincount(data.domain), [2000, 1800, 1797])
    assert len(np.unique(data.y)) == 10 and np.isfinite(data.X).all()
    assert np.all(np.diff(data.domain) >= 0)  # domain by domain
    assert np.all(np.diff(data.y[data.domain == 0]) >= 0)  # mnist sorted by class
    for d in range(3):
        assert len(np.unique(data.y[data.domain == d])) == 10  # every class in every domain
    assert "default_rng(0)" in data.provenance["projection"]
    assert {"source", "source_sha256", "encoder", "domains"} <= set(data.provenance)


def test_embedded_digits_are_the_projected_shared_features_rounded_to_float32(tmp_path):
    path = shared_npz("digits_effnet_lite0.npz")
    full = load_npz(path)
    embedded = load_digits_effnet()
    projected = full.X.astype(np.float64) @ _projection_as_written_in_the_benchmarks()
    # within one float32 rounding of the float64 projection the benchmarks computed
    error = np.abs(embedded.X.astype(np.float64) - projected)
    assert np.all(error <= np.spacing(np.abs(projected).astype(np.float32)))
    for key in ("y", "domain", "domains", "classes"):
        np.testing.assert_array_equal(getattr(embedded, key), getattr(full, key))
    assert embedded.provenance["source_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "build_embedded.py"
    spec = importlib.util.spec_from_file_location("build_embedded", script)
    build_embedded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_embedded)
    rebuilt = load_npz(build_embedded.build_digits(path, tmp_path / "digits.npz"))
    assert rebuilt.X.dtype == np.float32 and rebuilt.provenance == embedded.provenance
    np.testing.assert_allclose(rebuilt.X, embedded.X, rtol=0, atol=np.spacing(np.float32(8)))


def test_data_sets_by_name(tmp_path):
    assert list(EMBEDDED_DATASETS) == ["digits", "office-caltech10"]
    assert load_dataset("digits").name == "digits_effnet_lite0_256"
    assert load_dataset("office-caltech10").name == "office_caltech10"
    path = tmp_path / "mine.npz"
    np.savez(path, X=np.ones((3, 2)), y=np.array([0, 1, 0]), domain=np.array([0, 0, 1]))
    assert load_dataset(path).name == "mine" and load_dataset(str(path)).X.shape == (3, 2)
    with pytest.raises(ValueError) as error:
        load_dataset("mnist")
    assert str(error.value) == (
        "unknown data set 'mnist': expected one of 'digits', 'office-caltech10' "
        "or a path to a .npz, .csv, .parquet file"
    )
    with pytest.raises(FileNotFoundError, match=r"nowhere\.csv: no such file"):
        load_dataset(tmp_path / "nowhere.csv", label="y", client="c")
    with pytest.raises(TypeError, match="label= only apply to a table file, not 'digits'"):
        load_dataset("digits", label="y")
    with pytest.raises(TypeError, match=r"client= only apply to a table file, not an \.npz"):
        load_dataset(path, client="c")


def test_synthetic_generator_ground_truth_and_slot_removes_the_shift():
    from skslot import GaussianSummary, SLOTTransformer
    from skslot.datasets import make_federated_classification
    from skslot.maps import bures_wasserstein_distance

    data = make_federated_classification(
        n_clients=3,
        n_samples_per_client=4000,
        n_features=5,
        alpha=None,
        domain_shift=1.5,
        random_state=0,
    )
    for k, (D, t) in enumerate(data.distortions):
        rows = data.client == k
        latent_mean = data.class_means[data.y[rows]].mean(axis=0)
        np.testing.assert_allclose(data.X[rows].mean(0), D @ latent_mean + t, atol=0.15)
        assert np.allclose(D, D.T) and np.linalg.eigvalsh(D).min() > 0  # SPD distortion

    def spread(Z):
        s = [
            GaussianSummary(
                int((data.client == k).sum()),
                Z[data.client == k].mean(0),
                np.cov(Z[data.client == k].T),
            )
            for k in range(3)
        ]
        return max(bures_wasserstein_distance(a, b) for a in s for b in s)

    aligned = SLOTTransformer(tau=1.0, **PAPER).fit_transform(data.X, client=data.client)
    assert spread(aligned) < 0.05 * spread(data.X)
