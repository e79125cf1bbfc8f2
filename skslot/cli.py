"""Command line: ``skslot bench`` runs the reproduction benchmark;
``skslot flower-app DIR`` writes a Flower App that deploys SLOT-Align."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import fields

from . import __version__
from .bench import (
    DEFAULT_HEADS,
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
    try:
        values = tuple(None if a.strip().lower() == "none" else float(a) for a in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers or 'none', got {text!r}"
        ) from None
    if any(a is not None and not a > 0 for a in values):
        raise argparse.ArgumentTypeError(f"alphas must be > 0 (or 'none'), got {text!r}")
    return values


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers, comma-separated: {text!r}") from None
    if any(not 0.0 <= t <= 1.0 for t in values):
        raise argparse.ArgumentTypeError(f"taus must lie in [0, 1], got {text!r}")
    return values


def _heads(text: str) -> tuple[str, ...]:
    """Head names, case-insensitive, checked before any work starts."""
    names = {name.lower(): name for name in DEFAULT_HEADS}
    heads = []
    for part in text.split(","):
        name = names.get(part.strip().lower())
        if name is None:
            raise argparse.ArgumentTypeError(
                f"unknown head {part.strip()!r}; choose from {', '.join(DEFAULT_HEADS)}"
            )
        heads.append(name)
    return tuple(heads)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skslot",
        description="skslot bench runs the reproduction benchmark; skslot flower-app DIR "
        "writes a Flower App that deploys SLOT-Align.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser(
        "bench",
        help="run the SLOT-Align reproduction benchmark",
        description="Paper protocol (per-domain 70/30 split, Dirichlet label skew, one client "
        "per domain): O-FedAvg, FedCGS and FedPFT heads without (tau=0) and with SLOT over a "
        "tau sweep. Prints a table, writes CSV/JSON/markdown results and a PNG plot.",
    )
    bench.add_argument(
        "--data",
        metavar="PATH",
        help="an .npz with X, y, domain (default: the embedded Office-Caltech10 SURF features)",
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
        help="tau sweep in [0, 1]; must include 0, the baseline; --main-tau is added if "
        "missing (default: 0,0.2,0.4,0.6,0.8,1)",
    )
    bench.add_argument(
        "--seeds", type=_positive_int, default=5, help="number of seeds (default: 5)"
    )
    bench.add_argument(
        "--heads",
        type=_heads,
        default=tuple(DEFAULT_HEADS),
        help="comma-separated heads, any case: O-FedAvg, FedCGS, FedPFT (default: all three)",
    )
    bench.add_argument(
        "--main-tau", type=float, default=0.4, help="tau reported in the table (default: 0.4)"
    )
    bench.add_argument(
        "--clients-per-domain",
        type=_positive_int,
        default=1,
        help="clients each domain's rows are dealt into before the Dirichlet step "
        "(the paper's finer partitions; default: 1)",
    )
    bench.add_argument(
        "--preprocess",
        choices=sorted(PREPROCESS),
        default="none",
        help="per-row feature transform before federating (default: none)",
    )
    bench.add_argument(
        "--n-jobs", type=int, default=2, help="parallel runs, joblib's convention (default: 2)"
    )
    bench.add_argument(
        "--no-auto",
        dest="auto",
        action="store_false",
        help="skip the federated choice of tau by validation (the 'auto' column)",
    )
    bench.add_argument(
        "--validation-fraction",
        type=_fraction,
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
        description="Writes DIR/pyproject.toml for 'flwr run DIR'. Options set the defaults of "
        "its [tool.flwr.app.config]; see docs/deployment.md (running it needs skslot[flower]).",
    )
    flower.add_argument("directory", help="the App directory to write (created if needed)")
    for f in fields(DeploymentConfig):
        flower.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            default=None,
            metavar="VALUE",
            help=f"{_first_sentence(f.name)} (default: {_shown(f.default)})",
        )
    return parser


def _first_sentence(name: str) -> str:
    """The first sentence of a DeploymentConfig parameter's description, as plain text."""
    doc = "".join(part.__doc__ or "" for part in DeploymentConfig.__mro__)
    match = re.search(
        rf"^    (?:\w+, )*{name}(?:, \w+)* : [^\n]*\n((?:        [^\n]*\n)+)", doc, re.M
    )
    if not match:
        return name.replace("_", " ")
    text = " ".join(line.strip() for line in match.group(1).splitlines())
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text).replace("``", "'")
    return text.split(". ")[0].rstrip(".")


def _shown(value: object) -> str:
    if value == "auto":
        return "auto"
    if isinstance(value, bool):
        return str(value).lower()
    return "none" if value is None else str(value) if not isinstance(value, str) else repr(value)


def _scalar(text: str) -> object:
    """A command-line value as a run config holds it: a bool, an int, a float, else the string."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
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
    if 0.0 not in args.taus:
        print("skslot bench: --taus must include 0 (the head without SLOT)", file=sys.stderr)
        return 2
    if not 0.0 <= args.main_tau <= 1.0:
        print("skslot bench: --main-tau must lie in [0, 1]", file=sys.stderr)
        return 2
    try:
        data = load_npz(args.data) if args.data else load_office_caltech10()
    except (OSError, ValueError, KeyError) as exc:
        print(f"skslot bench: cannot read --data {args.data}: {exc}", file=sys.stderr)
        return 2
    taus = tuple(sorted(set(args.taus) | {args.main_tau}))
    if args.main_tau not in args.taus:
        print(f"skslot bench: adding --main-tau {args.main_tau:g} to the sweep", file=sys.stderr)
    config = BenchmarkConfig(
        alphas=args.alphas,
        taus=taus,
        seeds=tuple(range(args.seeds)),
        heads=args.heads,
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
