"""The README's example prints what the README says; the usage page's code runs as written."""

import contextlib
import io
import re
import warnings
from pathlib import Path

import pytest

from skslot import SmallClientWarning

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
USAGE = ROOT / "docs" / "usage.md"


def _blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.S)


def test_readme_starts_with_the_library():
    """Short, and its first lines hold a runnable example, not a benchmark.

    The main job's two tables (each client's own label mix, every class of the domain)
    take 32 of its lines."""
    lines = README.read_text().splitlines()
    assert len(lines) < 170
    assert lines.index("```python") < 30
    assert max(len(line) for line in lines if line.startswith("|")) <= 100  # no wide table


def test_readme_example_prints_what_the_readme_says():
    (code,) = _blocks(README, "python")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), warnings.catch_warnings():
        # client 1 of the seeded partition holds 207 rows in 256 dimensions: warned, as it should
        warnings.simplefilter("ignore", SmallClientWarning)
        exec(compile(code, str(README), "exec"), {})
    said = _blocks(README, "text")[0]
    assert printed.getvalue() == said


# the grouped search: each fold's held-out client is new to SLOT, as the page says
@pytest.mark.filterwarnings(
    r"ignore:SLOTTransformer\.transform. client\(s\) \d were not seen during fit. their maps "
    "are estimated from their rows here:skslot.UnknownClientWarning"
)
def test_usage_python_blocks_run():
    blocks = _blocks(USAGE, "python")
    assert blocks, "docs/usage.md has no python example"
    for code in blocks:
        namespace: dict = {}
        exec(compile(code, str(USAGE), "exec"), namespace)
    assert namespace["X0_aligned"].shape[1] == namespace["X"].shape[1]
    assert 0.0 <= namespace["grid"].best_params_["align__tau"] <= 1.0
    assert namespace["search"].best_tau_ in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert namespace["y_new"].shape == (5,)


def test_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r"run the tests.*?```bash\n(.*?)\n```", README.read_text(), re.S).group(1)
    assert command.strip() in ci
