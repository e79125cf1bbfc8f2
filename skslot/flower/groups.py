"""The groups of a deployment's settings: protocol, alignment, defence, data, privacy, run.

Each group declares its settings (:mod:`skslot.flower.settings`) and the
checks between them; :class:`~skslot.flower.DeploymentConfig` holds one of
each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..defaults import CLIENT_MIX_TAU, FORM, LABEL_MIX, TAU
from ..defence import DefenceBounds
from ..heads import OneShotHead, head_class, make_head
from ..label_mix import LABEL_MIXES
from ..privacy import PrivacyBudget
from ..protocol import OneShotProtocol
from ..selection import DEFAULT_TAUS, check_tau_grid
from ..summary import GaussianSummaryEstimator
from ..wire.summary_codec import SUMMARY_DTYPES
from .settings import SettingsGroup, declare, declared, naming, owned

__all__ = [
    "AlignmentSettings",
    "DataSettings",
    "DefenceSettings",
    "PrivacySettings",
    "ProtocolSettings",
    "RunSettings",
]

# -- the strings a run config holds --------------------------------------------------------


def _all_integers(texts: list[str]) -> bool:
    """Whether every text is an integer label (``"3"``, ``"-1"``; not ``"3.0"``)."""
    return all(t.strip().lstrip("+-").isdigit() for t in texts)


def _class_names(name: str, text: str) -> list[str]:
    """The class set's labels as listed: at least two, distinct."""
    names = [part.strip() for part in text.split(",")]
    if len(names) < 2 or len(set(names)) != len(names) or "" in names:
        raise ValueError(f"{name} must list at least 2 distinct labels, got {text!r}")
    return names


def _tau_grid(name: str, text: str) -> tuple[float, ...]:
    """Comma-separated candidate taus, checked and sorted."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated numbers, got {text!r}") from None
    return check_tau_grid(values)


def _json_object(name: str, text: str) -> dict[str, Any]:
    """A string holding a JSON object ("" is the empty object)."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} must be a JSON object, got {text!r}: {exc.msg}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {text!r}")
    return value


def _json_grid(name: str, text: str) -> dict[str, list]:
    """A string holding a JSON object of lists ("" is the empty object)."""
    grid = _json_object(name, text)
    for key, values in grid.items():
        if not isinstance(values, list):
            raise ValueError(f"{name}[{key!r}] must be a JSON list, got {values!r}")
    return grid


# -- the parts ----------------------------------------------------------------------------


@declared
@dataclass(frozen=True)
class ProtocolSettings(SettingsGroup):
    """The head every party trains, the class set, the seed and the server's step.

    Parameters
    ----------
    head
        The one-shot head: FedCGS, O-FedAvg, FedPFT, or a OneShotHead subclass by import
        path ('package.module:Class', importable on the server and on every node). Built
        by :func:`skslot.heads.make_head`.
    head_params
        The head's constructor parameters as a JSON object, such as '{"covariance_type":
        "full", "rank": 16}' (empty: its defaults). ``random_state`` defaults to
        ``seed``.  Unknown names are an error naming the allowed ones, raised before any
        client is contacted.
    label_mix
        Whose label mix each node's future rows follow: its own ('client': each node's
        mean moves by its domain offset measured within classes, and it predicts with
        its own class counts) or the federation's ('federation', every class of its
        domain served, the paper's test). The head's ``label_mix``
        (:mod:`skslot.label_mix`, :attr:`skslot.protocol.OneShotProtocol.label_mix`);
        docs/choosing.md gives the cost of each wrong choice.
    classes
        The global class set: comma-separated integer labels, or class names (a node's
        table labels are matched by name and sent as their position in the list). Agreed
        in the configuration: a client cannot enlarge it, and one whose labels fall
        outside it fails.
    seed
        Seed of the partition, of the clients' validation splits and of the head.
    summary_dtype
        Precision of the summaries and of the reference on the wire.
    server_jobs
        Parallel jobs of the server's barycenter and maps over blocks of clients (-1:
        every core). As joblib's ``n_jobs``; see :class:`~skslot.BuresBarycenter`.
    client_batch
        Clients the server's barycenter decomposes together (0: all in one float64
        stack, the fastest). A positive value bounds the iteration's memory beyond the
        decoded summaries to about ``5 * client_batch * m^2`` float64 per job, for many
        clients (docs/scaling.md); all in one stack takes about ``5 K m^2``.
    """

    head: str = declare("FedCGS", form="a head name or 'package.module:Class'")
    head_params: str = declare("", form="a JSON object", decode=_json_object)
    label_mix: str = declare(LABEL_MIX, options=LABEL_MIXES)
    classes: str = declare(
        "0,1,2,3,4,5,6,7,8,9", form="comma-separated labels", decode=_class_names
    )
    seed: int = declare(0, low=0)
    summary_dtype: str = declare("float32", options=SUMMARY_DTYPES)
    server_jobs: int = declare(1, nonzero=True)
    client_batch: int = declare(0, low=0)

    def _check_together(self) -> None:
        with naming(self.setting("head").where):
            head_class(self.head)
        with naming(self.setting("head_params").where):
            self.make_head()

    def make_head(self) -> OneShotHead:
        """The run's head, with its parameters (:func:`skslot.heads.make_head`).

        Returns
        -------
        head : OneShotHead
            A new, unfitted ``head`` with ``head_params``, and ``seed`` as its
            ``random_state`` where it has one that ``head_params`` does not set.
        """
        params = _json_object("head_params", self.head_params)
        head = make_head(self.head, params, seed=self.seed)
        if "label_mix" in head.get_params() and "label_mix" not in params:
            head.set_params(label_mix=self.label_mix)
        return head

    @property
    def class_names(self) -> list[str]:
        """The agreed classes as listed (names, or integer labels as text)."""
        return _class_names("classes", self.classes)

    @property
    def class_set(self) -> np.ndarray:
        """The agreed classes as the protocol sends them: sorted integer labels.

        Integer labels as they are; class names as their positions ``0 .. C-1``.
        """
        names = self.class_names
        if not _all_integers(names):
            return np.arange(len(names), dtype=np.int64)
        return np.array(sorted(int(name) for name in names), dtype=np.int64)

    def label_codes(
        self, labels: Any, *, where: str = "the node's data", outside: int | None = None
    ) -> np.ndarray:
        """A node's labels as the protocol's class set (integer labels, or name positions).

        Parameters
        ----------
        labels : array-like of shape (n_samples,)
            The node's labels: integer labels, or class names as ``classes``
            lists them.
        where : str, default="the node's data"
            Where the labels come from, for the error message.
        outside : int, optional
            The code of a label outside the class set (a private node's: it
            tells no one which labels its rows hold); ``None``: an error.

        Returns
        -------
        codes : ndarray of shape (n_samples,) of int64
            Each label as its integer label, or as its class name's position
            in ``classes``.

        Raises
        ------
        ValueError
            For a label outside the run's class set, naming it and the set
            (without ``outside``).
        """
        names = self.class_names
        text = [str(v) for v in np.asarray(labels).tolist()]
        if _all_integers(names):
            known = set(self.class_set.tolist())
            code_of = {t: int(t) for t in set(text) if _all_integers([t]) and int(t) in known}
        else:
            code_of = {name: code for code, name in enumerate(names)}
        codes = np.array([code_of.get(t, -1) for t in text], dtype=np.int64)
        if outside is not None:
            codes[codes == -1] = outside
            return codes
        missing = set(text) - set(code_of)
        numbers = {t for t in missing if _all_integers(names) and _all_integers([t])}
        bad = sorted(int(t) for t in numbers) + sorted(missing - numbers)
        if bad:
            shown = ", ".join(map(repr, bad[:5])) + (f" and {len(bad) - 5} more" if bad[5:] else "")
            raise ValueError(
                f"labels [{shown}] of {where} are not in the run's class set {self.classes!r}: "
                f"set `{self.setting('classes').key}` in the run config to every class of the "
                "federation (names or integers, comma-separated)"
            )
        return codes


@declared
@dataclass(frozen=True)
class AlignmentSettings(SettingsGroup):
    """How far each client moves its features, and how the federation chooses ``tau``.

    A deployment's ``summary_form`` defaults to ``"auto"`` (a protocol
    client's, :data:`skslot.defaults.FORM`; the estimator's is ``"dense"``):
    each client chooses the form of its own rows.  A private summary is dense
    (``"auto"`` resolves so, ``"low-rank"`` is refused with ``epsilon``).

    Parameters
    ----------
    taus
        The candidates of tau = 'auto', comma-separated, distinct, in [0, 1].
    head_grid
        With tau = 'auto', server-side head parameters searched along with tau, as a
        JSON object of lists, such as '{"shrinkage": [0.001, 0.1]}' for FedCGS. Any of
        the head's ``server_params``, as :class:`~skslot.FederatedTauSearch`'s
        ``head_grid``.
    """

    tau: float | str = declare(
        "default",
        "Fraction of the transport each client applies (of its covariance's, with mean-tau), "
        "'auto': chosen by the clients' validation over taus, or 'default': the label mix's "
        f"({CLIENT_MIX_TAU:g} with each node's own, {TAU:g} with the federation's)",
        details='See :class:`~skslot.SLOTTransformer`; ``"auto"`` runs the protocol of '
        ':class:`~skslot.FederatedTauSearch`; ``"default"`` is '
        ":func:`skslot.defaults.default_tau` of ``label-mix``.",
        words=("auto", "default"),
        low=0.0,
        high=1.0,
    )
    mean_tau: float | None = owned(OneShotProtocol, "mean_tau")
    client_tau: str = owned(OneShotProtocol, "client_tau")
    summary_covariance: str = owned(OneShotProtocol, "summary_covariance")
    summary_form: str = owned(GaussianSummaryEstimator, "form", default=FORM)
    taus: str = declare(
        ",".join(f"{t:g}" for t in DEFAULT_TAUS), form="comma-separated numbers", decode=_tau_grid
    )
    head_grid: str = declare("", form="a JSON object of lists", decode=_json_grid)
    validation_fraction: float = owned(OneShotProtocol, "validation_fraction")
    selection_rule: str = owned(OneShotProtocol, "selection_rule")

    @property
    def auto(self) -> bool:
        """Whether ``tau`` is chosen by the federation."""
        return self.tau == "auto"

    @property
    def tau_grid(self) -> tuple[float, ...]:
        """The candidate taus of ``tau = "auto"`` (sorted)."""
        return _tau_grid("taus", self.taus)

    def head_grid_values(self) -> dict[str, list] | None:
        """Server-side head parameters searched with ``tau``, decoded (``None``: none).

        Returns
        -------
        head_grid : dict of str to list or None
            ``head_grid`` as a dict, or ``None`` when it is empty.
        """
        return _json_grid("head_grid", self.head_grid) or None


@declared
@dataclass(frozen=True)
class DefenceSettings(SettingsGroup):
    """What the server accepts from a client.

    The defaults of the bounds are :class:`~skslot.defence.DefenceBounds`'.

    Parameters
    ----------
    defence
        Screen the clients against each other: implausible summaries and counts
        rejected, weights capped, a head's statistics checked against the client's own
        summary. The bounds below (:mod:`skslot.defence`).  ``False`` accepts every
        client whose messages pass the wire checks (for studying attacks;
        docs/threats.md).
    max_dimension
        Largest feature dimension the server accepts from a client. It bounds the memory
        and time one summary can cost: ``8 m^2`` bytes.
    n_features
        The feature dimension every client must send (0: the dimension most clients
        send). At most ``max_dimension``.
    """

    defence: bool = declare(True)
    max_dimension: int = declare(4096, low=1)
    n_features: int = declare(0, low=0)
    max_count_ratio: float = owned(DefenceBounds, "max_count_ratio")
    max_weight_ratio: float = owned(DefenceBounds, "max_weight_ratio")
    max_norm_ratio: float = owned(DefenceBounds, "max_norm_ratio")
    clip_norm_ratio: float | None = owned(DefenceBounds, "clip_norm_ratio")
    max_variance_ratio: float = owned(DefenceBounds, "max_variance_ratio")
    max_mean_offset: float = owned(DefenceBounds, "max_mean_offset")
    screen: str = owned(OneShotProtocol, "screen")
    screen_significance: float = owned(DefenceBounds, "screen_significance")
    screen_min_gain: float = owned(DefenceBounds, "screen_min_gain")

    def _check_together(self) -> None:
        if self.n_features > self.max_dimension:
            raise ValueError(
                f"n_features must be at most max_dimension ({self.max_dimension}), got "
                f"{self.n_features!r} (run-config keys 'n-features' and 'max-dimension')"
            )
        if self.screen == "on" and not self.defence:
            raise ValueError(
                "screen='on' needs a defence: its thresholds are the defence's "
                "screen-significance and screen-min-gain (run-config keys 'screen' and "
                "'defence')"
            )

    def defence_bounds(self) -> DefenceBounds | None:
        """The defence's bounds (``None`` with the defence off).

        Returns
        -------
        bounds : DefenceBounds or None
            The part's settings of the same names as
            :class:`~skslot.defence.DefenceBounds`' fields, or ``None`` when
            ``defence`` is false.
        """
        if not self.defence:
            return None
        return DefenceBounds(**{f.name: getattr(self, f.name) for f in fields(DefenceBounds)})


@declared
@dataclass(frozen=True)
class DataSettings(SettingsGroup):
    """Where a node's rows come from when its node config names a partition.

    Parameters
    ----------
    alpha
        Dirichlet label skew of the partition ('none': no skew). Used by the clients
        whose node config names a multi-domain data set.
    dataset
        The multi-domain data set partitioned among the clients: an embedded one
        (digits, office-caltech10) or a file every node can read. See
        :func:`skslot.datasets.load_dataset`; a node's own ``dataset`` node config takes
        precedence (:func:`~skslot.flower.load_client_data`).
    clients_per_domain
        Clients each domain's rows are dealt into before the Dirichlet step. See
        :func:`skslot.datasets.dirichlet_partition`.
    test_size
        Share of each domain's rows held out as the clients' test rows.
    """

    alpha: float | None = declare(0.1, low=0.0, low_open=True)
    dataset: str = declare("digits")
    clients_per_domain: int = declare(1, low=1)
    test_size: float = declare(0.3, low=0.0, high=1.0)


@declared
@dataclass(frozen=True)
class PrivacySettings(SettingsGroup):
    """Each client's differential-privacy budget (:mod:`skslot.privacy`).

    ``epsilon = "none"`` (the default) sends exact values.  One (epsilon,
    delta) budget per client covers everything it sends: with FedCGS its
    statistics, from which the server derives its summary, with FedPFT its
    class moments (one component per class), with O-FedAvg its summary, its
    label-shift counts and its local head (keep the head's ``C`` times
    ``clip_norm`` squared near 0.1: its noise grows with it), and its test
    counts; at a fixed ``tau`` and without the screening.  A node's own
    ``epsilon``, ``delta`` and ``clip-norm`` (node config) is the budget it
    enforces, and it refuses a run under another.  With a head of no private
    release of its own, only the summary is private.
    """

    epsilon: float | None = owned(PrivacyBudget, "epsilon", default=None)
    delta: float = owned(PrivacyBudget, "delta")
    clip_norm: float = owned(PrivacyBudget, "clip_norm")


@declared
@dataclass(frozen=True)
class RunSettings(SettingsGroup):
    """Who takes part, how long the server waits, and where it writes.

    A deployment's ``min_clients`` defaults to 2 (the protocol's, 1, suits a
    simulation).

    Parameters
    ----------
    num_clients
        Clients the server waits for, up to connect-timeout seconds (0: whoever is
        connected by then).
    accept_partial
        Whether a run some node left (rejected or missing, with min-clients still met)
        counts as a success for skslot flower-run. ``False``: ``skslot flower-run``
        exits 4 (:data:`skslot.flower.launch.PARTIAL`) and names each node left out with
        why; the server runs the same either way.
    connect_timeout
        Seconds the server waits for num-clients nodes to connect.
    reply_timeout
        Seconds the server waits for the replies of one stage; a node that has not
        answered by then is reported missing (hung or disconnected).
    progress_interval
        Seconds between the server's progress lines while it waits for a stage's replies
        (0: only the line at each stage's end).
    retry_interval
        Seconds after which the server sends a stage's message again to a node whose
        message or reply the SuperLink reports lost. As long as the stage's
        ``reply_timeout`` has not run out (after a SuperLink restart, say).
    output_dir
        Where the server writes each run's folder, run-<run id>/, and the latest and
        last-completed pointers (empty: nothing is written). A run's folder holds
        ``report.json``, ``global_head.npz`` and ``reference.bin``
        (:mod:`skslot.flower.outputs`).
    """

    num_clients: int = declare(0, low=0)
    min_clients: int = owned(OneShotProtocol, "min_clients", default=2)
    accept_partial: bool = declare(False)
    connect_timeout: float = declare(60.0, low=0.0)
    reply_timeout: float = declare(300.0, low=0.0)
    progress_interval: float = declare(10.0, low=0.0)
    retry_interval: float = declare(10.0, low=0.0)
    output_dir: str = declare("")
