"""A client's budget over all its runs: charged once per run, kept on disk, never reset."""

from __future__ import annotations

import json

import pytest

from skslot.privacy import LifetimeBudget, PrivacyBudgetExceeded, run_key


def test_each_run_is_charged_once_and_the_record_outlives_the_object(tmp_path):
    path = tmp_path / "budget.json"
    LifetimeBudget(path, epsilon=10.0, delta=3e-5).charge(run_key(1), 4.0, 1e-5)
    again = LifetimeBudget(path, epsilon=10.0, delta=3e-5)  # a restarted node
    again.charge(run_key(1), 4.0, 1e-5)
    assert again.spent() == pytest.approx((4.0, 1e-5))
    again.charge(run_key(2), 4.0, 1e-5)
    with pytest.raises(PrivacyBudgetExceeded, match="epsilon 2 and delta 1e-05 left after 2"):
        again.charge(run_key(3), 4.0, 1e-5)
    assert again.spent() == pytest.approx((8.0, 2e-5))  # a refused run records nothing
    again.charge(run_key(3), 2.0, 1e-5)  # what is left still serves
    with pytest.raises(PrivacyBudgetExceeded, match="delta"):
        again.charge(run_key(4), 0.0, 1e-5)  # the deltas add up too
    record = json.loads(path.read_text())
    assert set(record["runs"]) == {run_key(1), run_key(2), run_key(3)}
    secret = 987_654_321_123
    LifetimeBudget(tmp_path / "other.json", epsilon=1.0).charge(run_key(secret), 0.5, 0.0)
    assert str(secret) not in (tmp_path / "other.json").read_text()  # a digest, not the seed


def test_a_record_that_cannot_be_read_is_an_error_not_a_fresh_budget(tmp_path):
    path = tmp_path / "budget.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="never reset silently"):
        LifetimeBudget(path, epsilon=10.0).charge(run_key(1), 1.0, 1e-6)
    path.write_text(json.dumps({"runs": {"a": ["x", 1]}}))
    with pytest.raises(ValueError, match="cannot be read"):
        LifetimeBudget(path, epsilon=10.0).spent()


@pytest.mark.parametrize(
    ("epsilon", "delta", "match"),
    [(0.0, 1e-4, "epsilon"), (float("inf"), 1e-4, "epsilon"), (1.0, 1.0, "delta")],
)
def test_bad_lifetime_budgets_are_clear_errors(tmp_path, epsilon, delta, match):
    with pytest.raises(ValueError, match=match):
        LifetimeBudget(tmp_path / "b.json", epsilon=epsilon, delta=delta)
