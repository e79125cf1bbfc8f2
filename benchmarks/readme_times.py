"""The README's commands, timed on this machine, and whether they print the README's digits.

Runs, one after the other in fresh processes: the README's Python example, the
main job ``skslot bench`` (two runs at a time, one BLAS thread each: its
default) and ``skslot bench --n-jobs 1`` (one run at a time, one BLAS thread).
For each: the wall time, the CPU time of the process and its children, and
whether the lines it prints are the README's (the example's output; the
bench's two tables, digit for digit).  The machine's cores and load average
are printed with them: measure on an idle machine.

Usage: ``python benchmarks/readme_times.py > docs/results/readme_times.md``
(about 4 minutes on 2 cores); ``--quick``: a one-seed bench on one alpha, whose
digits are not the README's (the smoke test's).
"""

from __future__ import annotations

import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICK = ["--seeds", "1", "--alphas", "0.1", "--taus", "0,0.6", "--heads", "FedCGS", "--no-auto"]


def readme_blocks(language: str) -> list[str]:
    """The README's fenced blocks of ``language``."""
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def table_lines(text: str) -> list[str]:
    """The markdown table rows of a printed text."""
    return [line for line in text.splitlines() if line.startswith("|")]


def timed(command: list[str], cwd: str) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (the command's process tree) and stdout of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    skslot = [sys.executable, "-m", "skslot", "bench", "--quiet"] + (QUICK if quick else [])
    (example,) = readme_blocks("python")
    printed_example, printed_bench = readme_blocks("text")[:2]
    load = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as work:
        script = Path(work) / "example.py"
        script.write_text(example)
        wall, cpu, out = timed([sys.executable, str(script)], work)
        rows.append(("the README's example", wall, cpu, out == printed_example))
        tables = []
        runs = (("skslot bench", []), ("skslot bench --n-jobs 1", ["--n-jobs", "1"]))
        for i, (name, jobs) in enumerate(runs):
            out_dir = str(Path(work) / f"out-{i}")  # not a package's name: cwd is on sys.path
            wall, cpu, out = timed([*skslot, *jobs, "--out", out_dir], work)
            tables.append(table_lines(out))
            rows.append((name, wall, cpu, table_lines(out) == table_lines(printed_bench)))
    print("# The README's commands: time and digits\n")
    print(
        f"`python benchmarks/readme_times.py{' --quick' if quick else ''}` on "
        f"{os.cpu_count()} cores ({platform.machine()}, Python {platform.python_version()}), "
        f"load average {load:.2f} at the start; `skslot bench` runs two runs at a time by "
        "default, every run on one BLAS thread.\n"
    )
    print("| command | wall (s) | CPU (s) | prints the README's digits |")
    print("|---|---|---|---|")
    for name, wall, cpu, same in rows:
        print(f"| {name} | {wall:.0f} | {cpu:.0f} | {'yes' if same else 'no'} |")
    print(
        f"\nThe two benchmark runs print the same tables: "
        f"{'yes' if tables[0] == tables[1] else 'no'}."
    )


if __name__ == "__main__":
    main(sys.argv[1:])
