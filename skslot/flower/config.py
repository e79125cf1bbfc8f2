"""Run configuration of the Flower deployment, and the Flower App it runs in.

Flower passes a run's settings to both apps as a flat ``run_config`` mapping
(from ``[tool.flwr.app.config]`` of the App's ``pyproject.toml``, overridden by
``flwr run --run-config``).  :class:`DeploymentConfig` reads and validates it
once, so the server and every client agree on its meaning;
:func:`write_flower_app` writes a ready-to-run App directory whose
components are skslot's own apps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from .._validation import check_in_range, check_option, check_positive_int
from ..bench import DEFAULT_HEADS

__all__ = ["DeploymentConfig", "write_flower_app"]

SUMMARY_DTYPES = ("float16", "float32", "float64")


@dataclass(frozen=True)
class DeploymentConfig:
    """Settings of one deployment run, shared by the server and the clients.

    Parameters
    ----------
    head : {"FedCGS", "O-FedAvg", "FedPFT"}, default="FedCGS"
        Downstream one-shot head.
    tau : float, default=0.4
        Fraction of the transport each client applies.
    alpha : float or None, default=0.1
        Dirichlet label-skew of the paper's partition (``None`` or the run
        config string ``"none"``: no skew).  Used by clients whose node config
        names a multi-domain data set.
    seed : int, default=0
        Seed of the partition and of the head.
    dataset : str, default="office-caltech10"
        The multi-domain data set partitioned among the clients (a path to an
        ``.npz``, or ``"office-caltech10"``, the embedded one); a node's own
        ``dataset`` node config takes precedence (see
        :func:`~skslot.flower.load_client_data`).
    summary_dtype : {"float16", "float32", "float64"}, default="float32"
        Precision of the summaries and of the reference on the wire.
    num_clients : int, default=0
        Clients the server waits for (up to ``connect_timeout`` seconds);
        0 takes whoever is connected after ``connect_timeout``.
    min_clients : int, default=2
        Fewest clients that must answer every stage; below it the run fails
        with an error naming who was missing or rejected.
    connect_timeout, reply_timeout : float, default=60, 300
        Seconds to wait for nodes to connect, and for the replies of a stage.
    clients_per_domain : int, default=1
    test_size : float, default=0.3
        Partition settings (see :func:`skslot.datasets.dirichlet_partition`).
    output_dir : str, default=""
        Where the server writes ``report.json``, ``global_head.npz`` and
        ``reference.bin`` (nothing is written when empty).
    epsilon : float or None, default=None
        Clients release differentially private summaries (see
        :mod:`skslot.privacy`) with this epsilon (``None`` or ``"none"``: exact
        Ledoit-Wolf summaries).
    delta : float, default=1e-5
    clip_norm : float, default=1.0
        Row-norm bound of the private summaries, in the features' units.

    Examples
    --------
    >>> from skslot.flower import DeploymentConfig
    >>> config = DeploymentConfig.from_run_config({"head": "FedPFT", "alpha": "none"})
    >>> config.head, config.alpha, config.tau
    ('FedPFT', None, 0.4)
    >>> config.to_run_config()["alpha"]
    'none'
    """

    head: str = "FedCGS"
    tau: float = 0.4
    alpha: float | None = 0.1
    seed: int = 0
    dataset: str = "office-caltech10"
    summary_dtype: str = "float32"
    num_clients: int = 0
    min_clients: int = 2
    connect_timeout: float = 60.0
    reply_timeout: float = 300.0
    clients_per_domain: int = 1
    test_size: float = 0.3
    output_dir: str = ""
    epsilon: float | None = None
    delta: float = 1e-5
    clip_norm: float = 1.0

    def __post_init__(self) -> None:
        check_option("head", self.head, tuple(DEFAULT_HEADS))
        check_in_range("tau", self.tau, 0.0, 1.0)
        if self.alpha is not None:
            check_in_range("alpha", self.alpha, 0.0, None)
            if self.alpha == 0:
                raise ValueError("alpha must be > 0, or 'none' for no label skew")
        check_option("summary_dtype", self.summary_dtype, SUMMARY_DTYPES)
        check_positive_int("min_clients", self.min_clients)
        if not isinstance(self.num_clients, int) or self.num_clients < 0:
            raise ValueError(f"num_clients must be an int >= 0, got {self.num_clients!r}")
        check_in_range("connect_timeout", self.connect_timeout, 0.0, None)
        check_in_range("reply_timeout", self.reply_timeout, 0.0, None)
        check_positive_int("clients_per_domain", self.clients_per_domain)
        check_in_range("test_size", self.test_size, 0.0, 1.0)
        if self.epsilon is not None:
            check_in_range("epsilon", self.epsilon, 0.0, None)
            if self.epsilon == 0:
                raise ValueError("epsilon must be > 0, or 'none' for exact summaries")
        check_in_range("delta", self.delta, 0.0, 1.0)
        check_in_range("clip_norm", self.clip_norm, 0.0, None)
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int, got {self.seed!r}")
        for name in ("dataset", "output_dir"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> DeploymentConfig:
        """Read Flower's ``run_config`` (keys in kebab-case; others are ignored)."""
        values = {}
        for f in fields(cls):
            key = f.name.replace("_", "-")
            if key in run_config:
                values[f.name] = run_config[key]
        for name in ("alpha", "epsilon"):  # "none" in a run config
            if isinstance(values.get(name), str):
                if values[name].lower() != "none":
                    raise ValueError(f"{name} must be a number or 'none', got {values[name]!r}")
                values[name] = None
        floats = ("tau", "connect_timeout", "reply_timeout", "test_size", "delta", "clip_norm")
        for name in (*floats, "epsilon"):
            if isinstance(values.get(name), int) and not isinstance(values[name], bool):
                values[name] = float(values[name])
        return cls(**values)

    def to_run_config(self) -> dict[str, Any]:
        """The inverse of :meth:`from_run_config` (``None`` as ``"none"``)."""
        return {
            key.replace("_", "-"): "none" if value is None else value
            for key, value in asdict(self).items()
        }


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def write_flower_app(directory: str | os.PathLike, config: DeploymentConfig | None = None) -> Path:
    """Write a Flower App directory that runs skslot's server and client apps.

    The directory holds only a ``pyproject.toml``: its components are
    ``skslot.flower.server_app:app`` and ``skslot.flower.client_app:app``
    from the installed package, and its ``[tool.flwr.app.config]`` holds
    every :class:`DeploymentConfig` setting (change them there, or per run
    with ``flwr run --run-config``).

    Parameters
    ----------
    directory : path
        Created if needed; an existing ``pyproject.toml`` is overwritten.
    config : DeploymentConfig, optional
        Default run settings (the defaults of :class:`DeploymentConfig`).

    Returns
    -------
    Path
        The App directory, to pass to ``flwr run``.
    """
    from .. import __version__

    config = DeploymentConfig() if config is None else config
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    settings = "\n".join(
        f"{key} = {_toml_value(value)}" for key, value in config.to_run_config().items()
    )
    (directory / "pyproject.toml").write_text(
        f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "skslot-app"
version = "{__version__}"
description = "SLOT-Align one-shot federated learning (skslot) on Flower"
license = "BSD-3-Clause"
dependencies = ["skslot[flower]=={__version__}"]

[tool.flwr.app]
publisher = "skslot"

[tool.flwr.app.components]
serverapp = "skslot.flower.server_app:app"
clientapp = "skslot.flower.client_app:app"

[tool.flwr.app.config]
{settings}
"""
    )
    return directory
