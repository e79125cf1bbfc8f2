"""Run a Flower App on a SuperLink and wait for its outcome: non-zero when the run failed.

``flwr run APP SUPERLINK --stream`` exits 0 once the log stream ends, whether the
ServerApp completed or raised (Flower 1.42: ``flwr.cli.run`` starts the run and
streams its log, and ``flwr.cli.log`` ends the stream when the run is
finished, whatever its sub-status).  :func:`run_and_wait` starts the run,
streams its log, then reads the run's own ``report.json``
(``output-dir/run-<id>/``) when it can see that folder: a stream that ended
with a report that says ``completed`` is a completed run; otherwise it asks
the SuperLink how the run ended (``flwr ls SUPERLINK --run-id ID --format
json``: ``finished:completed``, ``finished:failed`` or ``finished:stopped``).  It
keeps waiting through a SuperLink restart (the log stream is attached again,
without repeating what was shown), up to ``reconnect_timeout`` seconds of
unreachable SuperLink.

Its exit codes: :data:`COMPLETED` (0), :data:`FAILED` (1: the run failed or was
stopped), :data:`NOT_STARTED` (2: the SuperLink refused or could not be
reached), :data:`UNKNOWN` (3: the outcome could not be learnt in time),
:data:`PARTIAL` (4: the run completed, but a node the server addressed was
rejected or missing; the outcome line names each with why; 0 instead when the
run config sets ``accept-partial = true``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..protocol.report import left_out
from .groups import RunSettings

__all__ = [
    "COMPLETED",
    "FAILED",
    "NOT_STARTED",
    "PARTIAL",
    "UNKNOWN",
    "RunOutcome",
    "launch",
    "run_and_wait",
]

COMPLETED, FAILED, NOT_STARTED, UNKNOWN, PARTIAL = 0, 1, 2, 3, 4

_ACCEPT_PARTIAL = RunSettings.setting("accept_partial").key
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Seconds one ``flwr run`` (start only) or ``flwr ls`` call may take.
_CLI_TIMEOUT = 120.0


@dataclass(frozen=True)
class RunOutcome:
    """How a launched run ended.

    Attributes
    ----------
    exit_code : int
        :data:`COMPLETED`, :data:`PARTIAL`, :data:`FAILED`, :data:`NOT_STARTED` or
        :data:`UNKNOWN`.
    run_id : int or None
        The Flower run id (``None`` when the run was not started).
    status : str
        Flower's status of the run (``"finished:completed"``, ...), or what
        went wrong before one was known.
    reason : str
        One line: why the run failed, or what it achieved.
    folder : Path or None
        The run's output folder, when the launcher could read its report.
    report : dict or None
        The run's ``report.json``, when the launcher could read it.
    """

    exit_code: int
    run_id: int | None
    status: str
    reason: str
    folder: Path | None = None
    report: dict | None = None

    @property
    def line(self) -> str:
        """The one-line summary :func:`run_and_wait` prints."""
        run = f"run {self.run_id}" if self.run_id is not None else "the run"
        word = {
            COMPLETED: "completed",
            PARTIAL: "completed without every node",
            FAILED: "failed",
            NOT_STARTED: "was not started",
        }
        return f"skslot: {run} {word.get(self.exit_code, 'has no known outcome')}: {self.reason}"


def _flwr() -> list[str]:
    """The ``flwr`` CLI of this environment (beside the interpreter), else the one on PATH."""
    found = shutil.which("flwr", path=Path(sys.executable).parent) or shutil.which("flwr")
    if found is None:
        raise FileNotFoundError("the Flower CLI 'flwr' is missing: pip install 'skslot[flower]'")
    return [found]


def _one_line(text: str, most: int = 600) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= most else text[: most - 3] + "..."


def _flwr_json(command: list[str], env: Mapping[str, str], key: str) -> tuple[Any, str]:
    """What a ``flwr ... --format json`` command answered under ``key``, else ``None`` and why."""
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, check=False, timeout=_CLI_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return None, f"flwr {command[1]} did not answer within {_CLI_TIMEOUT:g} s"
    try:
        payload = json.loads(done.stdout[done.stdout.index("{") :])
    except ValueError:  # no JSON object printed
        payload = None
    payload = payload if isinstance(payload, dict) else {}
    if payload.get("success") and payload.get(key):
        return payload[key], ""
    why = payload.get("error-message") or done.stderr or done.stdout
    return None, _one_line(why or "no reply")


def _run_config_dir(app_dir: Path, run_config: Sequence[str]) -> Path | None:
    """The ``output-dir`` the run will use: the App's default with the overrides applied."""
    from flwr.common.config import get_fused_config_from_dir, parse_config_args

    try:
        fused = get_fused_config_from_dir(app_dir, parse_config_args(list(run_config)))
    except Exception:  # an App or override Flower itself will refuse: no folder to read
        return None
    value = fused.get(RunSettings.setting("output_dir").key)
    return Path(value) if isinstance(value, str) and value else None


class _Stream:
    """``flwr log RUN SUPERLINK --stream`` copied to ``out``, attached again after a drop.

    Flower streams a run's log from its beginning; on a re-attach the part
    already shown is skipped, so a SuperLink restart does not repeat lines.
    """

    def __init__(self, command: list[str], env: Mapping[str, str], out: IO[str]) -> None:
        self.command, self.env, self.out = command, env, out
        self.shown = ""
        self.process: subprocess.Popen | None = None

    def follow(self, timeout: float | None) -> int | None:
        """Attach and copy the stream: its exit code once it ends, or ``None`` if it still runs
        after ``timeout`` seconds."""
        self.process = subprocess.Popen(
            self.command,
            env=dict(self.env),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # the CLI's error box when the link drops: said below
            text=True,
            bufsize=1,
        )
        copier = threading.Thread(target=self._copy, args=(self.process.stdout,), daemon=True)
        copier.start()
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        copier.join(timeout=5)
        return code

    def _copy(self, lines: IO[str]) -> None:
        position, replay = 0, True
        with lines:  # closed when the stream ends
            for line in lines:
                plain = _ANSI.sub("", line)
                if "Starting logstream for run_id" in plain or plain.startswith("Using SuperLink:"):
                    continue  # the CLI's own lines, at every attach
                if replay and self.shown.startswith(line, position):
                    position += len(line)  # shown before the stream dropped
                    continue
                if replay:  # from here on the log is new (or not the one shown: show it all)
                    self.shown, replay = self.shown[:position], False
                self.out.write(line)
                self.out.flush()
                self.shown += line

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # asked to stop first, killed only if it does not
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def launch(
    app_dir: str | os.PathLike,
    superlink: str | None = None,
    *,
    run_config: Sequence[str] = (),
    federation_config: Sequence[str] = (),
    output_dir: str | os.PathLike | None = None,
    stream: bool = True,
    timeout: float | None = None,
    reconnect_timeout: float = 120.0,
    poll_interval: float = 2.0,
    env: Mapping[str, str] | None = None,
    out: IO[str] | None = None,
) -> RunOutcome:
    """Start a run of a Flower App, follow its log, and return how it ended.

    Parameters
    ----------
    app_dir : path
        The Flower App directory (``skslot flower-app`` writes one).
    superlink : str, optional
        The SuperLink connection's name in ``$FLWR_HOME/config.toml`` (the
        second argument of ``flwr run``; its ``default`` when omitted).
    run_config : sequence of str
        ``flwr run --run-config`` values, such as ``"head='FedPFT' tau=0.6"``.
    federation_config : sequence of str
        ``flwr run --federation-config`` values.
    output_dir : path, optional
        Where the ServerApp writes its run folders; by default the run
        config's ``output-dir`` (the App's value, with ``run_config`` applied).
        When the launcher can read the run's ``report.json`` there, its error
        is the reason given for a failed run.
    stream : bool, default=True
        Copy the run's log to ``out`` while it runs.
    timeout : float, optional
        Seconds to wait for the run to finish (no limit by default); past
        it the outcome is :data:`UNKNOWN` and the run is left running.
    reconnect_timeout : float, default=120
        Seconds the SuperLink may stay unreachable (a restart) before the
        outcome is :data:`UNKNOWN`.
    poll_interval : float, default=2
        Seconds between status queries while the log stream is down.
    env : mapping, optional
        The environment of the ``flwr`` commands (default: this process's).
    out : file, optional
        Where the log goes (default: ``sys.stdout``).

    Returns
    -------
    RunOutcome
    """
    out = sys.stdout if out is None else out
    env = dict(os.environ if env is None else env)
    flwr = _flwr()
    app_dir = Path(app_dir).expanduser().resolve()
    connection = [superlink] if superlink else []
    command = [*flwr, "run", str(app_dir), *connection, "--format", "json"]
    command += [arg for value in run_config for arg in ("--run-config", value)]
    command += [arg for value in federation_config for arg in ("--federation-config", value)]
    started, why = _flwr_json(command, env, "run-id")
    if started is None:
        return RunOutcome(NOT_STARTED, None, "not started", why)
    run_id = int(started)
    folder_root = Path(output_dir) if output_dir else _run_config_dir(app_dir, run_config)
    deadline = None if timeout is None else time.monotonic() + timeout
    log = _Stream([*flwr, "log", str(run_id), *connection, "--stream"], env, out)
    status, details, unreachable_since, code = "", "", None, None
    try:
        while True:
            if stream:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                code = log.follow(left)
                if code not in (0, None) and unreachable_since is None:
                    print(
                        "skslot: the log stream dropped; asking the SuperLink", file=out, flush=True
                    )
            status, details = _ended_by_report(folder_root, run_id, stream and code == 0)
            if not status:
                status, details = _status(flwr, connection, run_id, env)
            if status.startswith("finished"):
                break
            now = time.monotonic()
            if status == "unreachable":
                unreachable_since = unreachable_since or now
                if now - unreachable_since > reconnect_timeout:
                    why = f"the SuperLink was unreachable for {reconnect_timeout:g} s: {details}"
                    return RunOutcome(UNKNOWN, run_id, status, why)
            else:
                unreachable_since = None
            if deadline is not None and now >= deadline:
                return RunOutcome(
                    UNKNOWN, run_id, status, f"still {status or 'unknown'} after {timeout:g} s"
                )
            time.sleep(poll_interval)
    finally:
        log.close()
    return _outcome(run_id, status, details, folder_root)


def _status(flwr: list[str], connection: list[str], run_id: int, env: Mapping) -> tuple[str, str]:
    """Flower's status of the run and its details, or ``("unreachable", why)``."""
    command = [*flwr, "ls", *connection, "--run-id", str(run_id), "--format", "json"]
    runs, why = _flwr_json(command, env, "runs")
    if runs is None:
        return "unreachable", why
    return str(runs[0].get("status", "")), str(runs[0].get("status-details", ""))


def _ended_by_report(root: Path | None, run_id: int, stream_ended: bool) -> tuple[str, str]:
    """``("finished:completed", "")`` when the log stream ended and the report says completed.

    The ServerApp writes ``report.json`` with its final status as its last
    act, and Flower ends a run's log stream once the run is finished:
    together they tell a completed run without one more ``flwr ls`` call (a
    CLI start, about a second).  Otherwise (no stream, no visible report, a
    run that failed, whose reason Flower may add to, or one still
    ``running``) ``("", "")``: ask Flower.
    """
    completed = stream_ended and (_read_report(root, run_id) or {}).get("status") == "completed"
    return ("finished:completed", "") if completed else ("", "")


def _read_report(root: Path | None, run_id: int) -> dict | None:
    """The run's ``report.json`` in ``root``, or ``None`` where there is none to read."""
    if root is None:
        return None
    try:
        return json.loads((root / f"run-{run_id}" / "report.json").read_text())
    except (OSError, ValueError):
        return None


def _outcome(
    run_id: int, status: str, details: str, root: Path | None, settle: float = 15.0
) -> RunOutcome:
    report = _read_report(root, run_id)
    # Flower may mark the run finished before its stopped ServerApp has written its end
    settled = time.monotonic() + settle
    while (report or {}).get("status") == "running" and time.monotonic() <= settled:
        time.sleep(0.5)
        report = _read_report(root, run_id)
    if report is None and status == "finished:completed":
        return RunOutcome(COMPLETED, run_id, status, "the ServerApp completed")
    folder = None if report is None or root is None else root / f"run-{run_id}"
    data = report or {}
    if status == "finished:completed" and data.get("status") == "completed":
        accuracy = data.get("macro_accuracy")
        what = f"macro accuracy {accuracy:.4f}" if isinstance(accuracy, float) else "completed"
        mix, case = data.get("config", {}).get("label-mix"), data.get("accuracy_case")
        if isinstance(mix, str) and isinstance(case, str):  # the case its accuracy is of
            what += f" (label-mix {mix!r}: {case})"
        nodes = data.get("nodes", [])
        gone = left_out(nodes, data.get("rejected", {}), data.get("missing", {}))
        if gone and not data.get("config", {}).get(_ACCEPT_PARTIAL, False):
            named = "; ".join(f"node {node} {why}" for node, why in gone.items())
            why = (
                f"{what} with {len(nodes) - len(gone)} of {len(nodes)} nodes; {named}; outputs "
                f"in {folder} (set {_ACCEPT_PARTIAL} = true in the run config to accept it)"
            )
            return RunOutcome(PARTIAL, run_id, status, _one_line(why, 2000), folder, report)
        return RunOutcome(COMPLETED, run_id, status, f"{what}; outputs in {folder}", folder, report)
    if data.get("status") == "failed" and data.get("error"):
        why = data["error"]
        if why.startswith("stopped") and details and details != "N/A":
            why += f": {details}"  # why Flower stopped it
    elif data.get("status") == "running":
        why = f"{details} (its report.json still says 'running': the ServerApp was killed)"
    else:
        why = details if details and details != "N/A" else status
    return RunOutcome(FAILED, run_id, status, _one_line(why), folder, report)


def run_and_wait(app_dir: str | os.PathLike, superlink: str | None = None, **options: Any) -> int:
    """Run a Flower App, stream its log, print a one-line outcome and return an exit code.

    The outcome line goes to ``sys.stderr``: ``skslot: run <id> completed:
    macro accuracy 0.9515 (label-mix 'client': own label mix); outputs in
    out/run-<id>`` or ``skslot: run <id>
    failed: ProtocolRunError: only 2 client(s) completed the upload stage, ...``.

    Parameters
    ----------
    app_dir : path
        The Flower App directory (``skslot flower-app`` writes one).
    superlink : str, optional
        The SuperLink connection's name (the second argument of ``flwr run``;
        its ``default`` when omitted).
    **options
        The keywords of :func:`launch`: ``run_config``, ``federation_config``,
        ``output_dir``, ``stream``, ``timeout``, ``reconnect_timeout``,
        ``poll_interval``, ``env``, ``out``.

    Returns
    -------
    int
        0 for a completed run; 4 completed without a node the server addressed
        (unless ``accept-partial``); 1 failed or stopped; 2 not started; 3
        unknown.

    Examples
    --------
    ``skslot flower-app skslot-app --output-dir $PWD/out``, then, in Python::

        import sys
        from skslot.flower.launch import run_and_wait
        sys.exit(run_and_wait("skslot-app", "local"))
    """
    outcome = launch(app_dir, superlink, **options)
    print(outcome.line, file=sys.stderr, flush=True)
    return outcome.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m skslot.flower.launch APP_DIR [SUPERLINK] [options]``: :func:`run_and_wait`."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="skslot flower-run",
        description="Run a Flower App, stream its log, and exit 0 only if the run completed "
        "(1: failed or stopped, 2: not started, 3: outcome unknown, 4: completed without "
        "some node the server addressed, unless accept-partial).",
    )
    parser.add_argument("app_dir", help="the Flower App directory (skslot flower-app writes one)")
    parser.add_argument("superlink", nargs="?", help="SuperLink connection name (flwr run's)")
    parser.add_argument("--run-config", action="append", default=[], metavar="VALUES")
    parser.add_argument("--federation-config", action="append", default=[], metavar="VALUES")
    parser.add_argument("--output-dir", help="where the run folders are (default: output-dir)")
    parser.add_argument("--timeout", type=float, help="seconds to wait for the run to finish")
    return run_and_wait(**vars(parser.parse_args(argv)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
