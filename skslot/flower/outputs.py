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

__all__ = [
    "LAST_COMPLETED",
    "LATEST",
    "OUTPUT_FILES",
    "RunOutputs",
    "utc_now",
    "write_outputs",
]

OUTPUT_FILES = ("report.json", "global_head.npz", "reference.bin")
#: Pointer files in ``output_dir``: each holds one run folder's name.
LATEST, LAST_COMPLETED = "latest", "last-completed"


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


def write_outputs(
    directory: str | Path,
    report: ProtocolReport,
    scores: LinearScores | None = None,
    reference: bytes | None = None,
) -> None:
    """One run's files in ``directory``: ``report.json``, and with a head its head and reference.

    Files of :data:`OUTPUT_FILES` already there are removed first and each
    file is written atomically, the report last, so the folder never mixes
    two writes.  :class:`RunOutputs` gives each run its own folder.

    Parameters
    ----------
    directory : str or Path
        The run's folder (created if needed).
    report : ProtocolReport
        Written to ``report.json``.
    scores : LinearScores, optional
        The global head, written to ``global_head.npz``.
    reference : bytes, optional
        The encoded reference summary, written to ``reference.bin``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_FILES[1:]:
        (directory / name).unlink(missing_ok=True)
    if scores is not None:
        buffer = io.BytesIO()
        np.savez(buffer, classes=scores.classes, coef=scores.coef, intercept=scores.intercept)
        _write_atomically(directory / "global_head.npz", buffer.getvalue())
    if reference is not None:
        _write_atomically(directory / "reference.bin", reference)
    _write_atomically(directory / "report.json", report.to_json().encode())


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

    def _point(self, pointer: str) -> None:
        _write_atomically(self.output_dir / pointer, f"{self.path.name}\n".encode())

    def start(self, report: ProtocolReport) -> None:
        """``report.json`` saying ``running``, and ``latest`` pointing at this run.

        Parameters
        ----------
        report : ProtocolReport
            The run's report so far.
        """
        write_outputs(self.path, report)
        self._point(LATEST)

    def completed(self, report: ProtocolReport, scores: LinearScores, reference: bytes) -> None:
        """The head, the reference, the final report, then ``last-completed``.

        Parameters
        ----------
        report : ProtocolReport
            The final report.
        scores : LinearScores
            The global head.
        reference : bytes
            The encoded reference summary.
        """
        write_outputs(self.path, report, scores, reference)
        self._point(LAST_COMPLETED)

    def failed(self, report: ProtocolReport) -> None:
        """The final report of a failed run (no head, no reference; no pointer moves).

        Parameters
        ----------
        report : ProtocolReport
            The final report.
        """
        write_outputs(self.path, report)
