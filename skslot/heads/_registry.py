"""One registry of the one-shot heads: a head from its name and parameters.

The command line, the benchmark and the Flower apps build heads here, so a
deployment can run any head with any of its parameters, including a user's
own :class:`~skslot.heads.OneShotHead` subclass named by its import path.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from ._base import OneShotHead
from .fedavg import OneShotFedAvgClassifier
from .fedcgs import FedCGSClassifier
from .fedpft import FedPFTClassifier

#: The built-in heads by the names the paper and the command line use.
HEADS: dict[str, type[OneShotHead]] = {
    "O-FedAvg": OneShotFedAvgClassifier,
    "FedCGS": FedCGSClassifier,
    "FedPFT": FedPFTClassifier,
}


def head_class(name: str) -> type[OneShotHead]:
    """The head class called ``name``: a built-in name, or ``"package.module:Class"``.

    A dotted ``"package.module.Class"`` works too.  The class must derive from
    :class:`~skslot.heads.OneShotHead`.

    Parameters
    ----------
    name : str
        ``"O-FedAvg"``, ``"FedCGS"``, ``"FedPFT"``, or a head class by import path.

    Returns
    -------
    type
        The :class:`~skslot.heads.OneShotHead` subclass.

    Raises
    ------
    ValueError
        If the name is neither a built-in head nor an importable head class.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"a head name must be a non-empty string, got {name!r}")
    if name in HEADS:
        return HEADS[name]
    module_name, sep, attribute = name.partition(":")
    if not sep:
        module_name, _, attribute = name.rpartition(".")
    if not module_name or not attribute:
        raise ValueError(
            f"unknown head {name!r}: choose from {list(HEADS)}, or name a head class by its "
            "import path ('package.module:Class')"
        )
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"head {name!r} cannot be imported: {exc}") from None
    if not (inspect.isclass(cls) and issubclass(cls, OneShotHead)):
        raise ValueError(f"head {name!r} is not a skslot.heads.OneShotHead subclass")
    return cls


def make_head(
    name: str, params: Mapping[str, Any] | None = None, *, seed: int | None = None
) -> OneShotHead:
    """Construct a head by name with its parameters, checked before any work.

    Parameters
    ----------
    name : str
        ``"O-FedAvg"``, ``"FedCGS"``, ``"FedPFT"``, or a user's head class by
        import path (see :func:`head_class`).
    params : mapping of str to value, optional
        Constructor parameters of the head; each must be one of its
        ``get_params()`` names.  The values are checked as the head's ``fit``
        checks them, here, before any client is contacted.
    seed : int, optional
        The run's seed, used as ``random_state`` for a head that has one and
        whose ``params`` do not set it.

    Returns
    -------
    OneShotHead

    Raises
    ------
    ValueError
        For an unknown head or parameter (naming the allowed ones), or a bad value.

    Examples
    --------
    >>> from skslot.heads import make_head
    >>> make_head("FedPFT", {"covariance_type": "full"}, seed=0)
    FedPFTClassifier(covariance_type='full', random_state=0)
    >>> make_head("FedCGS", {"ridge": 1.0})
    Traceback (most recent call last):
    ...
    ValueError: FedCGSClassifier has no parameter 'ridge'; its parameters are covariance, ...
    """
    cls = head_class(name)
    params = dict(params or {})
    allowed = sorted(cls().get_params(deep=False))
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"{cls.__name__} has no parameter {', '.join(map(repr, unknown))}; its parameters "
            f"are {', '.join(allowed)}"
        )
    if seed is not None and "random_state" in allowed and "random_state" not in params:
        params["random_state"] = seed
    head = cls(**params)
    head._validate_params()
    return head
