"""The defence and its screening without an attacker: what they cost honest federations.

For the data sets of docs/results.md with four clients or more (the screening
needs four: Office-Caltech10 with one client per domain, and, two clients per
domain, Office-Caltech10 and the embedded digits features: eight and six
clients), the paper's partition (Dirichlet alpha 0.1, 0.05, 0.01 and no label
skew), each head and seed, the real protocol
(:class:`skslot.protocol.OneShotProtocol`, in process: the same driver as the
Flower apps) runs in both cases (:data:`skslot_bench.CASES`: each client's
test rows its domain's whole test split, the deployment's settings for it,
``label_mix="federation"``; or drawn from it with the client's training
class proportions, :func:`skslot_bench.own_mix_rows`, the deployment's
defaults), in two configurations each, the deployment's settings of the case
and ``tau = "auto"``, two ways each:

* ``none``: no defence;
* ``default``: the defence's bounds and its screening, as a deployment runs
  by default (the clients hold out validation rows at a fixed tau too, and
  the final head is the screened one, fitted on the fitting rows).

(The digits with one client per domain are three clients: the screening is
skipped there, and the defence's bounds alone change no run:
tests/test_defence.py.)  Accuracy is each client's test accuracy with the
final head, averaged over *all* clients, excluded ones included (an honest
client wrongly excluded loses its say in the head, and its accuracy counts
here).  The table gives the macro accuracy of each way, the largest change
against ``none`` over the seeds, how many honest clients the screening
excluded, and the CPU time the default costs (its bytes:
docs/results/protocol_cost.md).  The per-run records
are written to docs/results/screening.csv.

Run one part at a time, one case and one seed (about 30 minutes on 2 cores
each; naming heads, those heads alone), then the report from every part
recorded so far::

    python benchmarks/screening.py run "own mix" 0
    python benchmarks/screening.py run domain 0 O-FedAvg
    python benchmarks/screening.py report > docs/results/screening.md

A part replaces the records of its case, seed and heads in
docs/results/screening.csv and keeps the others.
"""

from __future__ import annotations

import csv
import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from skslot_bench import CASE_TITLES, CASES, own_mix_rows, training_mixes
from threadpoolctl import threadpool_limits

from skslot.datasets import digits_projection, dirichlet_partition, load_dataset
from skslot.defence import DefenceBounds
from skslot.flower import DeploymentConfig
from skslot.heads import make_head
from skslot.protocol import ClientParty, EvaluationRequest, InProcessTransport, OneShotProtocol

OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "screening.csv"
#: (data set, clients per domain)
FEDERATIONS = (("office-caltech10", 1), ("office-caltech10", 2), ("digits", 2))
ALPHAS = (0.1, 0.05, 0.01, None)
#: Runs at once (one BLAS thread each).
N_JOBS = 2
HEADS = ("O-FedAvg", "FedCGS", "FedPFT")
#: Each case's label mix, as the deployment's run config names it.
LABEL_MIX = {"domain": "federation", "own mix": "client"}


def configs(case: str) -> dict[str, dict]:
    """The deployment's settings of ``case``, and ``tau = "auto"`` (in the domain case the
    paper's geodesic, every client alike; with each client's own mix the defaults')."""
    deployment = DeploymentConfig(label_mix=LABEL_MIX[case])
    defaults = {
        "tau": deployment.protocol().tau,
        "client_tau": deployment.client_tau,
        "mean_tau": deployment.mean_tau,
    }
    if case == "domain":
        return {
            "defaults": defaults,
            "auto": {"tau": "auto", "client_tau": "uniform", "mean_tau": None},
        }
    return {"defaults": defaults, "auto": {**defaults, "tau": "auto"}}


CONFIGS = tuple(configs("domain"))
WAYS = {
    "none": {"defence": None, "screen": "off"},
    "default": {"defence": DefenceBounds(), "screen": "auto"},
}


def one_run(name: str, per_domain: int, alpha: float | None, head_name: str, seed: int, case: str):
    logging.getLogger("skslot").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    data = load_dataset(name)
    X = data.X
    if X.shape[1] > 256 and name == "digits":  # the public projection of docs/results
        X = X @ digits_projection(X.shape[1], 256)
    classes = np.unique(data.y)
    part = dirichlet_partition(
        data.y, data.domain, alpha=alpha, clients_per_domain=per_domain, random_state=seed
    )
    head = make_head(head_name, seed=seed).set_params(label_mix=LABEL_MIX[case])
    mixes = training_mixes(data.y[part.train_index], part.train_client, classes)
    records = []
    with threadpool_limits(1):
        for config, settings in configs(case).items():
            for way, defence in WAYS.items():
                parties = {}
                for k in range(part.n_clients):
                    if k in part.empty_clients:
                        continue
                    train = part.train_index[part.train_client == k]
                    test = part.test_index[part.test_client == k]
                    if case == "own mix":  # its future rows follow its own training mix
                        drawn = own_mix_rows(
                            data.y[test], mixes[k], classes, len(test), random_state=[seed, k]
                        )
                        test = test[drawn]
                    parties[k] = ClientParty(
                        X[train], data.y[train], head=head, classes=classes, label=k,
                        X_test=X[test], y_test=data.y[test],
                    )  # fmt: skip
                start = time.process_time()
                result = OneShotProtocol(head, random_state=seed, **settings, **defence).run(
                    InProcessTransport(parties), classes
                )
                seconds = time.process_time() - start
                scores = result.head.linear_scores()
                accuracy = []
                for party in parties.values():  # every client, excluded ones too
                    found = party.answer("evaluation", EvaluationRequest(None, scores, result.tau))
                    accuracy.append(found.n_correct / found.n_test)
                report = result.report
                screening = report.screening or {}
                records.append(
                    {
                        "data_set": name,
                        "case": case,
                        "clients_per_domain": per_domain,
                        "clients": len(parties),
                        "alpha": "none" if alpha is None else alpha,
                        "head": head_name,
                        "seed": seed,
                        "config": config,
                        "way": way,
                        "macro_accuracy": round(100 * float(np.mean(accuracy)), 4),
                        "tau": result.tau,
                        "rejected": sum(len(v) for v in report.rejected.values()),
                        "excluded": len(screening.get("excluded", [])),
                        "screened": "screening" in report.stages,
                        "cpu_seconds": round(seconds, 2),
                    }
                )
    return records


FIELDS = (
    "data_set", "case", "clients_per_domain", "clients", "alpha", "head", "seed", "config",
    "way", "macro_accuracy", "tau", "rejected", "excluded", "screened", "cpu_seconds",
    "part_wall_seconds",
)  # fmt: skip


def read_records() -> list[dict]:
    """Every part recorded so far, numbers parsed back."""
    if not OUT.exists():
        return []
    with OUT.open(newline="") as f:
        records = list(csv.DictReader(f))
    for r in records:
        for key in ("clients_per_domain", "clients", "seed", "rejected", "excluded"):
            r[key] = int(r[key])
        for key in ("macro_accuracy", "cpu_seconds", "part_wall_seconds"):
            r[key] = float(r[key])
        r["screened"] = r["screened"] == "True"
        if r["alpha"] != "none":
            r["alpha"] = float(r["alpha"])
    return records


def run_part(case: str, seed: int, heads: tuple[str, ...] | None = None) -> None:
    """One case and one seed, every federation and alpha, each of ``heads`` (``None``:
    :data:`HEADS`); recorded in ``OUT`` in place of the records of the same case, seed and
    heads."""
    heads = HEADS if heads is None else heads
    if case not in CASES:
        raise SystemExit(f"case must be one of {CASES}, got {case!r}")
    unknown = set(heads) - set(HEADS)
    if unknown or not heads:
        raise SystemExit(f"heads must be some of {HEADS}, got {heads!r}")
    jobs = [
        (name, per_domain, alpha, head, seed, case)
        for name, per_domain in FEDERATIONS
        for alpha in ALPHAS
        for head in heads
    ]
    start = time.time()
    runs = Parallel(n_jobs=N_JOBS)(delayed(one_run)(*job) for job in jobs)
    wall = round(time.time() - start, 1)
    kept = [
        r
        for r in read_records()
        if not (r["case"] == case and r["seed"] == seed and r["head"] in heads)
    ]
    records = kept + [{**r, "part_wall_seconds": wall} for run in runs for r in run]
    with OUT.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(FIELDS))
        writer.writeheader()
        writer.writerows(records)
    added = len(records) - len(kept)
    print(f"{case!r} seed {seed}, {', '.join(heads)}: {added} runs in {wall:.0f} s wall")


def main() -> None:
    records = read_records()
    if not records:
        raise SystemExit(f"no records in {OUT}: run a part first")
    # a case and seed may come from parts of some heads each: each part's wall, and the
    # heads whose records it holds
    parts: dict[tuple[str, int, float], set] = {}
    for r in records:
        parts.setdefault((r["case"], r["seed"], r["part_wall_seconds"]), set()).add(r["head"])
    seeds = {case: sorted({s for c, s, _ in parts if c == case}) for case in CASES}
    walls = "; ".join(
        f"{case} {seed}, {', '.join(h for h in HEADS if h in heads)}: {wall:.0f} s"
        for (case, seed, wall), heads in sorted(parts.items())
    )
    print("# The defence without an attacker\n")
    print(
        "`python benchmarks/screening.py run CASE SEED [HEAD ...]`, parts of a case and seed "
        f"({'; '.join(f'{c}: seeds ' + ', '.join(map(str, s)) for c, s in seeds.items())}), then "
        "`python benchmarks/screening.py report`: the real protocol in "
        'process, at the deployment\'s defaults and at `tau = "auto"`; macro accuracy (%) '
        "over all clients (excluded ones included), mean over seeds; *change*: the mean and "
        "the largest absolute difference of the default defence to no defence in any one "
        "seed; *excluded*: honest clients the screening excluded, over all seeds; *CPU*: "
        "seconds per run, without and with the defence (one BLAS thread).  "
        f"Wall on 2 cores, each part (case, seed, the heads whose records it holds): {walls}; "
        "records in "
        "docs/results/screening.csv.\n"
    )
    for case in CASES:
        if seeds[case]:
            report([r for r in records if r["case"] == case], case)


def report(records: list[dict], case: str) -> None:
    """One case's table and its honest exclusions."""
    print(f"## {CASE_TITLES[case]}\n")
    print(
        "| data set (clients) | alpha | head | config | no defence | default defence "
        "| change (mean / largest) | excluded | CPU s (none / default) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    excluded_runs = {head: [0, 0] for head in HEADS}
    for name, per_domain in FEDERATIONS:
        for alpha in ALPHAS:
            for head in HEADS:
                for config in CONFIGS:
                    rows = sorted(
                        (
                            r
                            for r in records
                            if r["data_set"] == name
                            and r["clients_per_domain"] == per_domain
                            and r["alpha"] == ("none" if alpha is None else alpha)
                            and r["head"] == head
                            and r["config"] == config
                        ),
                        key=lambda r: r["seed"],
                    )

                    def way(w, rows=rows, key="macro_accuracy"):
                        return np.array([r[key] for r in rows if r["way"] == w])

                    change = way("default") - way("none")
                    defended = [r for r in rows if r["way"] == "default"]
                    excluded = sum(r["excluded"] for r in defended)
                    excluded_runs[head][0] += sum(r["excluded"] > 0 for r in defended)
                    excluded_runs[head][1] += sum(r["screened"] for r in defended)
                    clients = max(r["clients"] for r in rows)
                    print(
                        f"| {name} ({clients}) | {'none' if alpha is None else alpha} | {head} "
                        f"| {config} | {way('none').mean():.2f} | {way('default').mean():.2f} "
                        f"| {change.mean():+.2f} / {np.max(np.abs(change)):.2f} | {excluded} "
                        f"| {way('none', key='cpu_seconds').mean():.1f} / "
                        f"{way('default', key='cpu_seconds').mean():.1f} |"
                    )
    print()
    for head, (out, screened) in excluded_runs.items():
        print(f"- {head}: an honest client excluded in {out} of {screened} screened runs.")
    print()


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"] and len(sys.argv) >= 4:
        run_part(sys.argv[2], int(sys.argv[3]), tuple(sys.argv[4:]) or None)
    elif sys.argv[1:] == ["report"]:
        main()
    else:
        raise SystemExit(__doc__.split("Run one part")[1])
