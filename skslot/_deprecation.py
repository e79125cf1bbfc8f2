"""Names that moved or were renamed: a module ``__getattr__`` that still serves them."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["moved_names"]


def moved_names(module: str, moved: Mapping[str, tuple[str, str]]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` serving old names with a :class:`DeprecationWarning`.

    The new module is imported only when an old name is looked up, so the old
    module does not import the new one (no import cycle).

    Parameters
    ----------
    module : str
        The module the old names were in.
    moved : mapping of str to (str, str)
        Each old name's new module and new name.

    Returns
    -------
    callable
        The module's ``__getattr__``.
    """

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        path, new = moved[name]
        warnings.warn(
            f"importing {name} from {module} is deprecated; import {new} from {path}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(path), new)

    return __getattr__
