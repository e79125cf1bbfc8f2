"""A private client's budget over all its runs, kept on its own disk.

One run's releases compose to that run's budget
(:class:`~skslot.privacy.PrivacyLedger`); a client that takes part in
``k`` runs releases ``k`` times, each with fresh noise, and a server that
starts runs over and over could average the noise away.  A
:class:`LifetimeBudget` bounds what all of a client's runs release together:
each run is charged its ``(epsilon, delta)`` once, when it announces its plan,
and a run that would take the total past the lifetime budget is refused
before anything is released.  Runs compose by the basic composition theorem
(the epsilons add up, and the deltas): a bound that holds whatever each run
released (Dwork and Roth, "The Algorithmic Foundations of Differential
Privacy", 2014, theorem 3.16).

The record is a small JSON file the client keeps (the Flower node config's
``budget-file``), written atomically under a lock, so a restarted node, or
two runs at once, see every charge.  A refusal depends on the run count and
the budgets alone, never on the rows.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..defaults import LIFETIME_DELTA
from ._accounting import PrivacyBudgetExceeded


def run_key(noise_seed: int) -> str:
    """The record's key of one run: a digest of its secret noise seed (never the seed).

    A run's requests, retried or answered by a restored client, share the
    seed, so they are charged once; a new run draws a new seed.

    Parameters
    ----------
    noise_seed : int
        The run's secret noise seed (:attr:`~skslot.privacy.PrivacyLedger.seed`).

    Returns
    -------
    str

    Examples
    --------
    >>> from skslot.privacy import run_key
    >>> run_key(7) == run_key(7) != run_key(8)
    True
    """
    return hashlib.sha256(f"skslot-run:{int(noise_seed)}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class LifetimeBudget:
    """What a client releases over all its runs: a total ``(epsilon, delta)``, recorded on disk.

    Parameters
    ----------
    path : str or path-like
        The record (a JSON file; created on the first charge).
    epsilon : float
        The total epsilon of every run together, ``> 0``.
    delta : float, default=1e-4
        The total delta, in ``[0, 1)``.

    Examples
    --------
    >>> import tempfile, os
    >>> from skslot.privacy import LifetimeBudget
    >>> path = os.path.join(tempfile.mkdtemp(), "budget.json")
    >>> budget = LifetimeBudget(path, epsilon=16.0)
    >>> budget.charge("run-1", 8.0, 1e-5)
    >>> budget.charge("run-1", 8.0, 1e-5)  # the same run: charged once
    >>> budget.spent()
    (8.0, 1e-05)
    >>> budget.charge("run-2", 8.0, 1e-5)
    >>> budget.charge("run-3", 8.0, 1e-5)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    skslot.privacy.PrivacyBudgetExceeded: this client's lifetime budget ...
    """

    path: str | os.PathLike
    epsilon: float
    delta: float = LIFETIME_DELTA

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and 0.0 < self.epsilon < float("inf")):
            raise ValueError(
                f"a lifetime epsilon must be a finite number > 0, got {self.epsilon!r}"
            )
        if not (isinstance(self.delta, (int, float)) and 0.0 <= self.delta < 1.0):
            raise ValueError(f"a lifetime delta must lie in [0, 1), got {self.delta!r}")

    def spent(self) -> tuple[float, float]:
        """The epsilon and delta every recorded run has been charged together.

        Returns
        -------
        epsilon, delta : float
        """
        with self._locked() as runs:
            return _total(runs)

    def charge(self, run: str, epsilon: float, delta: float) -> None:
        """Charge one run's budget, once; refuse a run the lifetime budget does not cover.

        Parameters
        ----------
        run : str
            The run's key (:func:`run_key`); a run already charged is not
            charged again.
        epsilon, delta : float
            The run's budget.

        Raises
        ------
        PrivacyBudgetExceeded
            If the recorded runs and this one together exceed the lifetime
            budget (nothing is recorded then).
        """
        with self._locked() as runs:
            if run in runs:
                return
            spent_epsilon, spent_delta = _total(runs)
            if spent_epsilon + epsilon > self.epsilon * (1 + 1e-12) or (
                spent_delta + delta > self.delta * (1 + 1e-12)
            ):
                raise PrivacyBudgetExceeded(
                    f"this client's lifetime budget (epsilon {self.epsilon:g}, delta "
                    f"{self.delta:g}, recorded in {os.fspath(self.path)!r}) has epsilon "
                    f"{max(self.epsilon - spent_epsilon, 0.0):g} and delta "
                    f"{max(self.delta - spent_delta, 0.0):g} left after {len(runs)} run(s); "
                    f"this run asks for epsilon {epsilon:g}, delta {delta:g}"
                )
            runs[run] = [float(epsilon), float(delta)]

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The recorded runs, under an exclusive lock; written back atomically where changed."""
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                runs = _read(path)
                before = dict(runs)
                yield runs
                if runs != before:
                    _write(path, runs)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _total(runs: dict[str, Any]) -> tuple[float, float]:
    return (
        float(sum(epsilon for epsilon, _ in runs.values())),
        float(sum(delta for _, delta in runs.values())),
    )


def _read(path: Path) -> dict[str, Any]:
    """The record's runs; a record that is not one is an error, never an empty budget."""
    if not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
        runs = record["runs"]
        if not isinstance(runs, dict) or not all(
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v)
            for v in runs.values()
        ):
            raise ValueError("runs must map run keys to [epsilon, delta]")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"the lifetime budget's record {os.fspath(path)!r} cannot be read ({exc}); "
            "it is never reset silently"
        ) from None
    return runs


def _write(path: Path, runs: dict[str, Any]) -> None:
    """Replace the record atomically (a crash leaves the old one or the new one)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"format": "skslot-lifetime-budget/1", "runs": runs}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
