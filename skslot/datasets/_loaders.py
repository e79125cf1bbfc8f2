"""Multi-domain feature sets: the embedded Office-Caltech10 and any ``.npz``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources

import numpy as np

__all__ = ["DomainDataset", "load_npz", "load_office_caltech10"]

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
    """

    X: np.ndarray
    y: np.ndarray
    domain: np.ndarray
    domains: np.ndarray
    classes: np.ndarray
    name: str


def load_npz(path: str | os.PathLike, *, name: str | None = None) -> DomainDataset:
    """Load an ``.npz`` with keys ``X``, ``y``, ``domain`` (and optionally
    ``domains``, ``classes`` naming them), without unpickling anything.

    Raises
    ------
    ValueError
        If a key is missing or the arrays disagree in length or type.
    """
    with np.load(path, allow_pickle=False) as archive:
        missing = [k for k in REQUIRED_KEYS if k not in archive.files]
        if missing:
            raise ValueError(f"{path}: missing key(s) {missing}; expected X, y and domain")
        X, y, domain = (archive[k] for k in REQUIRED_KEYS)
        domains = archive["domains"] if "domains" in archive.files else None
        classes = archive["classes"] if "classes" in archive.files else None
    if X.ndim != 2 or y.ndim != 1 or domain.ndim != 1:
        raise ValueError(f"{path}: X must be 2-D and y, domain 1-D")
    if not (X.shape[0] == y.shape[0] == domain.shape[0]):
        raise ValueError(
            f"{path}: X has {X.shape[0]} rows, y {y.shape[0]}, domain {domain.shape[0]}"
        )
    for key, arr in (("y", y), ("domain", domain)):
        if not np.issubdtype(arr.dtype, np.integer) or arr.min(initial=0) < 0:
            raise ValueError(f"{path}: {key} must hold non-negative integer indices")
    if not np.issubdtype(X.dtype, np.number):
        raise ValueError(f"{path}: X must be numeric, got {X.dtype}")
    if domains is None:
        domains = np.array([f"domain{d}" for d in range(domain.max() + 1)])
    if classes is None:
        classes = np.array([str(c) for c in range(y.max() + 1)])
    return DomainDataset(
        X, y, domain, domains, classes, name or os.path.splitext(os.path.basename(path))[0]
    )


def load_office_caltech10() -> DomainDataset:
    """Office-Caltech10 with 800-bin SURF bag-of-visual-words features.

    2533 images of 10 classes from 4 domains (amazon 958, caltech 1123, dslr
    157, webcam 295), as released with Gong et al., "Geodesic flow kernel for
    unsupervised domain adaptation", CVPR 2012.  ``X`` holds raw visual-word
    counts (uint8); row sums differ by domain, a domain shift in itself.
    Embedded in the package (300 KB), so it needs no download.

    Examples
    --------
    >>> from skslot.datasets import load_office_caltech10
    >>> data = load_office_caltech10()
    >>> data.X.shape, data.domains.tolist()
    ((2533, 800), ['amazon', 'caltech', 'dslr', 'webcam'])
    """
    ref = resources.files("skslot.datasets") / "data" / "office_caltech10_surf.npz"
    with resources.as_file(ref) as path:
        return load_npz(path, name="office_caltech10")
