"""Run configuration of the Flower deployment, and the Flower App it runs in.

Flower passes a run's settings to both apps as a flat ``run_config`` mapping
(from ``[tool.flwr.app.config]`` of the App's ``pyproject.toml``, overridden by
``flwr run --run-config``).  :class:`DeploymentConfig` reads and validates it
once, so the server and every client agree on its meaning;
:func:`write_flower_app` writes a ready-to-run App directory whose
components are skslot's own apps.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import (
    check_in_range,
    check_non_negative_int,
    check_option,
    check_positive_int,
)
from ..barycenter import BuresBarycenter
from ..defence import DefenceBounds
from ..heads import OneShotHead, head_class, make_head
from ..protocol import OneShotProtocol, ReferenceStep
from ..protocol.client import private_summary_problem
from ..screening import SCREENING
from ..selection import check_tau_grid
from ..summary import COVARIANCES, GaussianSummaryEstimator
from ..transformer import DEFAULT_CLIENT_TAU, DEFAULT_MEAN_TAU, DEFAULT_TAU

__all__ = [
    "DataSettings",
    "DefenceSettings",
    "DeploymentConfig",
    "PrivacySettings",
    "ProtocolSettings",
    "RunSettings",
    "write_flower_app",
]

SUMMARY_DTYPES = ("float16", "float32", "float64")


@dataclass(frozen=True)
class ProtocolSettings:
    """The protocol's part of a run: the head, ``tau`` and the server step.

    Parameters
    ----------
    head : str, default="FedCGS"
        The one-shot head: FedCGS, O-FedAvg, FedPFT, or a user's
        :class:`~skslot.heads.OneShotHead` subclass by import path
        (``"package.module:Class"``, importable on the server and on every
        node), built by :func:`skslot.heads.make_head`.
    head_params : str, default=""
        The head's constructor parameters as a JSON object such as
        ``'{"covariance_type": "full", "rank": 16}'`` (empty: its defaults;
        ``random_state`` defaults to ``seed``).  Unknown names are an error
        naming the allowed ones, raised before any client is contacted.
    tau : float or "auto", default=0.6
        Fraction of the transport each client applies (with ``mean_tau``, of
        its covariance's; :class:`~skslot.SLOTTransformer`), or ``"auto"``: chosen
        by the clients' validation over ``taus`` (the same protocol as
        :class:`~skslot.FederatedTauSearch`).
    taus : str, default="0,0.2,0.4,0.6,0.8,1"
        The grid of ``tau = "auto"``, comma-separated.
    head_grid : str, default=""
        With ``tau = "auto"``, server-side head parameters searched along with
        ``tau``, as a JSON object of lists (any of the head's
        ``server_params``, as :class:`~skslot.FederatedTauSearch`'s
        ``head_grid``), e.g. ``'{"shrinkage": [0.001, 0.1]}'`` for FedCGS.
    validation_fraction : float, default=0.2
        With ``tau = "auto"``, the share of each class of each client held out.
    selection_rule : {"one-standard-error", "best"}, default="one-standard-error"
        How the server chooses from the validation scores.
    classes : str, default="0,1,2,3,4,5,6,7,8,9"
        The global class set, agreed in the configuration (a client cannot
        enlarge it; one whose labels fall outside it fails): comma-separated
        integer labels, or class names (``"cat,dog,bird"``: a node's table
        labels are matched by name and sent as their position in this list).
    seed : int, default=0
        Seed of the partition and of the head.
    client_tau : {"uniform", "label-shift"}, default="label-shift"
        Each client's fraction of the transport: ``tau`` for all (the
        paper's), or ``tau`` times the total-variation distance between its
        class proportions and the federation's (the clients then upload their
        class counts; see :mod:`skslot.label_shift`).
    mean_tau : float or "none", default=1.0
        Fraction of the mean's transport, the same for every client and
        candidate ``tau`` (:class:`~skslot.SLOTTransformer`'s ``mean_tau``);
        ``"none"``: the mean follows each client's ``tau`` (the paper's
        geodesic, with ``tau = 0.4`` and ``client-tau = "uniform"``).
    summary_covariance : {"total", "within"}, default="total"
        The covariance each client's summary transports: of all its rows (the
        paper's), or of its class-centred rows (label-aware; see
        :class:`~skslot.GaussianSummaryEstimator`).
    summary_dtype : {"float16", "float32", "float64"}, default="float32"
        Precision of the summaries and of the reference on the wire.
    server_jobs : int, default=1
        Parallel jobs of the server's barycenter and maps over blocks of
        clients (joblib's convention, ``-1``: all cores; see
        :class:`~skslot.BuresBarycenter`).
    client_batch : int, default=0
        Clients the server's barycenter decomposes together; 0: all in one
        float64 stack (fastest; about ``5 K m^2`` float64 at the peak).  A
        positive value bounds the iteration's memory beyond the decoded
        summaries to about ``5 * client_batch * m^2`` float64 per job, for
        many clients (docs/performance.md).
    """

    head: str = "FedCGS"
    head_params: str = ""
    tau: float | str = DEFAULT_TAU
    taus: str = "0,0.2,0.4,0.6,0.8,1"
    head_grid: str = ""
    validation_fraction: float = 0.2
    selection_rule: str = "one-standard-error"
    classes: str = "0,1,2,3,4,5,6,7,8,9"
    seed: int = 0
    client_tau: str = DEFAULT_CLIENT_TAU
    mean_tau: float | None = DEFAULT_MEAN_TAU
    summary_covariance: str = "total"
    summary_dtype: str = "float32"
    server_jobs: int = 1
    client_batch: int = 0

    def _check_protocol(self) -> None:
        for name in ("taus", "head_grid", "head_params", "classes"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string, got {getattr(self, name)!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an int, got {self.seed!r}")
        self.class_set  # noqa: B018 - validates the class set
        check_option("summary_covariance", self.summary_covariance, COVARIANCES)
        check_option("summary_dtype", self.summary_dtype, SUMMARY_DTYPES)
        if type(self.server_jobs) is not int or self.server_jobs == 0:
            raise ValueError(f"server_jobs must be a non-zero int, got {self.server_jobs!r}")
        check_non_negative_int("client_batch", self.client_batch)
        # the head, its parameters, tau, the grid, the selection and the screening: the
        # driver checks them, once the run's settings are checked (DeploymentConfig)

    def _driver(
        self, *, defence: DefenceBounds | None, min_clients: int, screen: str = "off"
    ) -> OneShotProtocol:
        barycenter = BuresBarycenter(
            client_batch=self.client_batch or None, n_jobs=self.server_jobs
        )
        return OneShotProtocol(
            self.make_head(),
            tau=self.tau,
            taus=self.tau_grid,
            head_grid=self.head_grid_values(),
            validation_fraction=self.validation_fraction,
            rule=self.selection_rule,
            reference=ReferenceStep(barycenter, wire_dtype=self.summary_dtype),
            defence=defence,
            min_clients=min_clients,
            random_state=self.seed,
            client_tau=self.client_tau,
            mean_tau=self.mean_tau,
            summary_covariance=self.summary_covariance,
            screen=screen,
            config=self.to_run_config() if isinstance(self, DeploymentConfig) else None,
        )

    @property
    def auto(self) -> bool:
        """Whether ``tau`` is chosen by the federation."""
        return self.tau == "auto"

    @property
    def tau_grid(self) -> tuple[float, ...]:
        """The candidate taus of ``tau = "auto"`` (validated, sorted)."""
        return check_tau_grid(_numbers(self.taus, "taus", float))

    def make_head(self) -> OneShotHead:
        """The run's head, with its parameters (:func:`skslot.heads.make_head`)."""
        seed = self.seed if isinstance(self.seed, int) and not isinstance(self.seed, bool) else None
        return make_head(self.head, _json_object(self.head_params, "head_params"), seed=seed)

    @property
    def class_names(self) -> list[str]:
        """The agreed classes as listed (names, or integer labels as text)."""
        names = [part.strip() for part in self.classes.split(",")]
        if len(names) < 2 or len(set(names)) != len(names) or "" in names:
            raise ValueError(f"classes must list at least 2 distinct labels, got {self.classes!r}")
        return names

    @property
    def class_set(self) -> np.ndarray:
        """The agreed classes as the protocol sends them: sorted integer labels.

        Integer labels as they are; class names as their positions ``0 .. C-1``.
        """
        names = self.class_names
        if not _all_integers(names):
            return np.arange(len(names), dtype=np.int64)
        return np.array(sorted(int(name) for name in names), dtype=np.int64)

    def label_codes(self, labels: Any, *, where: str = "the node's data") -> np.ndarray:
        """A node's labels as the protocol's class set (integer labels, or name positions).

        Raises
        ------
        ValueError
            For a label outside the run's class set, naming it and the set.
        """
        names = self.class_names
        text = [str(v) for v in np.asarray(labels).tolist()]
        if _all_integers(names):
            bad = sorted({t for t in text if not _all_integers([t])})
            codes = np.array([int(t) for t in text] if not bad else [], dtype=np.int64)
            bad = bad or sorted(set(codes.tolist()) - set(self.class_set.tolist()))
        else:
            by_name = {name: code for code, name in enumerate(names)}
            bad = sorted(set(text) - set(by_name))
            codes = np.array([by_name.get(t, -1) for t in text], dtype=np.int64)
        if bad:
            raise ValueError(
                f"labels {bad} of {where} are not in the run's class set {self.classes!r}"
            )
        return codes

    def head_grid_values(self) -> dict[str, list] | None:
        """Server-side head parameters searched with ``tau``, decoded (``None``: none)."""
        grid = _json_object(self.head_grid, "head_grid")
        for name, values in grid.items():
            if not isinstance(values, list):
                raise ValueError(f"head_grid[{name!r}] must be a JSON list, got {values!r}")
        return grid or None


@dataclass(frozen=True)
class DefenceSettings:
    """The defence's part of a run: what the server accepts from a client.

    Parameters
    ----------
    defence : bool, default=True
        Screen the clients against each other (:mod:`skslot.defence`):
        implausible summaries and counts rejected, weights capped, FedCGS
        statistics checked against the client's own summary, O-FedAvg local
        heads checked against the others' norms; the five bounds below.
        ``False`` accepts every client whose messages pass the wire checks
        (for studying attacks; docs/deployment.md).
    max_dimension : int, default=4096
        Largest feature dimension the server accepts from a client (bounds the
        memory and time one summary can cost: ``8 m^2`` bytes).
    n_features : int, default=0
        The feature dimension every client must send; 0 accepts the dimension
        most clients send.
    max_count_ratio : float, default=100
        A client declaring more than this many times the median client's rows
        is rejected (see :mod:`skslot.defence`).
    max_weight_ratio : float, default=10
        Each remaining client's weight (in the barycenter and the head) is
        capped at this many times the median count.
    max_norm_ratio : float, default=10
        O-FedAvg: a client whose local head's norm exceeds this many times the
        median client's is rejected.
    max_variance_ratio : float, default=100
        A summary whose mean variance ``tr(S) / m`` is more than this factor
        above or below the clients' median is rejected (with 3 or more
        clients; honest clients of the real data sets stay within 9.5,
        docs/deployment.md).
    max_mean_offset : float, default=10
        A summary whose mean lies more than this many median standard
        deviations (``sqrt(m * median variance)``) from the clients'
        coordinate-wise median mean is rejected (honest clients: within 2.0).
    screen : {"auto", "on", "off"}, default="auto"
        Screen each client's contribution by the other clients' validation
        (:mod:`skslot.screening`): ``"auto"`` with ``tau = "auto"``, ``"on"``
        at a fixed ``tau`` too (one more exchange, and the clients hold out
        validation rows), ``"off"`` never.  Needs ``defence``.
    screen_significance : float, default=0.001
        Family-wise level of the screening's sign test.
    screen_min_gain : float, default=0.02
        Smallest gain of the other clients' validation accuracy without a
        client that excludes it.
    """

    defence: bool = True
    max_dimension: int = 4096
    n_features: int = 0
    max_count_ratio: float = 100.0
    max_weight_ratio: float = 10.0
    max_norm_ratio: float = 10.0
    max_variance_ratio: float = 100.0
    max_mean_offset: float = 10.0
    screen: str = "auto"
    screen_significance: float = 0.001
    screen_min_gain: float = 0.02

    def _check_defence(self) -> None:
        if not isinstance(self.defence, bool):
            raise ValueError(f"defence must be true or false, got {self.defence!r}")
        check_option("screen", self.screen, SCREENING)
        check_positive_int("max_dimension", self.max_dimension)
        if not isinstance(self.n_features, int) or not 0 <= self.n_features <= self.max_dimension:
            raise ValueError(
                f"n_features must be an int in [0, max_dimension], got {self.n_features!r}"
            )
        self._bounds()  # checks the bounds

    def _bounds(self) -> DefenceBounds:
        return DefenceBounds(
            max_count_ratio=self.max_count_ratio,
            max_weight_ratio=self.max_weight_ratio,
            max_norm_ratio=self.max_norm_ratio,
            max_variance_ratio=self.max_variance_ratio,
            max_mean_offset=self.max_mean_offset,
            screen_significance=self.screen_significance,
            screen_min_gain=self.screen_min_gain,
        )


@dataclass(frozen=True)
class DataSettings:
    """Where a node's rows come from when its node config names a partition.

    Parameters
    ----------
    alpha : float or None, default=0.1
        Dirichlet label-skew of the paper's partition (``None`` or the run
        config string ``"none"``: no skew).  Used by clients whose node config
        names a multi-domain data set.
    dataset : str, default="digits"
        The multi-domain data set partitioned among the clients: an embedded
        one (``"digits"``, deep features where SLOT's gain shows, or
        ``"office-caltech10"``) or a file every node can read
        (:func:`skslot.datasets.load_dataset`); a node's own ``dataset`` node
        config takes precedence (see :func:`~skslot.flower.load_client_data`).
    clients_per_domain : int, default=1
        Clients each domain's rows are dealt into before the Dirichlet step
        (see :func:`skslot.datasets.dirichlet_partition`).
    test_size : float, default=0.3
        Share of each domain's rows held out as the clients' test rows.
    """

    alpha: float | None = 0.1
    dataset: str = "digits"
    clients_per_domain: int = 1
    test_size: float = 0.3

    def _check_data(self) -> None:
        if not isinstance(self.dataset, str):
            raise ValueError(f"dataset must be a string, got {self.dataset!r}")
        if self.alpha is not None:
            check_in_range("alpha", self.alpha, 0.0, None)
            if self.alpha == 0:
                raise ValueError("alpha must be > 0, or 'none' for no label skew")
        check_positive_int("clients_per_domain", self.clients_per_domain)
        check_in_range("test_size", self.test_size, 0.0, 1.0)


@dataclass(frozen=True)
class PrivacySettings:
    """Differentially private summaries (:mod:`skslot.privacy`).

    Parameters
    ----------
    epsilon : float or None, default=None
        Clients release differentially private summaries (see
        :mod:`skslot.privacy`) with this epsilon (``None`` or ``"none"``: exact
        Ledoit-Wolf summaries).
    delta : float, default=1e-5
        The delta of the private summaries' (epsilon, delta) guarantee.
    clip_norm : float, default=1.0
        Row-norm bound of the private summaries, in the features' units.
    """

    epsilon: float | None = None
    delta: float = 1e-5
    clip_norm: float = 1.0

    def _check_privacy(self) -> None:
        if self.epsilon is not None:
            check_in_range("epsilon", self.epsilon, 0.0, None)
            if self.epsilon == 0:
                raise ValueError("epsilon must be > 0, or 'none' for exact summaries")
        check_in_range("delta", self.delta, 0.0, 1.0)
        check_in_range("clip_norm", self.clip_norm, 0.0, None)


@dataclass(frozen=True)
class RunSettings:
    """Who takes part, how long the server waits, and where it writes.

    Parameters
    ----------
    num_clients : int, default=0
        Clients the server waits for (up to ``connect_timeout`` seconds);
        0 takes whoever is connected after ``connect_timeout``.
    min_clients : int, default=2
        Fewest clients that must answer every stage; below it the run fails
        with an error naming who was missing or rejected.
    connect_timeout : float, default=60
        Seconds the server waits for ``num_clients`` nodes to connect.
    reply_timeout : float, default=300
        Seconds the server waits for the replies of one stage; a node that
        has not answered by then is reported missing ("hung or
        disconnected").
    progress_interval : float, default=10
        Seconds between the server's progress lines while it waits for a
        stage's replies ("stage upload: 2 of 3 clients answered (14 s)");
        0 logs only the line at each stage's end.
    retry_interval : float, default=10
        Seconds after which the server sends a stage's message again to a
        node whose message or reply the SuperLink reports lost (after a
        SuperLink restart, say), as long as the stage's ``reply_timeout``
        has not run out.
    output_dir : str, default=""
        Where the server writes each run's folder (``run-<run id>/`` with
        ``report.json``, ``global_head.npz`` and ``reference.bin``) and the
        ``latest`` and ``last-completed`` pointers (nothing is written when
        empty; see :mod:`skslot.flower.outputs`).
    """

    num_clients: int = 0
    min_clients: int = 2
    connect_timeout: float = 60.0
    reply_timeout: float = 300.0
    progress_interval: float = 10.0
    retry_interval: float = 10.0
    output_dir: str = ""

    def _check_run(self) -> None:
        check_positive_int("min_clients", self.min_clients)
        if not isinstance(self.num_clients, int) or self.num_clients < 0:
            raise ValueError(f"num_clients must be an int >= 0, got {self.num_clients!r}")
        check_in_range("connect_timeout", self.connect_timeout, 0.0, None)
        check_in_range("reply_timeout", self.reply_timeout, 0.0, None)
        check_in_range("progress_interval", self.progress_interval, 0.0, None)
        check_in_range("retry_interval", self.retry_interval, 0.0, None)
        if not isinstance(self.output_dir, str):
            raise ValueError(f"output_dir must be a string, got {self.output_dir!r}")


@dataclass(frozen=True)
class DeploymentConfig(
    RunSettings, PrivacySettings, DataSettings, DefenceSettings, ProtocolSettings
):
    """Settings of one deployment run, shared by the server and the clients.

    Flower passes them as one flat run config; they come in five parts, each
    with its own parameters and checks: :class:`ProtocolSettings` (the head,
    ``tau``, the server step), :class:`DefenceSettings` (what the server
    accepts), :class:`DataSettings` (a node's partition), :class:`PrivacySettings`
    and :class:`RunSettings` (participants, timeouts, outputs).  Every value is
    checked here, once, before any client is contacted.

    Examples
    --------
    >>> from skslot.flower import DeploymentConfig
    >>> config = DeploymentConfig.from_run_config({"head": "FedPFT", "alpha": "none"})
    >>> config.head, config.alpha, config.tau, config.mean_tau, config.client_tau
    ('FedPFT', None, 0.6, 1.0, 'label-shift')
    >>> config.to_run_config()["alpha"]
    'none'
    >>> DeploymentConfig.from_run_config({"mean-tau": "none"}).mean_tau is None  # the paper's
    True
    >>> config.make_head()
    FedPFTClassifier(random_state=0)
    """

    def __post_init__(self) -> None:
        self._check_protocol()
        self._check_defence()
        self._check_data()
        self._check_privacy()
        self._check_run()
        driver = self.protocol()  # the driver's own checks (head, tau, grid, selection, screening)
        self.summary_estimator()._check_params()  # the summary kind with the privacy settings
        why = private_summary_problem(driver.head, self.epsilon)
        if why:
            raise ValueError(why)

    def summary_estimator(self) -> GaussianSummaryEstimator:
        """How every client summarises its rows: the summary kind and its privacy."""
        private = self.epsilon is not None
        return GaussianSummaryEstimator(
            covariance=self.summary_covariance,
            epsilon=self.epsilon,
            delta=self.delta,
            clip_norm=self.clip_norm if private else None,
        )

    def protocol(self) -> OneShotProtocol:
        """The run's protocol driver (:class:`skslot.protocol.OneShotProtocol`)."""
        return self._driver(
            defence=self.defence_bounds(), min_clients=self.min_clients, screen=self.screen
        )

    def defence_bounds(self) -> DefenceBounds | None:
        """The defence's bounds (``None`` with the defence off)."""
        return self._bounds() if self.defence else None

    @property
    def head_name(self) -> str:
        """The head's class name, for logs."""
        return head_class(self.head).__name__

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> DeploymentConfig:
        """Read Flower's ``run_config`` (keys in kebab-case; others are ignored)."""
        values = {}
        for f in fields(cls):
            key = f.name.replace("_", "-")
            if key in run_config:
                values[f.name] = run_config[key]
        for name in ("alpha", "epsilon", "mean_tau"):  # "none" in a run config
            if isinstance(values.get(name), str):
                if values[name].lower() != "none":
                    raise ValueError(f"{name} must be a number or 'none', got {values[name]!r}")
                values[name] = None
        floats = (
            "tau",
            "connect_timeout",
            "reply_timeout",
            "test_size",
            "delta",
            "clip_norm",
            "validation_fraction",
            "max_count_ratio",
            "max_weight_ratio",
            "max_norm_ratio",
            "max_variance_ratio",
            "max_mean_offset",
            "screen_significance",
            "screen_min_gain",
        )
        for name in (*floats, "epsilon", "mean_tau"):
            if isinstance(values.get(name), int) and not isinstance(values[name], bool):
                values[name] = float(values[name])
        return cls(**values)

    def to_run_config(self) -> dict[str, Any]:
        """The inverse of :meth:`from_run_config` (``None`` as ``"none"``)."""
        return {
            key.replace("_", "-"): "none" if value is None else value
            for key, value in asdict(self).items()
        }


def _all_integers(texts: list[str]) -> bool:
    """Whether every text is an integer label (``"3"``, ``"-1"``; not ``"3.0"``)."""
    return all(t.strip().lstrip("+-").isdigit() for t in texts)


def _json_object(text: str, name: str) -> dict[str, Any]:
    """A run-config string holding a JSON object ("" is the empty object)."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} must be a JSON object, got {text!r}: {exc.msg}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {text!r}")
    return value


def _numbers(text: Any, name: str, kind: type) -> list:
    """Comma-separated numbers of a run-config string."""
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a comma-separated string, got {text!r}")
    try:
        return [kind(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated numbers, got {text!r}") from None


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
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
