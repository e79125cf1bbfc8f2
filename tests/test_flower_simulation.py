"""Flower's Simulation Engine: 20-odd virtual clients, the same apps, the in-process answer.

A SuperLink with the simulation runtime (``flower-superlink --simulation``)
runs skslot's unchanged ServerApp and ClientApp on Ray, limited to the
machine's 2 cores; each virtual SuperNode is client ``partition-id`` of the
paper's partition with several clients per domain (Flower gives every virtual
node its ``partition-id``).  The global head's predictions must equal the
in-process protocol's on every client's test rows, and no Ray process may
outlive the run.  The embedded digits features (three domains, 7 clients
each, 256-d: :func:`skslot.datasets.load_digits_effnet`), in every clone.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip(
    "ray", reason="the simulation extra is not installed: pip install '.[simulation]'"
)

from skslot.flower import DeploymentConfig, write_flower_app

from .conftest import few_rows_per_client
from .test_flower import in_process
from .test_flower_deployment import flower_env, free_port, launch, stop, tails, wait_for_port

RAY_PROCESSES = ("raylet", "gcs_server", "ray::", "dashboard", "flwr-simulation")


def ray_processes() -> set[int]:
    """PIDs whose command line names a Ray (or Flower simulation) process."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if any(name in cmdline for name in RAY_PROCESSES):
                found.add(int(entry.name))
    return found


@few_rows_per_client  # twenty clients of the 256-d digits, checked in process
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find Ray")
def test_simulation_engine_with_twenty_virtual_clients_equals_in_process(tmp_path):
    dataset, per_domain = "digits", 7  # the embedded deep features: 3 domains
    n_clients = 3 * per_domain
    config = DeploymentConfig(
        head="FedCGS",
        tau=0.4,
        label_mix="federation",  # the in-process pipeline it is compared with: every class
        screen="off",  # the in-process pipeline it is compared with has no screening
        alpha=None,  # no client is left without rows
        dataset=dataset,
        clients_per_domain=per_domain,
        summary_dtype="float64",
        num_clients=n_clients,
        min_clients=n_clients,
        connect_timeout=120.0,
        output_dir=str(tmp_path / "out"),
    )
    app = write_flower_app(tmp_path / "app", config)
    port = free_port()
    env = flower_env(tmp_path, port)
    bin_dir = Path(sys.executable).parent
    logs = tmp_path / "logs"
    logs.mkdir()
    before = ray_processes()
    link = launch(
        logs,
        "superlink",
        "flower-superlink",
        "--insecure",
        "--simulation",
        "--port",
        str(port),
        "--database",
        str(tmp_path / "state.db"),
        env=env,
        cwd=tmp_path,
    )
    try:
        wait_for_port(port, link)
        federation = f"num-supernodes={n_clients} init-args-num-cpus=2 client-resources-num-cpus=1"
        run = subprocess.run(
            [
                str(bin_dir / "flwr"),
                "run",
                str(app),
                "local",
                "--stream",
                "--federation-config",
                federation,
            ],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
        (logs / "flwr-run.log").write_text(run.stdout + run.stderr)
        assert run.returncode == 0, tails(logs)
    finally:
        stop([link])
    # the simulation's Ray workers end with the SuperLink; give their exit the stop's bound
    deadline = time.monotonic() + 15.0
    while ray_processes() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not ray_processes() - before, "Ray processes outlived the run"

    import json

    from skslot.flower.outputs import LAST_COMPLETED

    from .flower_harness import read_pointer

    folder = read_pointer(tmp_path / "out", LAST_COMPLETED)  # the run's own folder
    assert folder is not None, tails(logs)
    report = json.loads((folder / "report.json").read_text())
    assert report["status"] == "completed", tails(logs)
    assert len(report["accuracy"]) == n_clients >= 20 and not report["rejected"]
    with np.load(folder / "global_head.npz") as head:
        coef, intercept, classes = head["coef"], head["intercept"], head["classes"]
    node_configs = {k: {"partition-id": k} for k in range(n_clients)}
    _, expected, tests = in_process(node_configs, config)
    accuracy = {report["clients"][node]: value for node, value in report["accuracy"].items()}
    for client, (Z_test, y_test) in tests.items():
        predicted = classes[np.argmax(Z_test @ coef.T + intercept, axis=1)]
        np.testing.assert_array_equal(predicted, expected.predict(Z_test), err_msg=f"{client}")
        assert accuracy[client] == pytest.approx(np.mean(predicted == y_test), abs=1e-12)
