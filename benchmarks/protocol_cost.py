"""What each configuration of a deployment exchanges, and what the screening adds.

The embedded Office-Caltech10 features (800 dimensions, ten classes,
Dirichlet alpha 0.1) in two federations: four clients, one per domain (seed
0), and eight, two per domain (seed 28, the first seed whose partition leaves
every client 6 training rows or more), through skslot's real
ServerApp and ClientApp in one process (``tests/flower_harness.py``'s
``LocalGrid``: the messages of a deployment, without a network), summaries in
float32: for each head, a fixed ``tau`` (the deployment's defaults) and
``tau = "auto"``, with the screening (the default wherever the defence is on)
and without (``screen = "off"``): the stages, the megabytes each client sends
and receives (as Flower counts message contents; mean over the clients), the
CPU seconds of the whole run in one process (the server and the clients
together), and the macro accuracy the clients report.  At eight clients only
the deployment's fixed ``tau`` runs.

Run: python benchmarks/protocol_cost.py > docs/results/protocol_cost.md
(about 4 minutes on 2 cores).
"""

from __future__ import annotations

import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from threadpoolctl import threadpool_limits

from skslot.defaults import TAU
from skslot.flower import DeploymentConfig, run_one_shot
from skslot.flower import client_app as client_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.flower_harness import LocalGrid

HEADS = ("FedCGS", "FedPFT", "O-FedAvg")
TAUS = (TAU, "auto")  # every class served (label-mix = "federation"): this study's case
SCREENS = ("auto", "off")
#: (clients per domain, seed, the taus run): four clients and eight.
FEDERATIONS = ((1, 0, TAUS), (2, 28, (TAU,)))


def one_run(head: str, tau, screen: str, per_domain: int = 1, seed: int = 0) -> dict:
    logging.getLogger("flwr").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    clients = 4 * per_domain  # Office-Caltech10 has four domains
    with threadpool_limits(1):
        config = DeploymentConfig(
            head=head, tau=tau, screen=screen, dataset="office-caltech10", alpha=0.1, seed=seed,
            clients_per_domain=per_domain, label_mix="federation",
            num_clients=clients, connect_timeout=0.0, reply_timeout=1.0,
        )  # fmt: skip
        nodes = {11 + k: {"partition-id": k} for k in range(clients)}
        grid = LocalGrid(client_module.app, nodes, config.to_run_config())
        start = time.process_time()
        report, _, _ = run_one_shot(grid, config)
        seconds = time.process_time() - start  # the server and, in process, the clients

    def megabytes(table: dict) -> float:
        return float(np.mean([sum(stages.values()) for stages in table.values()])) / 1e6

    return {
        "clients": clients,
        "head": head,
        "tau": tau,
        "screen": screen,
        "stages": ", ".join(report.stages),
        "up": megabytes(report.bytes_received),
        "down": megabytes(report.bytes_sent),
        "cpu": seconds,
        "accuracy": 100 * report.macro_accuracy,
        "chosen": report.tau,
        "final": report.final_head,
    }


def main() -> None:
    jobs = [
        (h, t, s, per_domain, seed)
        for per_domain, seed, taus in FEDERATIONS
        for h in HEADS
        for t in taus
        for s in SCREENS
    ]
    start = time.perf_counter()
    records = Parallel(n_jobs=2)(delayed(one_run)(*job) for job in jobs)
    wall = time.perf_counter() - start
    print("# What a deployment exchanges, with and without the screening\n")
    print(
        "`python benchmarks/protocol_cost.py`: the embedded Office-Caltech10 (800 dimensions, "
        "alpha 0.1; four clients, one per domain, seed 0; eight, two per domain, seed 28, the "
        "first seed leaving every client 6 training rows or more) through the real ServerApp "
        "and ClientApp in one process, summaries in float32; per client, megabytes sent (up) "
        "and received (down) as Flower counts message contents, mean over the clients; CPU "
        "seconds of the whole run in one process (the server and every client, one BLAS "
        "thread); macro "
        "accuracy (%) as the clients report it; what the final head was fitted on.  "
        f"{wall:.0f} s wall on 2 workers.\n"
    )
    print(
        "| clients | head | tau | screening | stages | up, MB | down, MB | CPU s | accuracy "
        "| final head |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in records:
        tau = f"{r['tau']:g}" if r["tau"] != "auto" else f"auto (chose {r['chosen']:g})"
        print(
            f"| {r['clients']} | {r['head']} | {tau} "
            f"| {'default' if r['screen'] == 'auto' else 'off'} "
            f"| {r['stages']} | {r['up']:.2f} | {r['down']:.2f} | {r['cpu']:.1f} "
            f"| {r['accuracy']:.1f} | {r['final']} |"
        )


if __name__ == "__main__":
    main()
