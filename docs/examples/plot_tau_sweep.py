"""
Accuracy against tau, per head
==============================

The paper's protocol on the embedded Office-Caltech10 features (one client
per domain, Dirichlet label skew alpha = 0.1, 70/30 split per domain, each
client's test set aligned with its own map), for the three one-shot heads.
``tau = 0`` is the head without SLOT-Align. Two seeds keep the build fast;
``skslot bench`` runs the full grid (docs/results.md).
"""

import matplotlib.pyplot as plt
from skslot_bench import PREPROCESS, BenchmarkConfig, evaluate_run, summarise

from skslot.datasets import load_office_caltech10

data = load_office_caltech10()
config = BenchmarkConfig(
    alphas=(0.1,), taus=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0), seeds=(0, 1), auto=False
)
X = PREPROCESS[config.preprocess](data.X)
records = [r for seed in config.seeds for r in evaluate_run(data, X, 0.1, seed, config)]
summary = summarise(records, config.main_tau)

fig, ax = plt.subplots(figsize=(6, 4))
for row in summary:
    taus = sorted(row["tau_sweep"])
    ax.plot(taus, [row["tau_sweep"][t] for t in taus], marker="o", label=row["head"])
ax.set_xlabel("tau (fraction of the transport applied)")
ax.set_ylabel("macro accuracy over domains (%)")
ax.set_title("Office-Caltech10, alpha = 0.1")
ax.legend()
fig.tight_layout()
plt.show()
