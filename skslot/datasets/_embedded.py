"""The data sets shipped in the package, the digits projection, and names for them."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

import numpy as np

from .._validation import check_positive_int
from ._loaders import DomainDataset, load_npz
from ._tables import TABLE_EXTENSIONS, load_table, table_kind

DIGITS_FILE = "digits_effnet_lite0_256.npz"
PROJECTION_SEED = 0


def digits_projection(n_features_in: int = 1280, n_components: int = 256) -> np.ndarray:
    """The fixed, public orthonormal projection of the embedded digits features.

    The ``Q`` factor of the reduced QR decomposition (:func:`numpy.linalg.qr`)
    of an ``(n_features_in, n_components)`` matrix of standard normal draws
    from ``numpy.random.default_rng(0).normal``: a data-independent linear
    layer after the frozen encoder, which every client can apply to its own
    rows.  With the defaults it maps the 1280-d EfficientNet-Lite0 features
    to the 256 dimensions of :func:`load_digits_effnet` (``X @ P``); the
    benchmarks and tests that project the full digits features use this
    matrix.

    Parameters
    ----------
    n_features_in : int, default=1280
    n_components : int, default=256
        At most ``n_features_in``.

    Returns
    -------
    P : ndarray of shape (n_features_in, n_components)
        Orthonormal columns: ``P.T @ P`` is the identity (to rounding).

    Examples
    --------
    >>> import numpy as np
    >>> from skslot.datasets import digits_projection
    >>> P = digits_projection(8, 3)
    >>> P.shape, bool(np.allclose(P.T @ P, np.eye(3)))
    ((8, 3), True)
    """
    n_in = check_positive_int("n_features_in", n_features_in)
    k = check_positive_int("n_components", n_components)
    if k > n_in:
        raise ValueError(f"n_components ({k}) must not exceed n_features_in ({n_in})")
    gaussian = np.random.default_rng(PROJECTION_SEED).normal(size=(n_in, k))
    return np.linalg.qr(gaussian)[0]


def _embedded(file: str, name: str) -> DomainDataset:
    ref = resources.files("skslot.datasets") / "data" / file
    with resources.as_file(ref) as path:
        return load_npz(path, name=name)


def load_office_caltech10() -> DomainDataset:
    """Office-Caltech10 with 800-bin SURF bag-of-visual-words features.

    2533 images of 10 classes from 4 domains (amazon 958, caltech 1123, dslr
    157, webcam 295), as released with Gong et al., "Geodesic flow kernel for
    unsupervised domain adaptation", CVPR 2012.  ``X`` holds raw visual-word
    counts (uint8); row sums differ by domain, a domain shift in itself.
    Embedded in the package (300 KB), so it needs no download.  Provenance:
    docs/data.md.

    Returns
    -------
    DomainDataset

    Examples
    --------
    >>> from skslot.datasets import load_office_caltech10
    >>> data = load_office_caltech10()
    >>> data.X.shape, data.domains.tolist()
    ((2533, 800), ['amazon', 'caltech', 'dslr', 'webcam'])
    """
    return _embedded("office_caltech10_surf.npz", "office_caltech10")


def load_digits_effnet() -> DomainDataset:
    """Three digit domains encoded by a frozen EfficientNet-Lite0, projected to 256-d.

    5597 images of the 10 digits from 3 domains: ``mnist`` (2000 MNIST
    images), ``usps`` (1800 USPS images) and ``sklearn_digits`` (the 1797
    8 x 8 images of :func:`sklearn.datasets.load_digits`).  Each grey image
    was upsampled bilinearly to 112 x 112, replicated to 3 channels,
    normalised with the ImageNet mean and standard deviation and encoded by
    an ImageNet-pretrained EfficientNet-Lite0 (global average pooled, 1280-d);
    the features then went through :func:`digits_projection` (``X @ P``,
    computed in float64) and were stored as float32.  Rows come domain by
    domain; the mnist rows are sorted by class: shuffle before any split of
    your own (:func:`dirichlet_partition` does).  Embedded in the package (5.3 MB);
    ``provenance`` says where every part comes from (also docs/data.md).

    Returns
    -------
    DomainDataset
        ``X`` float32 of shape (5597, 256).

    Examples
    --------
    >>> from skslot.datasets import load_digits_effnet
    >>> data = load_digits_effnet()
    >>> data.X.shape, data.domains.tolist(), data.classes.tolist()[:3]
    ((5597, 256), ['mnist', 'usps', 'sklearn_digits'], ['0', '1', '2'])
    """
    return _embedded(DIGITS_FILE, "digits_effnet_lite0_256")


EMBEDDED_DATASETS: Mapping[str, Callable[[], DomainDataset]] = MappingProxyType(
    {"digits": load_digits_effnet, "office-caltech10": load_office_caltech10}
)
"""The embedded data sets by the names :func:`load_dataset` accepts."""


def load_dataset(
    name_or_path: str | os.PathLike,
    *,
    label: str | None = None,
    client: str | None = None,
    features: str | list | None = None,
) -> DomainDataset:
    """An embedded data set by name, or a data set from a file.

    Parameters
    ----------
    name_or_path : str or path-like
        ``"digits"`` (:func:`load_digits_effnet`), ``"office-caltech10"``
        (:func:`load_office_caltech10`), or a path to an ``.npz``
        (:func:`load_npz`), ``.csv`` or ``.parquet`` file.  A registered name
        wins over a file of that name in the working directory (write
        ``./digits`` for the file).
    label, client, features : optional
        For a ``.csv`` or ``.parquet`` file: its label column, its client
        column and its feature columns, as in :func:`load_table`; the
        clients become the domains.  Not allowed with a name or an ``.npz``.

    Returns
    -------
    DomainDataset

    Raises
    ------
    ValueError
        For a string that is neither a registered name nor a path with a
        known extension, or a file :func:`load_npz` / :func:`load_table`
        refuses.
    FileNotFoundError
        For a path with a known extension where there is no file.

    Examples
    --------
    >>> from skslot.datasets import EMBEDDED_DATASETS, load_dataset
    >>> sorted(EMBEDDED_DATASETS)
    ['digits', 'office-caltech10']
    >>> load_dataset("office-caltech10").X.shape
    (2533, 800)
    """
    options: dict[str, Any] = {"label": label, "client": client, "features": features}
    given = [f"{key}=" for key, value in options.items() if value is not None]
    if isinstance(name_or_path, str) and name_or_path in EMBEDDED_DATASETS:
        if given:
            raise TypeError(f"{' '.join(given)} only apply to a table file, not {name_or_path!r}")
        return EMBEDDED_DATASETS[name_or_path]()
    kind = table_kind(name_or_path)
    if kind is None:
        names = ", ".join(repr(n) for n in EMBEDDED_DATASETS)
        raise ValueError(
            f"unknown data set {os.fspath(name_or_path)!r}: expected one of {names} "
            f"or a path to a {', '.join(TABLE_EXTENSIONS)} file"
        )
    if kind == "npz":
        if given:
            raise TypeError(f"{' '.join(given)} only apply to a table file, not an .npz")
        return load_npz(name_or_path)
    if client is None:
        raise ValueError(
            f"{os.fspath(name_or_path)}: client= must name the client column (its clients "
            "become the data set's domains)"
        )
    return load_table(name_or_path, **options).to_domain_dataset()
