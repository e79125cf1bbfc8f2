"""Declared constraints on estimator parameters, checked once per fit.

Each estimator lists the values its constructor parameters may take in a class
attribute ``_parameter_constraints``, a dict from parameter name to a list of
constraints, and calls :meth:`ParameterValidationMixin._validate_params` at the
start of ``fit`` (and ``partial_fit``).  A value is valid when it satisfies at
least one of its parameter's constraints.  A constraint is one of

* an :class:`Interval` of integers or real numbers;
* an :class:`Options` set of allowed values (strings);
* :class:`HasMethods`, for objects such as estimators;
* ``None``: the value ``None``;
* ``"boolean"``: a Python or NumPy bool;
* ``"array-like"``: a list, tuple or array (not a string);
* ``"random_state"``: ``None``, a seed, or a :class:`numpy.random.RandomState`;
* a type, or an :class:`InstanceOf`: an instance of it.

The list may also be the string ``"no_validation"``, for a parameter checked
where it is used.  Constraints that tie several parameters together are
checked by the estimator's own ``_validate_params``, after the declared ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from numbers import Integral, Real
from typing import Any, ClassVar, Literal

import numpy as np


class InvalidParameterError(ValueError, TypeError):
    """A constructor parameter has a value outside its declared constraints.

    Both a :class:`ValueError` and a :class:`TypeError`, as scikit-learn's own:
    a wrong type and a wrong value are caught alike.
    """


class _Constraint:
    """A set of values a parameter may take, described as ``description`` in errors.

    Parameters
    ----------
    description : str
        The set in words, completing "must be ...".
    test : callable, optional
        Whether a value belongs to the set; without it the set is empty
        (the subclasses override :meth:`is_satisfied_by`).
    """

    def __init__(self, description: str, test: Callable[[Any], bool] | None = None) -> None:
        self.description = description
        self.test = test

    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` is in the set.

        Parameters
        ----------
        value : object
            A parameter's value.

        Returns
        -------
        satisfied : bool
            Whether the value satisfies this constraint.
        """
        return self.test is not None and bool(self.test(value))

    def __str__(self) -> str:
        return self.description


class Interval(_Constraint):
    """Finite numbers of one kind between two bounds.

    Parameters
    ----------
    type : {numbers.Integral, numbers.Real}
        The kind of number (``bool`` is neither; NaN and infinities are not
        real numbers here).
    left, right : int, float or None
        The bounds; ``None`` for no bound on that side.
    closed : {"left", "right", "both", "neither"}
        Which bounds belong to the interval.
    """

    def __init__(
        self,
        type: type,
        left: float | None,
        right: float | None,
        *,
        closed: Literal["left", "right", "both", "neither"],
    ) -> None:
        if type not in (Integral, Real):
            raise ValueError(f"type must be numbers.Integral or numbers.Real, got {type!r}")
        if closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"closed must be 'left', 'right', 'both' or 'neither', got {closed!r}")
        self.type = type
        self.left = left
        self.right = right
        self.closed = closed
        self._with_left = closed in ("left", "both")
        self._with_right = closed in ("right", "both")
        super().__init__(self._describe())

    def is_satisfied_by(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, self.type):
            return False
        if not isinstance(value, Integral) and not math.isfinite(value):
            return False
        # numbers.Real orders by < and <= only, so the value is on the left of each test
        left, right = self.left, self.right
        above = left is None or not (value < left if self._with_left else value <= left)
        below = right is None or (value <= right if self._with_right else value < right)
        return bool(above and below)

    def _describe(self) -> str:
        integer, left, right = self.type is Integral, self.left, self.right
        if integer and right is None and left in (0, 1) and self._with_left:
            return "a positive integer" if left == 1 else "a non-negative integer"
        kind = "an integer" if integer else "a real number"
        if left is None and right is None:
            return kind
        if right is None:
            return f"{kind} {'>=' if self._with_left else '>'} {left!r}"
        if left is None:
            return f"{kind} {'<=' if self._with_right else '<'} {right!r}"
        opening = "[" if self._with_left else "("
        closing = "]" if self._with_right else ")"
        return f"{kind} in {opening}{left!r}, {right!r}{closing}"


class Options(_Constraint):
    """One of a fixed set of values.

    Parameters
    ----------
    options : iterable
        The allowed values, in the order the error message lists them.
    """

    def __init__(self, options: Iterable[Hashable]) -> None:
        self.options = tuple(options)
        self._set = frozenset(self.options)
        super().__init__(f"one of {self.options!r}")

    def is_satisfied_by(self, value: Any) -> bool:
        try:
            return value in self._set
        except TypeError:  # unhashable: a list or an array is no option
            return False


class HasMethods(_Constraint):
    """An object with the given methods, such as an estimator.

    Parameters
    ----------
    methods : str or iterable of str
        The names of the methods the object must have.
    """

    def __init__(self, methods: str | Iterable[str]) -> None:
        self.methods = (methods,) if isinstance(methods, str) else tuple(methods)
        names = " and ".join(repr(method) for method in self.methods)
        plural = "a method" if len(self.methods) == 1 else "methods"
        super().__init__(f"an object with {plural} {names}")

    def is_satisfied_by(self, value: Any) -> bool:
        return all(callable(getattr(value, method, None)) for method in self.methods)


class InstanceOf(_Constraint):
    """Instances of ``type``, described as ``description`` in errors.

    Parameters
    ----------
    type : type
    description : str, optional
        What the error message calls such a value (default: the type's path).
    """

    def __init__(self, type: type, description: str | None = None) -> None:
        self.type = type
        if description is None:
            description = f"an instance of {type.__module__}.{type.__qualname__}"
        super().__init__(description)

    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, self.type)


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_array_like(value: Any) -> bool:
    if isinstance(value, (str, bytes, Mapping)):
        return False
    return hasattr(value, "__array__") or hasattr(value, "__len__")


_SEEDS = Interval(Integral, 0, 2**32 - 1, closed="both")


def _is_random_state(value: Any) -> bool:
    return (
        value is None or isinstance(value, np.random.RandomState) or _SEEDS.is_satisfied_by(value)
    )


_NAMED = {
    "boolean": _Constraint("a bool", _is_bool),
    "array-like": _Constraint("an array-like", _is_array_like),
    "random_state": _Constraint(
        "None, an integer in [0, 2**32 - 1] or a numpy.random.RandomState instance",
        _is_random_state,
    ),
}


def _make_constraint(constraint: Any) -> _Constraint:
    """The :class:`_Constraint` that a declared constraint stands for."""
    if isinstance(constraint, _Constraint):
        return constraint
    if constraint is None:
        return InstanceOf(type(None), "None")
    if isinstance(constraint, str) and constraint in _NAMED:
        return _NAMED[constraint]
    if isinstance(constraint, type):
        return InstanceOf(constraint)
    raise ValueError(f"unknown parameter constraint {constraint!r}")


def validate_parameter_constraints(
    constraints: Mapping[str, list | str], params: Mapping[str, Any], caller_name: str
) -> None:
    """Check each parameter against its declared constraints.

    Parameters
    ----------
    constraints : mapping of str to list or ``"no_validation"``
        For each parameter, the constraints of which its value must satisfy
        at least one (see the module docstring); ``"no_validation"`` skips
        the parameter.  Parameters without an entry are not checked.
    params : mapping of str to object
        The parameters' values, as ``get_params(deep=False)`` gives them.
    caller_name : str
        Named in the error message (the estimator's class).

    Raises
    ------
    InvalidParameterError
        For the first parameter whose value satisfies none of its
        constraints, naming the parameter, the values it may take and the
        value given.
    """
    for name, value in params.items():
        declared = constraints.get(name, "no_validation")
        if isinstance(declared, str) and declared == "no_validation":
            continue
        allowed = [_make_constraint(constraint) for constraint in declared]
        if any(constraint.is_satisfied_by(value) for constraint in allowed):
            continue
        words = [str(constraint) for constraint in allowed]
        described = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
        raise InvalidParameterError(f"{caller_name}: {name} must be {described}, got {value!r}")


class ParameterValidationMixin:
    """``_validate_params`` from the declared ``_parameter_constraints``.

    Placed before :class:`sklearn.base.BaseEstimator` among the bases, it
    overrides scikit-learn's method of the same name.  Subclasses that
    constrain several parameters together extend ``_validate_params``,
    calling this one first.
    """

    #: Parameter name to the list of constraints its value must satisfy one of.
    _parameter_constraints: ClassVar[dict[str, list | str]] = {}

    def _validate_params(self) -> None:
        """Check the constructor parameters against ``_parameter_constraints``.

        Raises
        ------
        InvalidParameterError
            If a parameter's value satisfies none of its constraints.
        """
        validate_parameter_constraints(
            self._parameter_constraints,
            self.get_params(deep=False),  # type: ignore[attr-defined]
            caller_name=type(self).__name__,
        )
