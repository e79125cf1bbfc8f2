"""Where the wall time of a small Flower deployment goes, on one machine.

Starts one SuperLink and three SuperNodes on 127.0.0.1 (the embedded digits, the
paper's partition at alpha 0.1), runs the default FedCGS App with skslot's
launcher (:func:`skslot.flower.launch.launch`) and reports, per configuration:
the launcher's wall time (start of ``flwr run`` to its outcome), each stage's
wait as the ServerApp measured it (``report.json``'s ``waits``), and the import
time of the ClientApp module.  The configurations differ only in the
environment the SuperNodes run with (Flower's SuperExec polling interval, the
BLAS threads of each ClientApp process); each is run ``REPEATS`` times,
interleaved, every run in a fresh federation.

Usage: ``python benchmarks/deployment_time.py [REPEATS] > docs/results/deployment_time.md``
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from skslot.flower import DeploymentConfig, write_flower_app
from skslot.flower.launch import launch

BIN = Path(sys.executable).parent
OFFLINE = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
}
N_NODES = 3
#: name -> (SuperNode environment, launcher poll interval in seconds while the stream is down)
CONFIGURATIONS = {
    "Flower's defaults": ({}, 2.0),
    "SuperExec polls every 0.05 s": ({"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.05"}, 2.0),
    "one BLAS thread per node process": (
        {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        2.0,
    ),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on port {port}")


def wait_for_log(path: Path, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{path.name} never said {text!r}")


def start(command: list[str], env: dict, log: Path, cwd: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(
            [str(BIN / command[0]), *command[1:]],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in processes:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def one_run(root: Path, node_env: dict, poll: float) -> dict:
    """One SuperLink, three SuperNodes, one run: its timings."""
    port = free_port()
    home = root / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    env = {**os.environ, **OFFLINE, "FLWR_HOME": str(home)}
    config = DeploymentConfig(
        dataset="digits", num_clients=N_NODES, output_dir=str(root / "out"), progress_interval=0
    )
    app = write_flower_app(root / "app", config)
    processes = []
    try:
        began = time.monotonic()
        processes.append(
            start(
                [
                    "flower-superlink",
                    "--insecure",
                    "--port",
                    str(port),
                    "--database",
                    ":flwr-in-memory:",
                ],
                env,
                root / "superlink.log",
                root,
            )
        )
        wait_for_port(port)
        for i in range(N_NODES):
            processes.append(
                start(
                    [
                        "flower-supernode",
                        "--insecure",
                        "--superlink",
                        f"127.0.0.1:{port}",
                        "--port",
                        str(free_port()),
                        "--node-config",
                        f"partition-id={i}",
                    ],
                    {**env, **node_env},
                    root / f"supernode{i}.log",
                    root,
                )
            )
        for i in range(N_NODES):  # timed from here on: a federation whose nodes are up
            wait_for_log(root / f"supernode{i}.log", "SuperNode ID")
        up = time.monotonic() - began
        with open(root / "run.log", "w") as log:
            t0 = time.monotonic()
            outcome = launch(app, "local", env=env, out=log, timeout=300, poll_interval=poll)
            wall = time.monotonic() - t0
    finally:
        stop(processes)
    if outcome.exit_code != 0:
        raise RuntimeError(f"{outcome.line}\n{(root / 'run.log').read_text()[-3000:]}")
    waits = {stage: w["seconds"] for stage, w in outcome.report["waits"].items()}
    return {"wall": wall, "up": up, "waits": waits}


def import_time() -> float:
    """Seconds for a fresh interpreter to import the ClientApp module (median of 3)."""
    times = []
    for _ in range(3):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", "import skslot.flower.client_app"], check=True)
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def render(records: dict[str, list[dict]], import_seconds: float) -> str:
    """The markdown page: a table of medians and ranges, then every run."""
    repeats = max(len(rs) for rs in records.values())
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    stages = [
        s
        for s in ("connect", "upload", "evaluation")
        if any(s in r["waits"] for rs in records.values() for r in rs)
    ]
    lines = [
        "# A small deployment's wall time\n",
        f"`python benchmarks/deployment_time.py {repeats}`: one SuperLink and {N_NODES} "
        "SuperNodes on 127.0.0.1 (started, and connected, before the clock starts), the "
        "default FedCGS App on the embedded digits (alpha 0.1), "
        f"{repeats} runs per configuration, interleaved; {os.cpu_count()} cores, "
        f"OMP_NUM_THREADS={threads}. Importing the ClientApp module (with Flower) in a "
        f"fresh interpreter takes {import_seconds:.2f} s (median of 3).\n",
        "| configuration | run, wall (s): median (min - max) | "
        + " | ".join(f"{s} (s)" for s in stages)
        + " |",
        "|---|---|" + "---|" * len(stages),
    ]
    for name, rs in records.items():
        walls = [r["wall"] for r in rs]
        cells = [f"{statistics.median(walls):.1f} ({min(walls):.1f} - {max(walls):.1f})"]
        cells += [f"{statistics.median(r['waits'].get(s, 0.0) for r in rs):.1f}" for s in stages]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "\nThe run's wall time runs from `flwr run` to the launcher's outcome: starting the "
        "ServerApp, the stages, and the launcher learning the end. Each stage's wait "
        "(median) runs from the ServerApp's push to the last reply; each node answers a "
        "message in a new ClientApp process (Flower's process isolation), which imports "
        "the library and Flower, and a SuperNode with nothing to do polls its SuperLink "
        "every 3 s (Flower's fixed interval). The slowest run of a configuration was "
        "its first (cold file caches).",
        "\nEvery run:\n",
        "```json",
        json.dumps({"import_seconds": round(import_seconds, 3), "runs": records}, indent=1),
        "```",
    ]
    return "\n".join(lines)


def main(repeats: int = 3) -> None:
    records: dict[str, list[dict]] = {name: [] for name in CONFIGURATIONS}
    for _ in range(repeats):
        for name, (node_env, poll) in CONFIGURATIONS.items():
            with tempfile.TemporaryDirectory() as tmp:
                records[name].append(one_run(Path(tmp), node_env, poll))
    print(render(records, import_time()))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
