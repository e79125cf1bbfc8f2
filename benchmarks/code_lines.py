"""Lines of code in a Python package: not blank, not a comment, not a docstring.

A line counts when a token other than a comment or a line break starts or
continues on it, outside the docstring of a module, class or function
(``ast``). Prints the total per top-level part (module or subpackage), the
largest modules and the total.

Usage:

    python benchmarks/code_lines.py [package_dir] [--top N]

(default: the ``skslot`` package beside this folder, the 10 largest modules).
"""

from __future__ import annotations

import argparse
import ast
import io
import tokenize
from collections import Counter
from pathlib import Path

#: Tokens that carry no code of their own.
_LAYOUT = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def docstring_lines(tree: ast.Module) -> set[int]:
    """The lines of every module, class and function docstring in ``tree``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(source: str) -> int:
    """The lines of code in ``source`` (see the module docstring)."""
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _LAYOUT:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstring_lines(ast.parse(source)))


def count(package: Path) -> dict[Path, int]:
    """Lines of code of each module under ``package``, by path relative to it."""
    return {
        path.relative_to(package): code_lines(path.read_text())
        for path in sorted(package.rglob("*.py"))
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(__file__).resolve().parents[1] / "skslot"
    parser.add_argument("package", nargs="?", type=Path, default=default)
    parser.add_argument("--top", type=int, default=10, help="largest modules shown")
    args = parser.parse_args(argv)
    per_module = count(args.package)
    per_part = Counter()
    for path, n in per_module.items():
        per_part[path.parts[0] if len(path.parts) > 1 else path.stem] += n
    print(f"## Lines of code in {args.package.name}/ (no blank, comment or docstring line)\n")
    print("| part | lines |\n| --- | ---: |")
    for part, n in per_part.most_common():
        print(f"| {part} | {n} |")
    print(
        "\nlargest modules: "
        + ", ".join(f"{path} {n}" for path, n in Counter(per_module).most_common(args.top))
    )
    print(f"total: {sum(per_module.values())}")


if __name__ == "__main__":
    main()
