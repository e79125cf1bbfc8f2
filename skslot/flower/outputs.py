"""What the ServerApp writes to its output directory, atomically and never stale."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from ..heads import LinearScores
from ..protocol import ProtocolReport

__all__ = ["OUTPUT_FILES", "write_outputs"]

OUTPUT_FILES = ("report.json", "global_head.npz", "reference.bin")


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_outputs(
    directory: str | Path,
    report: ProtocolReport,
    scores: LinearScores | None = None,
    reference: bytes | None = None,
) -> None:
    """``report.json``, and for a completed run ``global_head.npz`` and ``reference.bin``.

    Files of an earlier run are removed first, and each file is written
    atomically, so the directory never mixes two runs.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_FILES:
        (directory / name).unlink(missing_ok=True)
    if scores is not None:
        buffer = io.BytesIO()
        np.savez(buffer, classes=scores.classes, coef=scores.coef, intercept=scores.intercept)
        _write_atomically(directory / "global_head.npz", buffer.getvalue())
    if reference is not None:
        _write_atomically(directory / "reference.bin", reference)
    _write_atomically(directory / "report.json", report.to_json().encode())
