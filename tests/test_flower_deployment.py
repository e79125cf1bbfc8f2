"""A real Flower deployment on 127.0.0.1: one SuperLink, SuperNodes, four runs into one ``out``.

Each SuperNode owns one client of the paper's partition of the embedded digits
features (``dataset = "digits"``: three domains, 256 dimensions, in every
clone).  All runs write to one output directory, each into its own
``run-<id>`` folder:

1. fixed tau, started with skslot's launcher (:func:`skslot.flower.launch.launch`):
   the global head must predict exactly as the in-process scikit-learn
   pipeline fitted on the same partitions and seed;
2. ``tau = "auto"`` with a non-default head configuration (O-FedAvg,
   ``C = 0.1``), started with the documented ``flwr run --stream`` and read
   through ``out/latest``: its choice, validation table and predictions must
   equal those of the in-process :class:`~skslot.FederatedTauSearch`;
3. a fourth node joins and sends crafted bytes: the run completes without it
   and equals run 1, and the launcher exits 4 (a partial run), naming the node
   and why in its last line;
4. a fifth node whose data file is missing joins, with ``min-clients = 5``:
   the launcher must say the run failed (exit code 1, the server's reason),
   and run 3's folder stays as it was, still ``last-completed``.

Every client's reported accuracy must equal the in-process one.  Every process
is started in its own session and stopped by its PID (the whole group), also
when the test fails.  A line per run goes to the terminal as it ends, and a
failure shows the runs' stage lines and the tails of every log.

Waits, each limit at least twice the longest time measured for it (two runs
of this test on the 2-core development machine, shared with other jobs: 6 min
and 4 min 20 s in all, 114 to 155 s of CPU): the SuperLink listening 4 s
(limit 30 s); the nodes connected 0.1 s (connect-timeout 60 s); the longest
stage 44 s (O-FedAvg's ``updates``, six local heads per client; reply-timeout
120 s); the longest run 125 s (run 2, six stages; 300 s); stopping every
process 3 s (15 s).  Each stage takes 10 to 20 s however small its work: a
SuperNode starts one ClientApp process per message.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
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

from skslot import FederatedTauSearch, SLOTTransformer
from skslot.flower import DeploymentConfig, write_flower_app
from skslot.flower.launch import COMPLETED, FAILED, PARTIAL
from skslot.flower.launch import launch as launch_run
from skslot.flower.outputs import LAST_COMPLETED, LATEST
from skslot.heads import LinearScores

from .conftest import few_rows_per_client, short_local_training
from .flower_harness import read_pointer
from .test_flower import client_rows, in_process

OFFLINE = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}
N_NODES = 3
# The limits, each at least twice the longest time measured for it (module docstring).
PORT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 60.0  # the run config's connect-timeout: the nodes of a run connecting
REPLY_TIMEOUT = 120.0  # the run config's reply-timeout: one stage's replies
RUN_TIMEOUT = 300.0  # one run, start to finish (the launcher's, and flwr run's)
STOP_TIMEOUT = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = PORT_TIMEOUT) -> None:
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
    deadline = time.monotonic() + STOP_TIMEOUT
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
    """The skslot lines of the runs' logs, then the tail of every log."""
    stages = [
        line
        for f in sorted(logs.glob("run-*.log"))
        for line in f.read_text().splitlines()
        if "skslot:" in line
    ]
    return "\n".join(
        ["--- skslot lines of the runs", *stages]
        + [f"--- {f.name}\n{f.read_text()[-3000:]}" for f in sorted(logs.glob("*.log"))]
    )


# Checking the runs in process: O-FedAvg at max_iter = 50 (run 2), and a partition at
# alpha = 0.1 whose smaller clients hold fewer rows than the 256 dimensions
@short_local_training
@few_rows_per_client
def test_flower_deployment_on_localhost(tmp_path, capsys):
    bin_dir = Path(sys.executable).parent
    link_port = free_port()
    env = flower_env(tmp_path, link_port)
    out = tmp_path / "out"
    config = DeploymentConfig(
        head="FedCGS",
        tau=0.4,
        label_mix="federation",  # the in-process pipeline it is compared with: every class
        alpha=0.1,
        seed=0,
        dataset="digits",  # a run-config value: the node configs only give partition-id
        summary_dtype="float64",
        num_clients=N_NODES,
        min_clients=N_NODES,
        connect_timeout=CONNECT_TIMEOUT,
        reply_timeout=REPLY_TIMEOUT,
        progress_interval=5.0,
        output_dir=str(out),
    )
    app_dir = write_flower_app(tmp_path / "app", config)
    # the second run: a non-default head configuration, through head-params, with tau chosen
    # (its local heads unclipped, as the in-process search it is compared with averages them)
    auto = dataclasses.replace(
        config,
        head="O-FedAvg",
        head_params='{"C": 0.1, "max_iter": 50}',
        tau="auto",
        clip_norm_ratio=None,
    )
    auto_dir = write_flower_app(tmp_path / "app-auto", auto)
    # the third run: a fourth node joins and sends crafted bytes; the run completes without it
    # (without the screening: four nodes would hold validation rows out, three do not)
    hostile = dataclasses.replace(config, num_clients=N_NODES + 1, screen="off")
    hostile_dir = write_flower_app(tmp_path / "app-hostile", hostile)
    shutil.copytree(Path(__file__).parent / "hostile_app", hostile_dir / "hostile_app")
    toml = hostile_dir / "pyproject.toml"
    toml.write_text(toml.read_text().replace('"skslot.flower.client_app:app"', '"hostile_app:app"'))
    logs = tmp_path / "logs"
    logs.mkdir()

    processes: list[subprocess.Popen] = []
    clock = time.monotonic()

    def say(line: str) -> None:
        with capsys.disabled():
            print(f"\n[deployment test, {time.monotonic() - clock:.0f} s] {line}", flush=True)

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

    def launched(n: int, directory: Path, *run_config: str):
        """Run ``directory`` with skslot's launcher; its log goes to ``run-<n>.log``."""
        began = time.monotonic()
        with open(logs / f"run-{n}.log", "w") as log:
            outcome = launch_run(
                directory, "local", run_config=run_config, env=env, out=log, timeout=RUN_TIMEOUT
            )
        say(f"run {n}: {outcome.line} ({time.monotonic() - began:.0f} s{waited(outcome.folder)})")
        return outcome

    def waited(folder: Path | None) -> str:
        """What each stage of a run waited, from its report."""
        if folder is None or not (folder / "report.json").exists():
            return ""
        waits = json.loads((folder / "report.json").read_text())["waits"]
        return "".join(f"; {stage} {w['seconds']:.0f} s" for stage, w in waits.items())

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
        say("SuperLink listening")
        for i in range(N_NODES):
            supernode(f"supernode{i}", f"partition-id={i}")

        first = launched(1, app_dir)
        assert first.exit_code == COMPLETED, tails(logs)

        began = time.monotonic()
        run = subprocess.run(
            [str(bin_dir / "flwr"), "run", str(auto_dir), "local", "--stream"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
        (logs / "run-2.log").write_text(run.stdout + run.stderr)
        second = read_pointer(out, LATEST)
        took = f"{time.monotonic() - began:.0f} s{waited(second)}"
        say(f"run 2: flwr run --stream exited {run.returncode} ({took})")
        assert run.returncode == 0, tails(logs)

        supernode("supernode-hostile", "partition-id=0 hostile=1")
        third = launched(3, hostile_dir)
        assert third.exit_code == PARTIAL, tails(logs)
        kept = {p.name: p.read_bytes() for p in third.folder.iterdir()}

        supernode("supernode-broken", f"data='{tmp_path / 'missing.npz'}'")
        fourth = launched(4, hostile_dir, "num-clients=5 min-clients=5")
        assert fourth.exit_code == FAILED, tails(logs)
    finally:
        began = time.monotonic()
        stop(processes)
        say(f"stopped every process ({time.monotonic() - began:.0f} s)")
    assert all(p.poll() is not None for p in processes)

    # one folder per run; the failed run is the latest, the hostile one the last completed
    folders = {first.folder, second, third.folder, out / f"run-{fourth.run_id}"}
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [LATEST, LAST_COMPLETED, *(f.name for f in folders)]
    )
    assert read_pointer(out, LATEST) == out / f"run-{fourth.run_id}"
    assert read_pointer(out, LAST_COMPLETED) == third.folder
    assert {p.name: p.read_bytes() for p in third.folder.iterdir()} == kept
    failed = json.loads((out / f"run-{fourth.run_id}" / "report.json").read_text())
    assert sorted(p.name for p in (out / f"run-{fourth.run_id}").iterdir()) == ["report.json"]
    assert failed["status"] == "failed" and failed["run_id"] == fourth.run_id
    assert "fewer than min_clients = 5" in failed["error"] and "missing.npz" in failed["error"]
    assert fourth.reason == re.sub(r"\s+", " ", failed["error"]).strip()

    report = first.report
    assert report == json.loads((first.folder / "report.json").read_text())
    assert report["status"] == "completed" and report["stages"] == ["upload", "evaluation"]
    assert report["run_id"] == first.run_id and first.folder.name == f"run-{first.run_id}"
    assert all(not missing for missing in report["missing"].values())
    assert sorted(report["clients"].values()) == list(range(N_NODES))
    assert set(report["waits"]) == {"connect", "upload", "evaluation"}
    assert report["waits"]["connect"]["nodes"] == N_NODES
    partition = {int(node): label for node, label in report["clients"].items()}
    node_of = {label: node for node, label in partition.items()}
    with np.load(first.folder / "global_head.npz", allow_pickle=False) as head:
        deployed = LinearScores(head["classes"], head["coef"], head["intercept"])

    node_configs = {i: {"partition-id": i} for i in range(N_NODES)}
    _, expected, tests = in_process(node_configs, config)
    m = deployed.coef.shape[1]
    assert m == 256
    for client, (Z_test, y_test) in tests.items():
        np.testing.assert_array_equal(deployed.predict(Z_test), expected.predict(Z_test))
        accuracy = report["accuracy"][str(node_of[client])]
        assert accuracy == np.mean(expected.predict(Z_test) == y_test)
    # FedCGS: each node sends its shrinkage, the server derives the summary from the Gram
    assert set(report["summary_values"].values()) == {1}
    assert set(report["summary_payload_bytes"].values()) == {8}

    # a hostile node's crafted bytes: rejected with the protocol's error, the others' run is run 1
    survived = third.report
    assert survived["status"] == "completed"
    (bad,) = survived["rejected"]["upload"]
    assert "array 'counts'" in survived["rejected"]["upload"][bad]
    assert bad not in survived["clients"] and len(survived["nodes"]) == N_NODES + 1
    assert f"with {N_NODES} of {N_NODES + 1} nodes; node {bad} rejected at the upload stage" in (
        third.line
    )
    assert survived["accuracy"] == report["accuracy"]
    with np.load(third.folder / "global_head.npz", allow_pickle=False) as head:
        np.testing.assert_array_equal(head["coef"], deployed.coef)

    # tau = "auto": the in-process search over the same clients, in the server's order
    chosen = json.loads((second / "report.json").read_text())
    assert chosen["status"] == "completed"
    assert chosen["stages"] == ["upload", "updates", "validation", "refit", "evaluation"]
    assert "the screening needs 4" in chosen["screening"]["skipped"]  # three nodes
    rank = {node: i for i, node in enumerate(sorted(partition))}  # clients ordered by node id
    parts, X, y, client = client_rows(node_configs, auto)
    by_rank = np.array([rank[node_of[c]] for c in client])
    search = FederatedTauSearch(
        auto.make_head(), slot=SLOTTransformer(label_mix=auto.label_mix), random_state=auto.seed
    )
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
