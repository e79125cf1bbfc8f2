"""
Communication cost against the feature dimension
================================================

Bytes one client sends, measured on real payloads: its Gaussian summary in
skslot's wire format (``m (m + 1) / 2 + m + 1`` values) at float16, float32
and float64, and the statistics of each head for 10 classes (FedCGS: class
sums and the Gram matrix; O-FedAvg: a linear head; FedPFT: one Gaussian per
class in float16, with the default low-rank-plus-diagonal covariance of rank
32 or a full one), counted as Flower counts the arrays they send
(:func:`skslot.heads.message_bytes`). The summary is sent once, before the
head's round.
"""

import matplotlib.pyplot as plt
import numpy as np

from skslot import GaussianSummaryEstimator
from skslot.heads import (
    FedCGSClassifier,
    FedPFTClassifier,
    OneShotFedAvgClassifier,
    message_bytes,
)

rng = np.random.default_rng(0)
dims = [32, 64, 128, 256, 512, 768]
n, C = 600, 10
names = ["summary float16", "summary float32", "summary float64", "FedCGS", "O-FedAvg",
         "FedPFT, rank 32 (default)", "FedPFT, full"]
sizes = {name: [] for name in names}
for m in dims:
    X = rng.normal(size=(n, m))
    y = np.arange(n) % C
    summary = GaussianSummaryEstimator().fit(X).summaries_[None]
    for dtype in ["float16", "float32", "float64"]:
        sizes[f"summary {dtype}"].append(len(summary.to_bytes(dtype)))
    classes = np.arange(C)
    heads = {"FedCGS": FedCGSClassifier(),
             "O-FedAvg": OneShotFedAvgClassifier(max_iter=5),
             "FedPFT, rank 32 (default)": FedPFTClassifier(),
             "FedPFT, full": FedPFTClassifier(covariance_type="full")}
    for name, head in heads.items():
        arrays = head.client_statistics(X, y, classes).to_arrays()
        sizes[name].append(message_bytes(arrays))

fig, ax = plt.subplots(figsize=(6, 4))
for name, values in sizes.items():
    ax.loglog(dims, np.array(values) / 1e6, marker="o", label=name,
              ls="-" if name.startswith("summary") else "--")
ax.set_xticks(dims, labels=[str(m) for m in dims])
ax.minorticks_off()
ax.set_xlabel("feature dimension m")
ax.set_ylabel("MB per client")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()
