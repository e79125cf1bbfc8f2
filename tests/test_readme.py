"""The README's quickstart runs as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


# the grouped search: each fold's held-out client is new to SLOT, as the README says
@pytest.mark.filterwarnings(
    r"ignore:SLOTTransformer\.transform. client\(s\) \d were not seen during fit. their maps "
    "are estimated from their rows here:skslot.UnknownClientWarning"
)
def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README.md has no python example"
    for code in blocks:
        namespace: dict = {}
        exec(compile(code, str(README), "exec"), namespace)
    assert namespace["X0_aligned"].shape[1] == namespace["X"].shape[1]
    assert 0.0 <= namespace["grid"].best_params_["slottransformer__tau"] <= 1.0
    assert namespace["search"].best_tau_ in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert namespace["y_new"].shape == (5,)


def test_readme_test_command_is_what_ci_runs():
    ci = (README.parent / ".ci" / "run").read_text()
    command = re.search(r"run the tests.*?```bash\n(.*?)\n```", README.read_text(), re.S).group(1)
    assert command.strip() in ci
