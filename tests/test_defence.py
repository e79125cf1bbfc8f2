"""The defence on real data: honest clients cross no bound; the issue's attacks are undone.

Both use the real feature sets (``../shared/data``; Office-Caltech10 is
embedded): the unit behaviour of each check is in the doctests of
``skslot.defence`` and the fault tests of ``tests/test_flower.py``.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from skslot import GaussianSummaryEstimator
from skslot.datasets import dirichlet_partition, load_office_caltech10
from skslot.defence import (
    capped_counts,
    clipped_norms,
    implausible_counts,
    implausible_norms,
    implausible_summaries,
    norm_ratios,
    ratios_to_median,
    summary_deviations,
)
from skslot.flower import DeploymentConfig
from skslot.heads import OneShotFedAvgClassifier

from .conftest import few_rows_per_client, shared_npz

ROOT = Path(__file__).resolve().parents[1]


@few_rows_per_client  # 800 features: most clients hold fewer rows
@pytest.mark.parametrize("per_domain", [1, 5])
@pytest.mark.parametrize("alpha", [0.1, 0.05, 0.01, None])
def test_honest_clients_of_office_caltech10_cross_no_default_bound(alpha, per_domain):
    """With no attacker the defence must change nothing: no rejection, no cap."""
    data = load_office_caltech10()
    bounds = DeploymentConfig()
    for seed in range(3):
        part = dirichlet_partition(
            data.y, data.domain, alpha=alpha, clients_per_domain=per_domain, random_state=seed
        )
        keep = ~np.isin(part.train_client, part.empty_clients)
        rows, client = part.train_index[keep], part.train_client[keep]
        fitted = GaussianSummaryEstimator().fit(data.X[rows].astype(float), client=client)
        summaries = list(fitted.summaries_.values())
        counts = [s.n for s in summaries]
        assert implausible_summaries(summaries) == {}
        assert implausible_counts(counts) == {}
        np.testing.assert_array_equal(capped_counts(counts), counts)
        variance, offset = summary_deviations(summaries)
        # a margin of 5x to every bound (measured: docs/results/honest_bounds.md)
        assert np.max(np.maximum(variance, 1 / variance)) < bounds.max_variance_ratio / 5
        assert np.max(offset) < bounds.max_mean_offset / 4
        assert np.max(ratios_to_median(counts)) < bounds.max_weight_ratio


@pytest.mark.parametrize("alpha", [0.1, 0.01])
def test_honest_local_heads_of_office_caltech10_cross_no_norm_bound(alpha):
    """Heads over the held classes: a client of one class sends a zero head, out of the median."""
    data = load_office_caltech10()
    bound = DeploymentConfig().max_norm_ratio
    classes = np.unique(data.y)
    for seed in range(2):
        part = dirichlet_partition(data.y, data.domain, alpha=alpha, random_state=seed)
        keep = ~np.isin(part.train_client, part.empty_clients)
        rows, client = part.train_index[keep], part.train_client[keep]
        X, y = data.X[rows].astype(float), data.y[rows]
        norms = [
            OneShotFedAvgClassifier()
            .client_statistics(X[client == k], y[client == k], classes)
            .norm()
            for k in np.unique(client)
        ]
        assert np.max(norm_ratios(norms)) < bound / 2
    assert implausible_norms([0.0, 0.0, 0.0, 1.0, 1.2, 0.9]) == {}  # zero heads move nothing
    assert list(implausible_norms([0.0, 0.0, 0.0, 1.0, 12.0, 0.9])) == [4]


def test_clipped_norms_bring_each_norm_to_the_clip_and_leave_the_rest():
    """Factors in closed form: the median of the non-zero norms times the clip over the norm
    above it, 1 below; zero heads take no part; fewer than three non-zero norms: no clip."""
    norms = np.array([0.0, 1.0, 1.2, 0.8, 6.0])  # median of the non-zero norms: 1.1
    factors = clipped_norms(norms, clip_norm_ratio=1.0)
    np.testing.assert_allclose(factors, [1.0, 1.0, 1.1 / 1.2, 1.0, 1.1 / 6.0])
    np.testing.assert_allclose(np.maximum(norms * factors, 0.0).max(), 1.1)
    np.testing.assert_allclose(clipped_norms(norms, clip_norm_ratio=2.0), [1, 1, 1, 1, 2.2 / 6])
    np.testing.assert_array_equal(clipped_norms(norms, clip_norm_ratio=np.inf), np.ones(5))
    np.testing.assert_array_equal(clipped_norms([0.0, 5.0, 50.0]), np.ones(3))


def _attacks_module():
    spec = importlib.util.spec_from_file_location("attacks", ROOT / "benchmarks" / "attacks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["attacks"] = module
    spec.loader.exec_module(module)
    return module


def test_the_defence_undoes_an_inflated_count_with_flipped_labels_on_real_digits():
    """benchmarks/attacks.py, one seed: rejected, then exactly the three honest clients' run."""
    shared_npz("digits_effnet_lite0.npz")
    attacks = _attacks_module()
    by_name = {a.name: a for a in attacks.ATTACKS}
    attack = by_name["n x1e6 and flipped labels"]
    absent = by_name["none, attacker absent (K = 4)"]
    defended = attacks.one_run(attack, "FedCGS", "bounds", 0)
    undefended = attacks.one_run(attack, "FedCGS", "off", 0)
    alone = attacks.one_run(absent, "FedCGS", "bounds", 0)
    assert defended["fate"] == "rejected at upload"
    assert defended["macro"] == alone["macro"]
    assert undefended["fate"] == "accepted"
    assert undefended["macro"] < alone["macro"] - 0.2
