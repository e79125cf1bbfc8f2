"""Command line: ``skslot bench`` runs the reproduction benchmark;
``skslot flower-app DIR`` writes a Flower App that deploys SLOT-Align."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import fields

from .bench import (
    PREPROCESS,
    BenchmarkConfig,
    format_table,
    run_benchmark,
    summarise,
    write_outputs,
)
from .datasets import load_npz, load_office_caltech10
from .flower.config import DeploymentConfig, write_flower_app

__all__ = ["main"]


def _alphas(text: str) -> tuple[float | None, ...]:
    return tuple(None if a.strip().lower() == "none" else float(a) for a in text.split(","))


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(t) for t in text.split(","))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skslot", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser(
        "bench",
        help="run the SLOT-Align reproduction benchmark",
        description="Paper protocol (per-domain 70/30 split, Dirichlet label skew, one client "
        "per domain): O-FedAvg, FedCGS and FedPFT heads without (tau=0) and with SLOT over a "
        "tau sweep. Prints a table, writes CSV/JSON/markdown results and a PNG plot.",
    )
    bench.add_argument(
        "--data", help="an .npz with X, y, domain (default: embedded Office-Caltech10 SURF)"
    )
    bench.add_argument(
        "--alphas",
        type=_alphas,
        default=(0.1, 0.05, 0.01, None),
        help="Dirichlet alphas, 'none' = no label skew (default: 0.1,0.05,0.01,none)",
    )
    bench.add_argument(
        "--taus",
        type=_floats,
        default=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
        help="tau sweep; must include 0, the baseline (default: 0,0.2,...,1)",
    )
    bench.add_argument("--seeds", type=int, default=5, help="number of seeds (default: 5)")
    bench.add_argument(
        "--heads",
        default="O-FedAvg,FedCGS,FedPFT",
        help="comma-separated heads (default: all three)",
    )
    bench.add_argument(
        "--main-tau", type=float, default=0.4, help="tau reported in the table (default: 0.4)"
    )
    bench.add_argument("--clients-per-domain", type=int, default=1)
    bench.add_argument(
        "--preprocess",
        choices=sorted(PREPROCESS),
        default="none",
        help="per-row feature transform before federating (default: none)",
    )
    bench.add_argument("--n-jobs", type=int, default=2, help="parallel runs (default: 2)")
    bench.add_argument(
        "--no-auto",
        dest="auto",
        action="store_false",
        help="skip the federated choice of tau by validation (the 'auto' column)",
    )
    bench.add_argument(
        "--validation-fraction",
        type=float,
        default=0.2,
        help="share of each client's rows held out to choose tau in the 'auto' column "
        "(default: 0.2)",
    )
    bench.add_argument(
        "--out", default=None, help="output folder (default: skslot-results/<dataset>)"
    )
    bench.add_argument("--quiet", action="store_true", help="no progress lines")
    flower = sub.add_parser(
        "flower-app",
        help="write a Flower App directory running skslot's ServerApp and ClientApp",
        description="Writes DIR/pyproject.toml for `flwr run DIR`. Options set the defaults of "
        "its [tool.flwr.app.config]; see docs/deployment.md (needs skslot[flower] to run).",
    )
    flower.add_argument("directory")
    for f in fields(DeploymentConfig):
        flower.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            default=None,
            metavar="VALUE",
            help=f"default: {f.default!r}",
        )
    return parser


def _scalar(text: str) -> object:
    """A command-line value as a run config holds it: an int, a float, else the string."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _flower_app(args: argparse.Namespace) -> int:
    settings = {
        f.name.replace("_", "-"): _scalar(getattr(args, f.name))
        for f in fields(DeploymentConfig)
        if getattr(args, f.name) is not None
    }
    try:
        config = DeploymentConfig.from_run_config(settings)
    except (TypeError, ValueError) as exc:
        print(f"skslot flower-app: {exc}", file=sys.stderr)
        return 2
    path = write_flower_app(args.directory, config)
    print(f"wrote {path / 'pyproject.toml'}; run it with: flwr run {path} <superlink>")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "flower-app":
        return _flower_app(args)
    data = load_npz(args.data) if args.data else load_office_caltech10()
    if 0.0 not in args.taus:
        print("skslot bench: --taus must include 0 (the head without SLOT)", file=sys.stderr)
        return 2
    taus = tuple(sorted(set(args.taus) | {args.main_tau}))
    if args.main_tau not in args.taus:
        print(f"skslot bench: adding --main-tau {args.main_tau:g} to the sweep", file=sys.stderr)
    config = BenchmarkConfig(
        alphas=args.alphas,
        taus=taus,
        seeds=tuple(range(args.seeds)),
        heads=tuple(h.strip() for h in args.heads.split(",")),
        main_tau=args.main_tau,
        clients_per_domain=args.clients_per_domain,
        preprocess=args.preprocess,
        n_jobs=args.n_jobs,
        auto=args.auto,
        validation_fraction=args.validation_fraction,
    )
    print(
        f"skslot bench: {data.name}, {data.X.shape[0]} rows x {data.X.shape[1]} features, "
        f"{len(data.domains)} domains, {len(data.classes)} classes; "
        f"{len(config.alphas)} alphas x {len(config.seeds)} seeds x {len(taus)} taus x "
        f"{len(config.heads)} heads",
        file=sys.stderr,
    )
    try:
        records = run_benchmark(data, config, progress=not args.quiet)
    except ValueError as exc:
        print(f"skslot bench: {exc}", file=sys.stderr)
        return 2
    summary = summarise(records, config.main_tau)
    title = (
        f"{data.name}: macro accuracy over domains (%), mean +- std over {len(config.seeds)} seeds"
    )
    out = args.out or os.path.join("skslot-results", data.name)
    paths = write_outputs(records, summary, out, main_tau=config.main_tau, title=title)
    print(title)
    print(format_table(summary, config.main_tau))
    print("wrote " + ", ".join(paths.values()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
