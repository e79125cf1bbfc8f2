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
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping
from numbers import Integral, Real
from typing import Any, ClassVar, Literal

import numpy as np

__all__ = [
    "HasMethods",
    "InstanceOf",
    "Interval",
    "InvalidParameterError",
    "Options",
    "ParameterValidationMixin",
    "validate_parameter_constraints",
]


class InvalidParameterError(ValueError, TypeError):
    """A constructor parameter has a value outside its declared constraints.

    Both a :class:`ValueError` and a :class:`TypeError`, as scikit-learn's own:
    a wrong type and a wrong value are caught alike.
    """


class _Constraint(ABC):
    """A set of values a parameter may take."""

    @abstractmethod
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

    @abstractmethod
    def __str__(self) -> str:
        """The set in words, completing "must be ..."."""


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

    def is_satisfied_by(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, self.type):
            return False
        if not isinstance(value, Integral) and not math.isfinite(value):
            return False
        if self.left is not None:
            if value < self.left or (value == self.left and self.closed in ("right", "neither")):
                return False
        if self.right is not None:  # numbers.Real orders by < and <= only: no "value > right"
            if not value <= self.right:
                return False
            if value == self.right and self.closed in ("left", "neither"):
                return False
        return True

    def __str__(self) -> str:
        integer = self.type is Integral
        lower = self.closed in ("left", "both")
        if integer and self.right is None and self.left in (0, 1) and lower:
            return "a positive integer" if self.left == 1 else "a non-negative integer"
        kind = "an integer" if integer else "a real number"
        if self.left is None and self.right is None:
            return kind
        if self.right is None:
            return f"{kind} {'>=' if lower else '>'} {self.left!r}"
        if self.left is None:
            return f"{kind} {'<=' if self.closed in ('right', 'both') else '<'} {self.right!r}"
        opening = "[" if lower else "("
        closing = "]" if self.closed in ("right", "both") else ")"
        return f"{kind} in {opening}{self.left!r}, {self.right!r}{closing}"


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

    def is_satisfied_by(self, value: Any) -> bool:
        try:
            return value in self._set
        except TypeError:  # unhashable: a list or an array is no option
            return False

    def __str__(self) -> str:
        return f"one of {self.options!r}"


class HasMethods(_Constraint):
    """An object with the given methods, such as an estimator.

    Parameters
    ----------
    methods : str or iterable of str
        The names of the methods the object must have.
    """

    def __init__(self, methods: str | Iterable[str]) -> None:
        self.methods = (methods,) if isinstance(methods, str) else tuple(methods)

    def is_satisfied_by(self, value: Any) -> bool:
        return all(callable(getattr(value, method, None)) for method in self.methods)

    def __str__(self) -> str:
        names = " and ".join(repr(method) for method in self.methods)
        return f"an object with {'a method' if len(self.methods) == 1 else 'methods'} {names}"


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
        self.description = description

    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` is an instance of the type.

        Parameters
        ----------
        value : object

        Returns
        -------
        bool
        """
        return isinstance(value, self.type)

    def __str__(self) -> str:
        if self.description is not None:
            return self.description
        return f"an instance of {self.type.__module__}.{self.type.__qualname__}"


class _Boolean(_Constraint):
    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, (bool, np.bool_))

    def __str__(self) -> str:
        return "a bool"


class _ArrayLike(_Constraint):
    def is_satisfied_by(self, value: Any) -> bool:
        if isinstance(value, (str, bytes, Mapping)):
            return False
        return hasattr(value, "__array__") or hasattr(value, "__len__")

    def __str__(self) -> str:
        return "an array-like"


class _RandomState(_Constraint):
    _seeds = Interval(Integral, 0, 2**32 - 1, closed="both")

    def is_satisfied_by(self, value: Any) -> bool:
        return (
            value is None
            or isinstance(value, np.random.RandomState)
            or self._seeds.is_satisfied_by(value)
        )

    def __str__(self) -> str:
        return "None, an integer in [0, 2**32 - 1] or a numpy.random.RandomState instance"


_NAMED = {"boolean": _Boolean(), "array-like": _ArrayLike(), "random_state": _RandomState()}


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
