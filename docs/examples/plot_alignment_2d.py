"""
Client features before and after alignment
==========================================

Four clients (the four domains of the embedded Office-Caltech10 features,
with the paper's Dirichlet label skew, alpha = 0.1) each summarise their
features; :class:`~skslot.SLOTTransformer` moves every client's features a
fraction ``tau`` of the way to the shared reference Gaussian. The plot shows
the first two principal components of the pooled training rows, coloured by
client, at ``tau`` = 0 (no alignment), 0.4 and 1. The ellipses are each
client's Gaussian summary projected on the same plane: they move together as
``tau`` grows, and ``W2`` to the reference shrinks by exactly ``1 - tau``.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.decomposition import PCA

from skslot import BuresBarycenter, SLOTTransformer
from skslot.datasets import dirichlet_partition, load_office_caltech10
from skslot.maps import bures_wasserstein_distance

data = load_office_caltech10()
X = np.sqrt(data.X.astype(np.float64))  # variance-stabilised visual-word counts
part = dirichlet_partition(data.y, data.domain, alpha=0.1, random_state=0)
X_train, client = X[part.train_index], part.train_client
# the paper's geodesic: mean and covariance moved by the same tau, every client alike; the
# summaries held as dense m x m covariances (each client holds fewer rows than the 800
# features, where the default keeps them in factor form), to draw their ellipses
slot = SLOTTransformer(
    mean_tau=None, client_tau="uniform", barycenter=BuresBarycenter(form="dense")
)
slot.fit(X_train, client=client)
pca = PCA(n_components=2).fit(X_train)

fig, axes = plt.subplots(1, 3, figsize=(12, 4), sharex=True, sharey=True)
for ax, tau in zip(axes, [0.0, 0.4, 1.0], strict=True):
    slot.set_params(tau=tau)
    Z = pca.transform(slot.transform(X_train, client=client))
    distances = []
    for k in np.unique(client):
        rows = client == k
        ax.scatter(*Z[rows].T, s=4, alpha=0.4, label=str(data.domains[part.client_domain[k]]))
        pushed = slot.maps_[k].geodesic(tau).push(slot.summaries_[k])
        distances.append(bures_wasserstein_distance(pushed, slot.reference_))
        # the client's Gaussian, projected: mean and 2-sigma ellipse
        P = pca.components_
        mean = P @ (pushed.mean - pca.mean_)
        values, vectors = np.linalg.eigh(P @ pushed.covariance @ P.T)
        angle = np.linspace(0, 2 * np.pi, 100)
        ellipse = vectors @ (2 * np.sqrt(values)[:, None] * [np.cos(angle), np.sin(angle)])
        ax.plot(*(mean[:, None] + ellipse), lw=1.5, color=ax.collections[-1].get_facecolor()[0])
    ax.set_title(f"tau = {tau}: mean W2 to reference {np.mean(distances):.2f}")
    ax.set_xlabel("PC 1")
axes[0].set_ylabel("PC 2")
axes[0].legend(markerscale=3, fontsize=8)
fig.tight_layout()
plt.show()
