"""Build the embedded digits feature set from the full 1280-d features (run by hand).

Reads ``digits_effnet_lite0.npz`` (5597 x 1280 float32 EfficientNet-Lite0
features of MNIST, USPS and scikit-learn's digits; ``../shared/data`` in the
development checkout), projects it with :func:`skslot.datasets.digits_projection`
(``X @ P`` in float64), rounds to float32 and writes
``skslot/datasets/data/digits_effnet_lite0_256.npz`` with
``np.savez_compressed``: ``X``, ``y``, ``domain``, ``domains``, ``classes``
and ``provenance`` (a JSON object as a 0-d string).  Nothing here runs at
import.

Run: python benchmarks/build_embedded.py [SOURCE [DESTINATION]]
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from skslot.datasets import digits_projection, load_npz
from skslot.datasets._embedded import DIGITS_FILE, PROJECTION_SEED

REPOSITORY = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = REPOSITORY.parent / "shared" / "data" / "digits_effnet_lite0.npz"
DEFAULT_DESTINATION = REPOSITORY / "skslot" / "datasets" / "data" / DIGITS_FILE
N_COMPONENTS = 256
DTYPE = np.float32

PROVENANCE = {
    "description": (
        "Three digit domains encoded by a frozen ImageNet-pretrained EfficientNet-Lite0 "
        "(global average pooled, 1280-d), then projected to 256-d"
    ),
    "domains": (
        "mnist: 2000 MNIST images (16 x 16 version of domain-adaptation benchmarks; LeCun, "
        "Bottou, Bengio and Haffner 1998; CC BY-SA 3.0); usps: 1800 USPS images (16 x 16; "
        "Hull 1994); sklearn_digits: the 1797 8 x 8 images of sklearn.datasets.load_digits "
        "(UCI Optical Recognition of Handwritten Digits, Alpaydin and Kaynak 1998; CC BY 4.0)"
    ),
    "encoder": (
        "EfficientNet-Lite0 with ImageNet weights (Apache-2.0, TensorFlow / timm); grey images "
        "upsampled bilinearly to 112 x 112, replicated to 3 channels, normalised with the "
        "ImageNet mean and std"
    ),
    "projection": (
        f"X @ P in float64, rounded to float32; P = numpy.linalg.qr(numpy.random.default_rng("
        f"{PROJECTION_SEED}).normal(size=(1280, {N_COMPONENTS})))[0], "
        "skslot.datasets.digits_projection()"
    ),
    "order": (
        "domains in the order mnist, usps, sklearn_digits; mnist rows sorted by class, usps and "
        "sklearn_digits rows in their source order"
    ),
    "built_by": "python benchmarks/build_embedded.py",
}


def build_digits(
    source: str | Path = DEFAULT_SOURCE, destination: str | Path = DEFAULT_DESTINATION
) -> Path:
    """Write the embedded digits archive from the full features; returns its path."""
    source, destination = Path(source), Path(destination)
    data = load_npz(source)
    P = digits_projection(data.X.shape[1], N_COMPONENTS)
    X = (data.X.astype(np.float64) @ P).astype(DTYPE)
    provenance = {
        **PROVENANCE,
        "source": source.name,
        "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(),
    }
    destination.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        destination,
        X=X,
        y=data.y,
        domain=data.domain,
        domains=data.domains,
        classes=data.classes,
        provenance=np.array(json.dumps(provenance, sort_keys=True)),
    )
    return destination


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    path = build_digits(*args[:2])
    print(f"{path}: {path.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
