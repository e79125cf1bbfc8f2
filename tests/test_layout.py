"""The package's shape: one module per stage, no import cycle, each concern in its place."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import skslot
from skslot.datasets import make_federated_classification
from skslot.defence import DefenceBounds
from skslot.heads import make_head
from skslot.protocol import (
    STAGES,
    ClientParty,
    Exchange,
    InProcessTransport,
    OneShotProtocol,
    ServerWire,
)
from skslot.wire import WireFormatError
from skslot.wire.payload import Payload

from .conftest import PAPER_RUN, short_local_training

PACKAGE = Path(skslot.__file__).parent
PARTS = ("request", "reply", "answer", "check", "encode_request", "decode_request")
CODEC = ("encode_reply", "decode_reply")


def _modules() -> dict[str, Path]:
    found = {"skslot": PACKAGE / "__init__.py"}
    for info in pkgutil.walk_packages([str(PACKAGE)], prefix="skslot."):
        module = importlib.util.find_spec(info.name)
        found[info.name] = Path(module.origin)
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The skslot modules ``name`` imports anywhere: at import time, under TYPE_CHECKING
    (a type is a dependency too) and inside functions (a deferred import is one)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("skslot"))
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            if not target.startswith("skslot"):
                continue
            for alias in node.names:  # "from . import upload": the submodule
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)
    return found & known - {name}


def test_no_module_of_skslot_imports_itself_back():
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_each_stage_is_one_module_or_package_with_its_messages_step_check_and_codec():
    assert list(STAGES) == ["upload", "updates", "validation", "screening", "refit", "evaluation"]
    for name, stage in STAGES.items():
        module = stage.answer.__module__
        home, _, leaf = module.rpartition(".")
        home = home if leaf.startswith("_") else module  # a stage's package: its private modules
        assert home.startswith("skslot.protocol.stages."), name
        for part in (*PARTS, *CODEC):
            where = getattr(stage, part).__module__
            assert where == home or where.startswith(home + "._"), (name, part, where)
        assert stage.message_type.partition(".")[0] in ("query", "train", "evaluate")
    reference = importlib.import_module("skslot.protocol.stages.reference")
    assert hasattr(reference, "ReferenceStep")


def _python_sources(root: Path) -> dict[Path, str]:
    return {path: path.read_text() for path in sorted(root.rglob("*.py"))}


def test_the_defence_is_an_object_never_a_branch():
    for path, text in _python_sources(PACKAGE).items():
        assert "defence is not None" not in text, path
        assert "defence is None" not in text or path.name == "driver.py", path


@pytest.mark.parametrize("call", ["fit_from_statistics", "client_statistics", "client_upload"])
def test_only_the_heads_package_fits_heads(call):
    """The server's and the clients' head fitting live in skslot/heads/; the protocol asks."""
    for path, text in _python_sources(PACKAGE).items():
        if path.is_relative_to(PACKAGE / "heads"):
            continue
        calls = [
            node
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == call
        ]
        allowed = call == "client_upload" and path.parent.name == "upload"  # the strategy's step
        assert allowed or not calls, f"{path} calls {call}"


class ObjectTransport:
    """In process, the protocol's objects handed over as they are: no codec, no checks."""

    def __init__(self, clients: Mapping[Hashable, ClientParty]):
        self.clients = dict(clients)
        self.stages: set[str] = set()

    def open(self, head: Any, classes: np.ndarray) -> None:
        pass

    def parties(self) -> list[Hashable]:
        return list(self.clients)

    def exchange(self, stage: str, requests: Mapping[Hashable, Any]) -> Exchange:
        self.stages.add(stage)
        return Exchange({a: self.clients[a].answer(stage, r) for a, r in requests.items()})


@short_local_training
@pytest.mark.parametrize("name", ["FedCGS", "FedPFT", "O-FedAvg"])
def test_every_stage_s_codec_carries_what_the_objects_carry(name):
    """The in-process run, whose messages all pass through the stages' codecs (float64
    summaries), is the run of the objects handed over as they are: same choice, same
    screening, same accuracies."""
    data = make_federated_classification(
        n_clients=4, n_samples_per_client=120, n_features=5, alpha=0.5, random_state=1
    )
    classes = np.unique(data.y)
    head = make_head(name, seed=0)

    def parties():
        out = {}
        for k in range(4):
            rows = np.flatnonzero(data.client == k)
            test, train = rows[::4], np.setdiff1d(rows, rows[::4])
            out[k] = ClientParty(
                data.X[train], data.y[train], head=head, classes=classes, label=k,
                X_test=data.X[test], y_test=data.y[test],
            )  # fmt: skip
        return out

    protocol = OneShotProtocol(
        head, tau="auto", taus=(0.0, 0.5, 1.0), defence=DefenceBounds(), random_state=0, **PAPER_RUN
    )
    coded = protocol.run(InProcessTransport(parties()), classes)  # through every codec
    transport = ObjectTransport(parties())
    plain = protocol.run(transport, classes)
    assert coded.report.stages == plain.report.stages
    assert transport.stages == set(plain.report.stages)
    assert "screening" in transport.stages and "validation" in transport.stages
    assert coded.tau == plain.tau and coded.report.rejected == plain.report.rejected
    assert coded.report.accuracy == pytest.approx(plain.report.accuracy, abs=1e-12)


def test_a_stage_decoder_refuses_a_malformed_reply_with_a_wire_error():
    wire = ServerWire(make_head("FedCGS"), np.arange(3), summary_dtype="float64")
    wire.dimension = 4
    for name, stage in STAGES.items():
        with pytest.raises(WireFormatError):
            stage.decode_reply(Payload().received(), _request(name), wire)


def _request(name: str) -> Any:
    from skslot.heads import LinearScores
    from skslot.protocol import (
        EvaluationRequest,
        ScreeningRequest,
        UpdatesRequest,
        UploadRequest,
        ValidationRequest,
    )

    scores = LinearScores(np.arange(3), np.zeros((3, 4)), np.zeros(3))
    return {
        "upload": UploadRequest(0),
        "updates": UpdatesRequest(None, (0.5,), "fit"),
        "refit": UpdatesRequest(None, (0.5,), "all"),
        "validation": ValidationRequest(None, (scores,), (0.5,)),
        "screening": ScreeningRequest(None, scores, (scores,), np.ones((1, 3), bool), 0.5),
        "evaluation": EvaluationRequest(None, scores, 0.5),
    }[name]


def test_an_explicit_null_defence_is_no_defence():
    from skslot.defence import NoDefence

    head = make_head("FedCGS")
    assert not OneShotProtocol(head, tau="auto", defence=NoDefence()).screening
    with pytest.raises(ValueError, match="needs a defence"):
        OneShotProtocol(head, screen="on", defence=NoDefence())
    assert NoDefence().implausible_updates([0.0, 0.0, 1.0]) == {}  # no median taken


#: The modules outside the privacy package that name a budget's epsilon or a ledger: where a
#: user gives a budget (docs/architecture.md lists them).
BUDGET_ENTRY_POINTS = {
    "summary.py",
    "protocol/client.py",
    "flower/client_app.py",
    "flower/config.py",
    "flower/groups.py",
    "flower/server_app.py",
}


def test_only_the_privacy_package_and_the_budget_entry_points_name_epsilon_or_a_ledger():
    import re

    pattern = re.compile(r"epsilon|ledger")
    naming = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if pattern.search(path.read_text())
    }
    outside = {name for name in naming if not name.startswith("privacy/")}
    assert outside <= BUDGET_ENTRY_POINTS, sorted(outside - BUDGET_ENTRY_POINTS)
    assert "summary.py" in outside and "protocol/client.py" in outside  # the check reads them
    documented = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    for name in BUDGET_ENTRY_POINTS:
        assert f"skslot/{name}" in documented or name.rsplit("/", 1)[-1] in documented, name


def test_docs_benchmarks_and_code_tell_no_development_history():
    """The library as it is: no numbered sessions or issues (what changed: CHANGELOG.md)."""
    import re

    root = PACKAGE.parent
    pattern = re.compile(r"\bsession [0-9]+|\bissue #?[0-9]+|\(#[0-9]+\)", re.IGNORECASE)
    files = [root / "README.md", root / "CONTRIBUTING.md"]
    files += sorted((root / "docs").glob("*.md")) + sorted((root / "docs" / "results").glob("*.md"))
    files += sorted((root / "benchmarks").glob("*.py")) + sorted(PACKAGE.rglob("*.py"))
    found = [
        f"{path.relative_to(root)}:{n}"
        for path in files
        if path.exists()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found


@pytest.mark.parametrize("package", ["skslot", "skslot.flower"])
def test_importing_the_package_imports_no_scientific_stack(package):
    """The packages load their public names on first use (PEP 562): a fresh
    interpreter that only imports one has not imported scikit-learn, scipy or
    numpy (Flower's commands import ``skslot.flower`` to find the Apps), and
    every public name then resolves to its defining module."""
    if package == "skslot.flower":
        pytest.importorskip("flwr", reason="skslot.flower's Flower names need flwr")
    code = (
        f"import sys, {package} as skslot\n"
        "heavy = sorted(m for m in ('sklearn', 'scipy', 'numpy', 'pandas') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "for name in skslot.__all__:\n"
        "    obj = getattr(skslot, name)\n"
        "    assert obj.__name__ == name and obj.__module__.startswith('skslot.'), name\n"
        "assert set(skslot.__all__) <= set(dir(skslot))\n"
        "try:\n"
        "    skslot.not_a_name\n"
        "except AttributeError as error:\n"
        "    assert 'not_a_name' in str(error)\n"
        "else:\n"
        "    raise AssertionError('an unknown name resolved')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
