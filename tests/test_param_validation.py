"""Declared parameter constraints: the constraint types, and every estimator's declaration."""

from numbers import Integral, Real

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from skslot import (
    BuresBarycenter,
    ClientStandardScaler,
    GaussianSummaryEstimator,
    SLOTTransformer,
)
from skslot._param_validation import (
    HasMethods,
    Interval,
    InvalidParameterError,
    Options,
    ParameterValidationMixin,
    validate_parameter_constraints,
)
from skslot.heads import FedCGSClassifier, FedPFTClassifier, OneShotFedAvgClassifier

ESTIMATORS = [
    GaussianSummaryEstimator(),
    BuresBarycenter(),
    SLOTTransformer(),
    ClientStandardScaler(),
    FedCGSClassifier(),
    FedPFTClassifier(random_state=0),
    OneShotFedAvgClassifier(),
]


def _check(constraints, value):
    validate_parameter_constraints({"p": constraints}, {"p": value}, "Caller")


CONSTRAINTS = {
    "a positive integer": (
        Interval(Integral, 1, None, closed="left"),
        [1, np.int64(7)],
        [0, 1.0, True, "2"],
    ),
    "a non-negative integer": (
        Interval(Integral, 0, None, closed="left"),
        [0, 3],
        [-1, 0.5, False],
    ),
    "an integer": (Interval(Integral, None, None, closed="neither"), [-3, 0], [1.5, None]),
    "a real number in [0.0, 1.0]": (
        Interval(Real, 0.0, 1.0, closed="both"),
        [0, 0.5, 1.0, np.float32(0.25)],
        [-0.1, 1.5, np.nan, np.inf, "0.4", True],
    ),
    "a real number in (0.0, 1.0)": (
        Interval(Real, 0.0, 1.0, closed="neither"),
        [0.5],
        [0.0, 1.0],
    ),
    "a real number >= 0.0": (
        Interval(Real, 0.0, None, closed="left"),
        [0.0, 1e300],
        [-1e-9, np.inf],
    ),
    "a real number > 0.0": (Interval(Real, 0.0, None, closed="neither"), [1e-300], [0.0]),
    "a real number <= 2.0": (Interval(Real, None, 2.0, closed="right"), [-5.0, 2.0], [2.5]),
    "one of ('total', 'within')": (
        Options(("total", "within")),
        ["total", np.str_("within")],
        ["pooled", ["total"], np.zeros(2), None],
    ),
    "an object with a method 'fit'": (
        HasMethods("fit"),
        [LogisticRegression()],
        [object(), "fit"],
    ),
    "an object with methods 'fit' and 'predict'": (
        HasMethods(["fit", "predict"]),
        [LogisticRegression()],
        [object()],
    ),
    "None": (None, [None], [0, "None"]),
    "a bool": ("boolean", [True, np.bool_(False)], [0, 1, "True"]),
    "an array-like": ("array-like", [[1, 2], (1,), np.ones(3)], ["ab", 3, {"a": 1}]),
    "None, an integer in [0, 2**32 - 1] or a numpy.random.RandomState instance": (
        "random_state",
        [None, 0, 2**32 - 1, np.random.RandomState(0)],
        [-1, 2**32, 1.5, np.random.default_rng(0)],
    ),
    "an instance of builtins.str": (str, ["x"], [1]),
}


@pytest.mark.parametrize("words", CONSTRAINTS)
def test_constraints_accept_their_values_and_name_them_in_the_error(words):
    constraint, good, bad = CONSTRAINTS[words]
    for value in good:
        _check([constraint], value)
    for value in bad:
        with pytest.raises(InvalidParameterError) as info:
            _check([constraint], value)
        assert str(info.value) == f"Caller: p must be {words}, got {value!r}"


def test_a_value_needs_to_satisfy_one_of_several_constraints():
    constraints = [Interval(Real, 0.0, 1.0, closed="both"), Options(("auto",)), None]
    for value in (0.3, "auto", None):
        _check(constraints, value)
    with pytest.raises(
        InvalidParameterError,
        match=r"^Caller: p must be a real number in \[0.0, 1.0\], one of \('auto',\) or None, "
        "got 'often'$",
    ):
        _check(constraints, "often")


def test_the_error_is_a_value_error_and_a_type_error():
    for error in (ValueError, TypeError):
        with pytest.raises(error):
            _check([Interval(Integral, 1, None, closed="left")], "3")


def test_no_validation_and_undeclared_parameters_are_not_checked():
    validate_parameter_constraints({"p": "no_validation"}, {"p": object(), "q": object()}, "C")


def test_an_unknown_constraint_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown parameter constraint 'integer'"):
        _check(["integer"], 1)
    with pytest.raises(ValueError, match=r"type must be numbers\.Integral or numbers\.Real"):
        Interval(float, 0, 1, closed="both")
    with pytest.raises(ValueError, match="closed must be"):
        Interval(Real, 0, 1, closed="open")


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda est: type(est).__name__)
def test_every_parameter_is_declared(estimator):
    assert isinstance(estimator, ParameterValidationMixin)
    assert set(estimator._parameter_constraints) == set(estimator.get_params(deep=False))
    estimator._validate_params()  # the defaults are valid


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = np.arange(60) % 2
    client = np.repeat([0, 1], 30)
    return X, y, client


def _declared(estimator):
    return [
        name
        for name, constraints in estimator._parameter_constraints.items()
        if constraints != "no_validation"
    ]


@pytest.mark.parametrize(
    ("estimator", "name"),
    [(est, name) for est in ESTIMATORS for name in _declared(est)],
    ids=lambda x: x if isinstance(x, str) else type(x).__name__,
)
def test_fit_rejects_an_invalid_value_of_each_parameter_before_any_work(rows, estimator, name):
    X, y, client = rows
    bad = clone(estimator).set_params(**{name: object()})  # satisfies no constraint
    with pytest.raises(InvalidParameterError, match=f"^{type(estimator).__name__}: {name} must be"):
        bad.fit(X, y, client=client)
    assert not hasattr(bad, "n_features_in_")


@pytest.mark.parametrize(
    ("estimator", "params", "message"),
    [
        (GaussianSummaryEstimator(), {"clip_norm": 1.0}, "clip_norm is only used with epsilon"),
        (GaussianSummaryEstimator(), {"epsilon": 1.0}, "epsilon needs clip_norm"),
        (
            GaussianSummaryEstimator(),
            {"epsilon": 1.0, "clip_norm": 1.0, "covariance": "within"},
            "a summary of the 'within' covariance has no calibrated differentially private release",
        ),
        (
            GaussianSummaryEstimator(),
            {"epsilon": 1.0, "clip_norm": 1.0, "delta": 1.0},
            r"with epsilon, delta must be in \(0, 1\), got 1.0",
        ),
        (FedPFTClassifier(), {"n_components": 2}, "covariance_type='lowrank' fits one component"),
    ],
)
def test_parameters_constrained_together(rows, estimator, params, message):
    X, y, client = rows
    with pytest.raises(InvalidParameterError, match=message):
        clone(estimator).set_params(**params).fit(X, y, client=client)


def test_a_head_validates_its_parameters_at_every_entry_point(rows):
    X, y, _ = rows
    head = FedCGSClassifier(priors="flat")
    message = "FedCGSClassifier: priors must be one of"
    with pytest.raises(InvalidParameterError, match=message):
        head.client_statistics(X, y, np.array([0, 1]))
    stats = FedCGSClassifier().client_statistics(X, y, np.array([0, 1]))
    with pytest.raises(InvalidParameterError, match=message):
        head.fit_from_statistics([stats], np.array([0, 1]))
    with pytest.raises(InvalidParameterError, match=message):
        head.decode_statistics(stats.to_arrays(), classes=np.array([0, 1]), n_features=3)


def test_the_transformer_validates_at_fit_and_from_reference(rows):
    X, y, client = rows
    slot = SLOTTransformer(tau=0.5).fit(X, y, client=client)
    summary = slot.summaries_[0]
    with pytest.raises(InvalidParameterError, match="SLOTTransformer: tau must be"):
        SLOTTransformer.from_reference(slot.reference_, summary, tau=1.5)
    with pytest.raises(InvalidParameterError, match="SLOTTransformer: barycenter must be"):
        SLOTTransformer.from_reference(slot.reference_, summary, barycenter="newton")
    with pytest.raises(TypeError, match="unexpected keyword argument 'solver'"):
        SLOTTransformer(solver="newton")  # the barycenter's own: BuresBarycenter(solver=...)
    party = SLOTTransformer.from_reference(
        slot.reference_, summary, tau=0.5, tau_scales={0: slot.tau_scales_[0]}
    )
    np.testing.assert_allclose(
        party.transform(X[client == 0]),
        slot.transform(X[client == 0], client=0),
        rtol=1e-7,
        atol=1e-8,
    )
