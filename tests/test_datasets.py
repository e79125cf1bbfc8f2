import numpy as np
import pytest

from skslot.datasets import dirichlet_partition, load_npz, load_office_caltech10


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
    with pytest.raises(ValueError, match="pickle"):
        load_npz(path)
    np.savez(path, X=np.ones((3, 2)), y=np.array([0, 1, 0]), domain=np.array([0, 0, 1]))
    data = load_npz(path)
    assert list(data.domains) == ["domain0", "domain1"] and data.name == "bad"


def test_synthetic_generator_ground_truth_and_slot_removes_the_shift():
    from skslot import GaussianSummary, SLOTTransformer
    from skslot.datasets import make_federated_classification
    from skslot.gaussian import bures_wasserstein_distance

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

    aligned = SLOTTransformer(tau=1.0).fit_transform(data.X, client=data.client)
    assert spread(aligned) < 0.05 * spread(data.X)
