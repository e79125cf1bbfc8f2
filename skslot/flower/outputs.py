"""What the ServerApp writes to its output directory: one folder per run, never overwritten.

Layout of ``output_dir``::

    output_dir/
        run-<flower run id>/        one folder per run (a UTC time stamp without a run id)
            report.json             "running" from the start, then "completed" or "failed"
            global_head.npz         completed runs only (classes, coef, intercept)
            reference.bin           completed runs only (the reference summary)
        latest                      text: the folder of the most recent run (written at its start)
        last-completed              text: the folder of the most recent completed run

A run never deletes or rewrites another run's files: its folder is created
new (a name already taken gets a suffix), and every file is written to a
temporary name and moved into place, so a reader sees a whole file or none.
``global_head.npz`` and ``reference.bin`` are written before the final
``report.json``, and ``last-completed`` after it, so a folder whose report
says ``completed`` is complete.  A server killed mid-run leaves its folder's
report at ``"running"``: it never looks completed.
"""

from __future__ import annotations

import contextlib
import io
import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..heads import LinearScores
from ..protocol import ProtocolReport

__all__ = ["LAST_COMPLETED", "LATEST", "RunOutputs", "utc_now"]

#: Pointer files in ``output_dir``: each holds one run folder's name.
LATEST, LAST_COMPLETED = "latest", "last-completed"
#: The pointer each status of a run's report moves (a failed run moves none).
_POINTERS = {"running": LATEST, "completed": LAST_COMPLETED}


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (``2026-01-31T12:00:00Z``).

    Returns
    -------
    str
    """
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class RunOutputs:
    """One run's folder in ``output_dir``, created new at the run's start.

    Parameters
    ----------
    output_dir : path
        The deployment's output directory (created if needed).
    run_id : int or None
        The Flower run id: the folder is ``run-<run_id>``; without one (0 or
        ``None``) it is the start's UTC time stamp.  A name already taken gets
        ``-2``, ``-3``, ... so no earlier run's folder is ever reused.
    """

    def __init__(self, output_dir: str | Path, run_id: int | None = None) -> None:
        self.output_dir = Path(output_dir)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        stem = f"run-{run_id}" if run_id else datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        for k in range(1, 10_000):
            self.path = self.output_dir / (stem if k == 1 else f"{stem}-{k}")
            with contextlib.suppress(FileExistsError):
                self.path.mkdir()
                break
        else:  # pragma: no cover - ten thousand runs with one id
            raise FileExistsError(f"no free run folder {stem}-<k> in {self.output_dir}")

    def write(
        self,
        report: ProtocolReport,
        scores: LinearScores | None = None,
        reference: bytes | None = None,
    ) -> None:
        """The run's files, each written atomically, the report last; then the pointer its
        status moves.

        A ``running`` report moves ``latest`` to this run, a ``completed``
        one (with the head and the reference) ``last-completed``; a
        ``failed`` one moves none.

        Parameters
        ----------
        report : ProtocolReport
            Written to ``report.json``.
        scores : LinearScores, optional
            The global head, written to ``global_head.npz``.
        reference : bytes, optional
            The encoded reference summary, written to ``reference.bin``.
        """
        if scores is not None:
            buffer = io.BytesIO()
            np.savez(buffer, classes=scores.classes, coef=scores.coef, intercept=scores.intercept)
            _write_atomically(self.path / "global_head.npz", buffer.getvalue())
        if reference is not None:
            _write_atomically(self.path / "reference.bin", reference)
        _write_atomically(self.path / "report.json", report.to_json().encode())
        if report.status in _POINTERS:
            pointer = self.output_dir / _POINTERS[report.status]
            _write_atomically(pointer, f"{self.path.name}\n".encode())
