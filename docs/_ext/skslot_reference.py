"""Reference pages written from the library's own declarations at build time.

``skslot-run-config``: one row per Flower run-config setting, from
:meth:`skslot.flower.DeploymentConfig.settings` (key, what it allows, default,
help). ``skslot-cli``: the ``--help`` of ``skslot`` and of each of its
commands, from :func:`skslot.cli.build_parser`. Nothing is typed twice.
"""

from __future__ import annotations

import argparse
import functools

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx


def _cell(text: str) -> nodes.entry:
    entry = nodes.entry()
    entry += nodes.paragraph(text=text)
    return entry


def _table(header: list[str], rows: list[list[str]], widths: list[int]) -> nodes.table:
    table = nodes.table()
    group = nodes.tgroup(cols=len(header))
    table += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    row = nodes.row()
    for text in header:
        row += _cell(text)
    head += row
    group += head
    body = nodes.tbody()
    for cells in rows:
        row = nodes.row()
        for text in cells:
            row += _cell(text)
        body += row
    group += body
    return table


def run_config_rows() -> list[list[str]]:
    """One row per run-config setting: key, allowed values, default, help."""
    from skslot.flower import DeploymentConfig

    return [[s.key, s.allowed, s.shown_default, s.help] for s in DeploymentConfig.settings()]


class RunConfigTable(Directive):
    """Every run-config setting: key, allowed values, default, help."""

    def run(self) -> list[nodes.Node]:
        rows = run_config_rows()
        return [_table(["key", "allowed", "default", "meaning"], rows, [18, 22, 12, 48])]


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices.items())
    return []


class CommandLineHelp(Directive):
    """``skslot --help`` and each command's ``--help``, as the parser prints them."""

    def run(self) -> list[nodes.Node]:
        from skslot.cli import build_parser

        parser = build_parser()
        commands = _subcommands(parser)
        for command in (parser, *(sub for _, sub in commands)):  # 88 columns, as in a terminal
            command.formatter_class = functools.partial(argparse.HelpFormatter, width=86)
        result: list[nodes.Node] = [nodes.literal_block(text=parser.format_help())]
        for name, sub in commands:
            section = nodes.section(ids=[f"skslot-{name}"])
            section += nodes.title(text=f"skslot {name}")
            section += nodes.literal_block(text=sub.format_help())
            result.append(section)
        return result


def setup(app: Sphinx) -> dict[str, bool]:
    """Register the directives."""
    app.add_directive("skslot-run-config", RunConfigTable)
    app.add_directive("skslot-cli", CommandLineHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
