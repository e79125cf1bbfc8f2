"""The benchmark scripts run (tiny sizes): they are not timed here, only kept working."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_gpu_bench_runs_on_cpu_tensors():
    pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch")
    result = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "gpu_bench.py"),
            "--device",
            "cpu",
            "--dims",
            "32",
            "--clients",
            "2",
            "--rows",
            "64",
            "--transform-rows",
            "500",
            "--budget",
            "30",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    for title in ("## Barycenter", "## Summaries", "## Transform"):
        assert title in result.stdout
    assert "| 32 | 2 | float32 |" in result.stdout
