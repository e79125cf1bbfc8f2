"""Multi-domain feature sets in ``.npz`` archives, read without unpickling anything."""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field

import numpy as np

REQUIRED_KEYS = ("X", "y", "domain")


@dataclass(frozen=True, eq=False)
class DomainDataset:
    """Features with class and domain labels.

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
        Class index, 0-based.
    domain : ndarray of shape (n_samples,)
        Domain index, 0-based (one client per domain in the paper's protocol).
    domains : ndarray of str
        Domain names, indexed by ``domain``.
    classes : ndarray of str
        Class names, indexed by ``y``.
    name : str
    provenance : dict
        Where the data come from (source, encoder, licences, ...), from the
        archive's ``provenance`` entry; empty when it has none.
    """

    X: np.ndarray
    y: np.ndarray
    domain: np.ndarray
    domains: np.ndarray
    classes: np.ndarray
    name: str
    provenance: dict = field(default_factory=dict)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (library messages can run on)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def open_npz(path: str | os.PathLike) -> np.lib.npyio.NpzFile:
    """``np.load(path, allow_pickle=False)`` with one-line errors naming the file."""
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        # numpy's advice for pickled files (allow_pickle=...) is never the right one here
        reason = "pickled data" if "pickle" in str(exc) else first_line(exc)
        raise ValueError(f"{path}: not a NumPy .npz archive ({reason})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: not an .npz archive but a single .npy array")
    return archive


def read_array(archive: np.lib.npyio.NpzFile, key: str, path: str | os.PathLike) -> np.ndarray:
    """One array of an open archive; object arrays are refused, never unpickled."""
    try:
        return archive[key]
    except ValueError as exc:
        if "allow_pickle" not in str(exc):
            raise ValueError(f"{path}: array {key!r} is unreadable ({first_line(exc)})") from None
        raise ValueError(
            f"{path}: array {key!r} holds Python objects (dtype object), which are never "
            "unpickled; store numbers or fixed-width strings"
        ) from None


def _provenance(archive: np.lib.npyio.NpzFile, path: str | os.PathLike) -> dict:
    if "provenance" not in archive.files:
        return {}
    text = read_array(archive, "provenance", path)
    try:
        provenance = json.loads(str(text)) if text.ndim == 0 else None
    except ValueError:
        provenance = None
    if not isinstance(provenance, dict):
        raise ValueError(f"{path}: 'provenance' must be a JSON object stored as a 0-d string")
    return provenance


def load_npz(
    path: str | os.PathLike, *, name: str | None = None, finite: bool = True
) -> DomainDataset:
    """Load an ``.npz`` with keys ``X``, ``y``, ``domain`` (and optionally
    ``domains``, ``classes`` naming them, and ``provenance``, a JSON object
    as a 0-d string), without unpickling anything.

    Parameters
    ----------
    path : str or path-like
    name : str, optional
        The data set's name; default: the file name without its extension.
    finite : bool, default=True
        Refuse NaN or infinite values of ``X``; ``False`` keeps them (a private
        client's null rows, which no error may name).

    Returns
    -------
    DomainDataset
        ``X`` keeps the archive's dtype.

    Raises
    ------
    ValueError
        If the file is not an ``.npz`` archive, holds object arrays, a key is
        missing, the arrays disagree in length or type, or ``X`` has no rows
        or non-finite values; the message is one line naming the file.

    Examples
    --------
    >>> import numpy as np, os, tempfile
    >>> from skslot.datasets import load_npz
    >>> path = os.path.join(tempfile.mkdtemp(), "toy.npz")
    >>> np.savez(path, X=np.eye(3), y=np.array([0, 1, 1]), domain=np.array([0, 0, 1]))
    >>> data = load_npz(path)
    >>> data.name, data.domains.tolist(), data.classes.tolist()
    ('toy', ['domain0', 'domain1'], ['0', '1'])
    """
    with open_npz(path) as archive:
        missing = [k for k in REQUIRED_KEYS if k not in archive.files]
        if missing:
            raise ValueError(f"{path}: missing key(s) {missing}; expected X, y and domain")
        X, y, domain = (read_array(archive, k, path) for k in REQUIRED_KEYS)
        domains, classes = (
            read_array(archive, k, path) if k in archive.files else None
            for k in ("domains", "classes")
        )
        provenance = _provenance(archive, path)
    if X.ndim != 2 or y.ndim != 1 or domain.ndim != 1:
        raise ValueError(f"{path}: X must be 2-D and y, domain 1-D")
    if not (X.shape[0] == y.shape[0] == domain.shape[0]):
        raise ValueError(
            f"{path}: X has {X.shape[0]} rows, y {y.shape[0]}, domain {domain.shape[0]}"
        )
    if X.shape[0] == 0:
        raise ValueError(f"{path}: X has no rows")
    for key, arr in (("y", y), ("domain", domain)):
        if not np.issubdtype(arr.dtype, np.integer) or arr.min(initial=0) < 0:
            raise ValueError(f"{path}: {key} must hold non-negative integer indices")
    if not np.issubdtype(X.dtype, np.number) or np.issubdtype(X.dtype, np.complexfloating):
        raise ValueError(f"{path}: X must be real numbers, got {X.dtype}")
    if finite and np.issubdtype(X.dtype, np.inexact) and not np.isfinite(X).all():
        row, col = np.argwhere(~np.isfinite(X))[0]
        raise ValueError(
            f"{path}: X holds NaN or infinite values (first at row {row}, column {col})"
        )
    if domains is None:
        domains = np.array([f"domain{d}" for d in range(domain.max() + 1)])
    if classes is None:
        classes = np.array([str(c) for c in range(y.max() + 1)])
    for key, names, index in (("domains", domains, domain), ("classes", classes, y)):
        if names.ndim != 1 or names.shape[0] <= index.max():
            raise ValueError(
                f"{path}: {key} must be 1-D with a name for each index up to {index.max()}"
            )
    name = name or os.path.splitext(os.path.basename(path))[0]
    return DomainDataset(X, y, domain, domains, classes, name, provenance)
