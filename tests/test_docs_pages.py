"""The user pages: short, their links resolving, and every figure from a file a script wrote.

A figure (a decimal number, a percentage, a speed-up, a time or a size) in a page's prose must
appear in a generated file the page includes or names (``docs/results/...``),
or, in the README, in the output its own commands print (checked against
them by ``tests/test_readme.py``).  Code, maths and link targets are not prose.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: The pages a user reads: the README and the documentation site's own pages (the
#: generated results files are included or linked from them, not pages of their own).
USER_PAGES = [
    ROOT / "README.md",
    *sorted(DOCS.glob("*.md")),
    *sorted(DOCS.glob("reproduction/*.md")),
]
MAX_PAGE_BYTES = 12_000
#: The deployment path: the README, the how-to it points to, and the install page.
DEPLOYMENT_PATH = [ROOT / "README.md", DOCS / "deployment.md", DOCS / "install.md"]
MAX_DEPLOYMENT_BYTES = 30_000

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_INLINE = re.compile(r"`[^`]*`")
_MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
_FIGURE = re.compile(
    r"(?<![\w.\-/])(\d+\.\d+|\d+(?:\.\d+)?\s?%|\d+(?:\.\d+)?x"
    r"|\d+(?:\.\d+)? ?(?:s|ms|seconds|minutes|KB|MB|GB|bytes))(?![\w.])"
)
_NAMED_RESULT = re.compile(r"(?:docs/)?(results/[\w./-]+\.(?:md|csv|json))")
_INCLUDE = re.compile(r"```\{include\}\s+(\S+)")
#: Numbers that are names, not measurements: Python, package and licence versions.
_NOT_FIGURES = re.compile(
    r"Python\s*(?:>=\s*)?\d+\.\d+|\d+\.\d+\.\d+|torch==\S+|CC[ -]BY[\w-]* \d+\.\d+"
)


def _prose(text: str) -> str:
    """The page without code blocks, inline code, maths, link targets and version names."""
    text = _FENCE.sub("", text)
    text = _INLINE.sub("", text)
    text = _MATH.sub("", text)
    text = _LINK.sub(lambda m: m.group(1), text)
    return _NOT_FIGURES.sub("", text)


def _sources(page: Path) -> str:
    """The generated text a page's figures may come from: what it includes or names."""
    text = page.read_text()
    found = []
    for target in _INCLUDE.findall(text):
        found.append((page.parent / target).resolve())
    for named in _NAMED_RESULT.findall(text):
        found.append(DOCS / named)
    if page.name == "README.md":  # what its own commands print (tests/test_readme.py)
        found_text = "\n".join(re.findall(r"```text\n(.*?)```", text, re.S))
    else:
        found_text = ""
    return found_text + "\n".join(p.read_text() for p in found if p.is_file())


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", USER_PAGES, ids=_name)
def test_a_user_page_is_read_in_five_minutes(page):
    assert len(page.read_bytes()) <= MAX_PAGE_BYTES


def test_the_deployment_path_is_short():
    assert sum(len(p.read_bytes()) for p in DEPLOYMENT_PATH) < MAX_DEPLOYMENT_BYTES


@pytest.mark.parametrize("page", [*USER_PAGES, ROOT / "CONTRIBUTING.md"], ids=_name)
def test_every_relative_link_resolves(page):
    text = _INLINE.sub("", _FENCE.sub("", page.read_text()))
    broken = []
    for _, target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{_name(page)} links to missing files: {broken}"


@pytest.mark.parametrize("page", USER_PAGES, ids=_name)
def test_every_figure_comes_from_a_generated_file(page):
    sources = _sources(page)

    def sourced(figure: str) -> bool:  # its number, as a number of the sources
        number = re.match(r"\d+(?:\.\d+)?", figure).group()
        return re.search(rf"(?<![\d.]){re.escape(number)}(?![\d]|\.\d)", sources) is not None

    unsourced = sorted(
        {figure for figure in _FIGURE.findall(_prose(page.read_text())) if not sourced(figure)}
    )
    assert not unsourced, (
        f"{_name(page)} quotes figures no file it includes or names holds: {unsourced}"
    )
