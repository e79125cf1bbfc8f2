"""Command line: ``skslot bench`` runs the reproduction benchmark (:mod:`skslot_bench.cli`);
``skslot flower-app DIR`` writes a Flower App that deploys SLOT-Align; ``skslot flower-run``
runs one (:mod:`skslot.flower.launch`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import skslot_bench.cli as bench_cli

from . import __version__
from .datasets import EMBEDDED_DATASETS
from .flower.app_files import write_flower_app
from .flower.config import DeploymentConfig

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="skslot",
        description="skslot bench runs the reproduction benchmark; skslot flower-app DIR "
        "writes a Flower App that deploys SLOT-Align.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help=bench_cli.HELP, description=bench_cli.DESCRIPTION)
    bench_cli.add_arguments(bench)
    launch = sub.add_parser(
        "flower-run",
        help="run a Flower App and exit 0 only if the run completed (1: failed)",
        description="flwr run APP_DIR [SUPERLINK], its log streamed, then the run's status "
        "from the SuperLink and its report.json (skslot.flower.launch; needs skslot[flower]).",
        add_help=False,
    )
    launch.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    flower = sub.add_parser(
        "flower-app",
        help="write a Flower App directory running skslot's ServerApp and ClientApp",
        description="Writes DIR/pyproject.toml for 'flwr run DIR'. Options set the defaults of "
        "its [tool.flwr.app.config]; see docs/deployment.md (running it needs skslot[flower]).",
    )
    flower.add_argument("directory", help="the App directory to write (created if needed)")
    for part in DeploymentConfig.parts().values():
        title = part.__name__.removesuffix("Settings").lower() + " settings"
        first_line = (part.__doc__ or "").strip().splitlines()[0].replace("``", "'")
        group = flower.add_argument_group(title, first_line)
        for s in part.settings():
            s.add_option(group)
    return parser


def _flower_app(args: argparse.Namespace) -> int:
    settings = {
        s.name: s.from_text(getattr(args, s.name))
        for s in DeploymentConfig.settings()
        if getattr(args, s.name) is not None
    }
    try:
        config = DeploymentConfig(**settings)
    except (TypeError, ValueError) as exc:
        print(f"skslot flower-app: {exc}", file=sys.stderr)
        return 2
    if config.dataset not in EMBEDDED_DATASETS and not os.path.isfile(config.dataset):
        print(
            f"skslot flower-app: --dataset {config.dataset}: no such file here; give "
            f"{' or '.join(map(repr, EMBEDDED_DATASETS))} or the path of a file every node "
            "can read (a node's own node-config 'dataset' or 'data' overrides it)",
            file=sys.stderr,
        )
        return 2
    path = write_flower_app(args.directory, config)
    print(f"wrote {path / 'pyproject.toml'}; run it with: flwr run {path} <superlink>")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``skslot`` command: ``bench``, ``flower-app`` or ``flower-run``.

    Parameters
    ----------
    argv : sequence of str, default=None
        The command line without the program's name (``None``:
        ``sys.argv[1:]``).

    Returns
    -------
    status : int
        The exit status: 0 on success; 2 when the options or the data cannot
        work (the reason printed on stderr); for ``flower-run``, that of
        :func:`skslot.flower.launch.run_and_wait`.  An option ``argparse``
        refuses exits (``SystemExit``) with status 2.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["flower-run"]:  # its options are the launcher's own
        from .flower.launch import main as launch_main

        return launch_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "flower-app":
        return _flower_app(args)
    return bench_cli.run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
