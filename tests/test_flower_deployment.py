"""A real Flower deployment on 127.0.0.1: one SuperLink, three SuperNodes, two ``flwr run``.

Each SuperNode owns one client of the paper's partition of the embedded
Office-Caltech10 features (real data in every clone; m = 800 keeps the two
runs and their in-process twins within a minute or two).  The first run uses a
fixed tau: the global head the ServerApp writes must predict exactly as the
in-process scikit-learn pipeline fitted on the same partitions and seed.  The
second run chooses tau by validation (``tau = "auto"``), with a non-default
head configuration given as ``head-params`` (O-FedAvg, ``C = 0.1``): its choice,
validation table and predictions must equal those of the in-process
:class:`~skslot.FederatedTauSearch`.  Every client's reported accuracy must
equal the in-process one.  Every process is started in its own session and
stopped by its PID (the whole group), also when the test fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the Flower extra is not installed: pip install '.[flower]'")

from skslot import FederatedTauSearch
from skslot.flower import DeploymentConfig, write_flower_app
from skslot.heads import LinearScores

from .test_flower import client_rows, in_process

OFFLINE = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}
N_NODES = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process {process.pid} exited with {process.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


def stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM each process group by PID, then SIGKILL what is left."""
    for p in processes:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for p in processes:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def flower_env(tmp_path: Path, port: int) -> dict[str, str]:
    """The environment of a run whose Flower config names one SuperLink, "local", at ``port``."""
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    return {**os.environ, **OFFLINE, "FLWR_HOME": str(home)}


def launch(logs: Path, name: str, *args: str, env: dict, cwd: Path) -> subprocess.Popen:
    """Start a Flower command of this environment in its own session, logging to ``name.log``."""
    with open(logs / f"{name}.log", "w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [str(Path(sys.executable).parent / args[0]), *args[1:]],
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def tails(logs: Path) -> str:
    return "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in sorted(logs.glob("*.log")))


def test_flower_deployment_on_localhost(tmp_path):
    dataset = "office-caltech10"
    bin_dir = Path(sys.executable).parent
    link_port = free_port()
    env = flower_env(tmp_path, link_port)
    output = tmp_path / "out"
    config = DeploymentConfig(
        head="FedCGS",
        tau=0.4,
        alpha=0.1,
        seed=0,
        dataset=dataset,  # a run-config value: the node configs only give partition-id
        summary_dtype="float64",
        num_clients=N_NODES,
        min_clients=N_NODES,
        connect_timeout=120.0,
        output_dir=str(output),
    )
    app_dir = write_flower_app(tmp_path / "app", config)
    # the second run: a non-default head configuration, through head-params, with tau chosen
    auto = dataclasses.replace(
        config,
        head="O-FedAvg",
        head_params='{"C": 0.1, "max_iter": 50}',
        tau="auto",
        output_dir=str(tmp_path / "out-auto"),
    )
    auto_dir = write_flower_app(tmp_path / "app-auto", auto)
    # the third run: a fourth node joins and sends crafted bytes; the run completes without it
    hostile = dataclasses.replace(
        config, num_clients=N_NODES + 1, output_dir=str(tmp_path / "out-hostile")
    )
    hostile_dir = write_flower_app(tmp_path / "app-hostile", hostile)
    shutil.copytree(Path(__file__).parent / "hostile_app", hostile_dir / "hostile_app")
    toml = hostile_dir / "pyproject.toml"
    toml.write_text(toml.read_text().replace('"skslot.flower.client_app:app"', '"hostile_app:app"'))
    logs = tmp_path / "logs"
    logs.mkdir()

    processes: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> subprocess.Popen:
        processes.append(launch(logs, name, *args, env=env, cwd=tmp_path))
        return processes[-1]

    def supernode(name: str, node_config: str) -> None:
        start(
            name,
            "flower-supernode",
            "--insecure",
            "--superlink",
            f"127.0.0.1:{link_port}",
            "--port",
            str(free_port()),
            "--node-config",
            node_config,
        )

    try:
        link = start(
            "superlink",
            "flower-superlink",
            "--insecure",
            "--port",
            str(link_port),
            "--database",
            str(tmp_path / "state.db"),
        )
        wait_for_port(link_port, link)
        for i in range(N_NODES):
            supernode(f"supernode{i}", f"partition-id={i}")

        def flwr_run(directory: Path, out: Path) -> None:
            """``flwr run`` an App; it must exit 0 and its ServerApp write its outputs."""
            run = subprocess.run(
                [str(bin_dir / "flwr"), "run", str(directory), "local", "--stream"],
                env=env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=600,
            )
            (logs / f"flwr-run-{directory.name}.log").write_text(run.stdout + run.stderr)
            assert run.returncode == 0, tails(logs)
            deadline = time.monotonic() + 120
            while not (out / "reference.bin").exists() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert (out / "reference.bin").exists(), tails(logs)

        flwr_run(app_dir, output)
        flwr_run(auto_dir, Path(auto.output_dir))
        supernode("supernode-hostile", f"partition-id={N_NODES} hostile=1")
        flwr_run(hostile_dir, Path(hostile.output_dir))
    finally:
        stop(processes)
    assert all(p.poll() is not None for p in processes)

    report = json.loads((output / "report.json").read_text())
    assert report["status"] == "completed" and report["stages"] == ["upload", "evaluation"]
    assert all(not missing for missing in report["missing"].values())
    assert sorted(report["clients"].values()) == list(range(N_NODES))
    partition = {int(node): label for node, label in report["clients"].items()}
    node_of = {label: node for node, label in partition.items()}
    with np.load(output / "global_head.npz", allow_pickle=False) as head:
        deployed = LinearScores(head["classes"], head["coef"], head["intercept"])

    node_configs = {i: {"partition-id": i} for i in range(N_NODES)}
    _, expected, tests = in_process(node_configs, config)
    m = deployed.coef.shape[1]
    for client, (Z_test, y_test) in tests.items():
        np.testing.assert_array_equal(deployed.predict(Z_test), expected.predict(Z_test))
        accuracy = report["accuracy"][str(node_of[client])]
        assert accuracy == np.mean(expected.predict(Z_test) == y_test)
    values = m * (m + 1) // 2 + m + 1
    assert report["summary_values"] == values
    assert set(report["summary_payload_bytes"].values()) == {28 + 8 + (values - 1) * 8}

    # a hostile node's crafted bytes: rejected with the protocol's error, the others' run is run 1
    survived = json.loads((Path(hostile.output_dir) / "report.json").read_text())
    assert survived["status"] == "completed"
    (bad,) = survived["rejected"]["upload"]
    assert "array 'counts'" in survived["rejected"]["upload"][bad]
    assert bad not in survived["clients"] and len(survived["nodes"]) == N_NODES + 1
    assert survived["accuracy"] == report["accuracy"]
    with np.load(Path(hostile.output_dir) / "global_head.npz", allow_pickle=False) as head:
        np.testing.assert_array_equal(head["coef"], deployed.coef)

    # tau = "auto": the in-process search over the same clients, in the server's order
    chosen = json.loads((Path(auto.output_dir) / "report.json").read_text())
    assert chosen["stages"] == ["upload", "updates", "validation", "refit", "evaluation"]
    rank = {node: i for i, node in enumerate(sorted(partition))}  # clients ordered by node id
    parts, X, y, client = client_rows(node_configs, auto)
    by_rank = np.array([rank[node_of[c]] for c in client])
    search = FederatedTauSearch(auto.make_head(), random_state=auto.seed)
    assert search.head.get_params()["C"] == 0.1
    search.fit(X, y, client=by_rank)
    assert chosen["tau"] == search.best_tau_
    assert chosen["selection"]["chosen"] == search.best_params_
    np.testing.assert_allclose(
        chosen["selection"]["mean_validation_score"],
        search.cv_results_["mean_validation_score"],
        rtol=0,
        atol=1e-12,
    )
    for p in parts:
        node = node_of[p.client]
        predicted = search.predict(p.X_test, client=np.full(p.y_test.shape, rank[node]))
        assert chosen["accuracy"][str(node)] == np.mean(predicted == p.y_test)
