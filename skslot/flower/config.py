"""Run configuration of the Flower deployment, and the Flower App it runs in.

Flower passes a run's settings to both apps as a flat ``run_config`` mapping
(from ``[tool.flwr.app.config]`` of the App's ``pyproject.toml``, overridden by
``flwr run --run-config``).  :class:`DeploymentConfig` reads and validates it
once, so the server and every client agree on its meaning;
:func:`write_flower_app` writes a ready-to-run App directory whose
components are skslot's own apps.

Each setting is declared once, as a field of one of the configuration's parts
(:class:`ProtocolSettings`, :class:`AlignmentSettings`,
:class:`DefenceSettings`, :class:`DataSettings`, :class:`PrivacySettings`,
:class:`RunSettings`) whose metadata is a :class:`Setting`: its run-config key,
type, default, allowed values and help.  Reading and writing a run config,
the checks, the parts' documentation and ``skslot flower-app --help`` all
come from these declarations.
"""

from __future__ import annotations

import difflib
import inspect
import json
import math
import os
import textwrap
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from numbers import Integral, Real
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from ..accounting import PrivacyBudget
from ..barycenter import BuresBarycenter
from ..defaults import (
    CLIENT_MIX_TAU,
    CLIENT_TAU,
    LABEL_MIX,
    MEAN_TAU,
    TAU,
    VALIDATION_FRACTION,
)
from ..defence import DefenceBounds
from ..heads import OneShotHead, head_class, make_head
from ..label_mix import LABEL_MIXES
from ..label_shift import CLIENT_TAU_RULES
from ..protocol import OneShotProtocol, ReferenceStep, private_run_problem
from ..protocol.stages.upload import private_summary_problem
from ..screening import SCREENING
from ..selection import DEFAULT_TAUS, SELECTION_RULES, candidate_grid, check_tau_grid
from ..summary import COVARIANCES, GaussianSummaryEstimator
from ..wire.summary_codec import SUMMARY_DTYPES

__all__ = [
    "AlignmentSettings",
    "DataSettings",
    "DefenceSettings",
    "DeploymentConfig",
    "PrivacySettings",
    "ProtocolSettings",
    "RunSettings",
    "Setting",
    "write_flower_app",
]


_SETTING = "skslot.setting"  # the key of a setting's declaration in its field's metadata
_BOUNDS = {f.name: f.default for f in fields(DefenceBounds)}  # the defence's own defaults


# -- the declarations ---------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One setting of the run config, declared once, and what reads, checks and shows it.

    Each part of :class:`DeploymentConfig` declares its settings as dataclass
    fields whose metadata says what the field alone cannot (help, bounds,
    options); the part builds each field's :class:`Setting` from both: the
    ``name`` and ``default`` from the field, ``kind`` and ``nullable`` from
    its type annotation (``float | None``), the rest from the metadata.

    Attributes
    ----------
    name : str
        The name in Python (the part's field, and :class:`DeploymentConfig`'s
        attribute).
    kind : {bool, int, float, str}
        The type a run config holds.
    default : bool, int, float, str or None
        The default value.
    help : str
        One plain-text sentence: the command line's help, and the start of
        the setting's documentation.
    details : str, default=""
        More documentation (reStructuredText), after ``help``.
    nullable : bool, default=False
        Whether ``None`` is allowed, written ``"none"`` in a run config.
    words : tuple of str, default=()
        Strings allowed besides a number (``tau``'s ``"auto"``).
    options : tuple of str, default=()
        The allowed values of a string (empty: any).
    low, high : float or None, default=None
        The bounds of a number.
    low_open, high_open : bool, default=False
        Whether the bound itself is excluded.
    nonzero : bool, default=False
        Whether zero is excluded (joblib's ``n_jobs``).
    form : str, default=""
        What a string holds, for the messages and the help (``"a JSON
        object"``).
    decode : callable, optional
        ``decode(name, text)``: the value a string stands for; raises
        ``ValueError`` for a string that stands for none.

    Examples
    --------
    >>> from skslot.flower import DeploymentConfig
    >>> tau = DeploymentConfig.setting("tau")
    >>> tau.key, tau.default, tau.allowed
    ('tau', 'default', "a number in [0, 1] or 'auto' or 'default'")
    >>> tau.check(1)
    1.0
    >>> tau.check(1.5)
    Traceback (most recent call last):
    ...
    ValueError: tau must be in [0, 1] or 'auto' or 'default', got 1.5 (run-config key 'tau')
    """

    name: str
    kind: type
    default: Any
    help: str
    details: str = ""
    nullable: bool = False
    words: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nonzero: bool = False
    form: str = ""
    decode: Callable[[str, str], Any] | None = None

    @property
    def key(self) -> str:
        """The run-config key (and the command line's option without its ``--``)."""
        return self.name.replace("_", "-")

    @property
    def allowed(self) -> str:
        """The allowed values, in words (``"a number in [0, 1] or 'auto'"``)."""
        if self.kind is float:
            bounds = self._bounds()
            return "a number" + (f" {bounds}" if bounds else "") + self._words()
        return self._kind_text()

    def check(self, value: Any) -> Any:
        """The value as the configuration holds it, or a ``ValueError`` naming the key.

        ``"none"`` (any case) stands for ``None`` where it is allowed, and an
        integer for a float, so a run config and Python keywords give the
        same configuration.

        Parameters
        ----------
        value : object
            The value given, from a run config or a Python keyword.

        Returns
        -------
        value : bool, int, float, str or None
            The value as ``kind`` (a word of ``words`` or ``None`` as it is).

        Raises
        ------
        ValueError
            For a value the setting does not allow, naming the setting, what
            it allows, the value and the run-config key.
        """
        if self.nullable and (
            value is None or (isinstance(value, str) and value.strip().lower() == "none")
        ):
            return None
        if isinstance(value, str) and value in self.words:
            return value
        if self.kind is bool:
            if not isinstance(value, (bool, np.bool_)):
                raise self._error(self._kind_text(), value)
            return bool(value)
        if self.kind is int:
            integer = isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))
            if not integer or not self._within(int(value)):
                raise self._error(self._kind_text(), value)
            return int(value)
        if self.kind is float:
            if (
                isinstance(value, (bool, np.bool_))
                or not isinstance(value, Real)
                or not math.isfinite(value)
            ):
                raise self._error(self._kind_text(), value)
            if not self._within(float(value)):
                raise self._error(self._bounds() + self._words(), value)
            return float(value)
        if not isinstance(value, str) or (self.options and value not in self.options):
            raise self._error(self._kind_text(), value)
        if self.decode is not None:
            try:
                self.decode(self.name, value)
            except ValueError as exc:
                raise ValueError(f"{exc} {self.where}") from None
        return value

    def from_text(self, text: str) -> Any:
        """A command-line value as a run config holds it (what does not parse stays text).

        Text that is not of the setting's type is left as it is, so that
        :meth:`check` refuses it with its usual message.

        Parameters
        ----------
        text : str
            The command line's value.

        Returns
        -------
        value : bool, int, float or str
            ``"true"``/``"false"`` (any case) as a bool for a bool setting,
            text that parses as a number for a number setting, else ``text``.
        """
        if self.kind is bool and text.strip().lower() in ("true", "false"):
            return text.strip().lower() == "true"
        if self.kind in (int, float) and text not in self.words:
            try:
                return self.kind(text)
            except ValueError:
                return text
        return text

    def to_run_config(self, value: Any) -> bool | int | float | str:
        """The value as a run config writes it (``None`` as ``"none"``).

        Parameters
        ----------
        value : bool, int, float, str or None
            The value as the configuration holds it.

        Returns
        -------
        value : bool, int, float or str
            ``value``, or ``"none"`` for ``None``.
        """
        return "none" if value is None else value

    @property
    def where(self) -> str:
        """``(run-config key '...')``, appended to the messages about this setting."""
        return f"(run-config key {self.key!r})"

    @property
    def shown_default(self) -> str:
        """The default as a run config writes it (``none``, ``true``, ``'FedCGS'``)."""
        if self.default is None:
            return "none"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if isinstance(self.default, str) and self.default not in self.words:
            return repr(self.default)
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)

    @property
    def doc_type(self) -> str:
        """The type as a numpydoc parameter line gives it (``float or "auto"``)."""
        if self.options:
            text = "{" + ", ".join(json.dumps(option) for option in self.options) + "}"
        else:
            text = self.kind.__name__
        text += "".join(f" or {json.dumps(word)}" for word in self.words)
        return text + (" or None" if self.nullable else "")

    def _error(self, requirement: str, value: Any) -> ValueError:
        return ValueError(f"{self.name} must be {requirement}, got {value!r} {self.where}")

    def _kind_text(self) -> str:
        if self.kind is bool:
            return "true or false"
        if self.kind is int:
            if self.nonzero:
                return "a non-zero integer"
            if self.low == 0 and self.high is None:
                return "a non-negative integer"
            if self.low == 1 and self.high is None:
                return "a positive integer"
            bounds = self._bounds()
            return "an integer" + (f" {bounds}" if bounds else "")
        if self.kind is float:
            closed = self.low is not None and self.high is not None
            return "a number" + (f" {self._bounds()}" if closed else "") + self._words()
        if self.options:
            return "one of " + ", ".join(map(repr, self.options))
        return self.form or "a string"

    def _words(self) -> str:
        words = (*self.words, *(("none",) if self.nullable else ()))
        return "".join(f" or {word!r}" for word in words)

    def _bounds(self) -> str:
        low, high = self.low, self.high
        if low is not None and high is not None:
            left = "(" if self.low_open else "["
            right = ")" if self.high_open else "]"
            return f"in {left}{low:g}, {high:g}{right}"
        if low is not None:
            return f"{'>' if self.low_open else '>='} {low:g}"
        if high is not None:
            return f"{'<' if self.high_open else '<='} {high:g}"
        return ""

    def _within(self, value: float) -> bool:
        if self.nonzero and value == 0:
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return True


def _setting(
    default: Any,
    help: str,
    *,
    details: str = "",
    words: tuple[str, ...] = (),
    options: tuple[str, ...] = (),
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    nonzero: bool = False,
    form: str = "",
    decode: Callable[[str, str], Any] | None = None,
) -> Any:
    """A part's field that declares a setting (parameters: those of :class:`Setting`)."""
    declared = {
        "help": help,
        "details": details,
        "words": words,
        "options": options,
        "low": low,
        "high": high,
        "low_open": low_open,
        "high_open": high_open,
        "nonzero": nonzero,
        "form": form,
        "decode": decode,
    }
    return field(default=default, metadata={_SETTING: declared})


_PartT = TypeVar("_PartT", bound="_Settings")


def _declared(cls: type[_PartT]) -> type[_PartT]:
    """Read a part's declarations into :class:`Setting` objects, and document them.

    The kind and whether ``None`` is allowed come from each field's type
    annotation (``float | None``; ``float | str`` with ``words``); the part's
    docstring gets a Parameters section written from the settings.
    """
    hints = typing.get_type_hints(cls)
    declared = []
    for f in fields(cls):
        kinds = set(typing.get_args(hints[f.name])) or {hints[f.name]}
        nullable = type(None) in kinds
        kinds.discard(type(None))
        if len(kinds) == 2 and str in kinds and f.metadata[_SETTING]["words"]:
            kinds.discard(str)
        (kind,) = kinds
        declared.append(Setting(f.name, kind, f.default, nullable=nullable, **f.metadata[_SETTING]))
    cls._settings = tuple(declared)
    for s in cls._settings:
        s.check(s.default)  # a declaration whose default it refuses is a bug here
    cls.__doc__ = _parameters_section(cls)
    return cls


def _parameters_section(cls: type[_Settings]) -> str:
    lines = [inspect.cleandoc(cls.__doc__ or ""), "", "Parameters", "----------"]
    for s in cls._settings:
        default = json.dumps(s.default) if isinstance(s.default, str) else repr(s.default)
        lines.append(f"{s.name} : {s.doc_type}, default={default}")
        text = f"{s.help}. {s.details} Run config: ``{s.key}``, {s.allowed}."
        lines += textwrap.wrap(
            " ".join(text.split()),
            width=79,
            initial_indent="    ",
            subsequent_indent="    ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    return "\n".join(lines) + "\n"


class _Settings:
    """What every part shares: checks of its settings, from their declarations."""

    _settings: ClassVar[tuple[Setting, ...]] = ()

    def __post_init__(self) -> None:
        for s in self._settings:
            object.__setattr__(self, s.name, s.check(getattr(self, s.name)))
        self._check_together()

    def _check_together(self) -> None:
        """Checks between this part's settings (each is already checked alone)."""

    @classmethod
    def settings(cls) -> tuple[Setting, ...]:
        """The part's settings, in their order in a run config.

        Returns
        -------
        settings : tuple of Setting
            One declaration per field of the part.
        """
        return cls._settings

    @classmethod
    def setting(cls, name: str) -> Setting:
        """The declaration of one of the part's settings, by its name or its run-config key.

        Parameters
        ----------
        name : str
            The setting's name (``"mean_tau"``) or run-config key
            (``"mean-tau"``).

        Returns
        -------
        setting : Setting

        Raises
        ------
        KeyError
            For a name that is none of the part's settings.
        """
        return _find_setting(cls._settings, name, f"{cls.__name__} has no setting")


def _find_setting(settings: tuple[Setting, ...], name: str, missing: str) -> Setting:
    """The setting of ``settings`` whose name or run-config key is ``name``."""
    for s in settings:
        if name in (s.name, s.key):
            return s
    raise KeyError(f"{missing} {name!r}")


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


@_declared
@dataclass(frozen=True)
class ProtocolSettings(_Settings):
    """The head every party trains, the class set, the seed and the server's step."""

    head: str = _setting(
        "FedCGS",
        "The one-shot head: FedCGS, O-FedAvg, FedPFT, or a OneShotHead subclass by import "
        "path ('package.module:Class', importable on the server and on every node)",
        details="Built by :func:`skslot.heads.make_head`.",
        form="a head name or 'package.module:Class'",
    )
    head_params: str = _setting(
        "",
        "The head's constructor parameters as a JSON object, such as "
        '\'{"covariance_type": "full", "rank": 16}\' (empty: its defaults)',
        details="``random_state`` defaults to ``seed``.  Unknown names are an error naming "
        "the allowed ones, raised before any client is contacted.",
        form="a JSON object",
        decode=_json_object,
    )
    label_mix: str = _setting(
        LABEL_MIX,
        "Whose label mix each node's future rows follow: its own ('client': each node's mean "
        "moves by its domain offset measured within classes, and it predicts with its own "
        "class counts) or the federation's ('federation', every class of its domain served, "
        "the paper's test)",
        details="The head's ``label_mix`` (:mod:`skslot.label_mix`, "
        ":attr:`skslot.protocol.OneShotProtocol.label_mix`); docs/choosing.md gives the cost "
        "of each wrong choice.",
        options=LABEL_MIXES,
    )
    classes: str = _setting(
        "0,1,2,3,4,5,6,7,8,9",
        "The global class set: comma-separated integer labels, or class names (a node's "
        "table labels are matched by name and sent as their position in the list)",
        details="Agreed in the configuration: a client cannot enlarge it, and one whose "
        "labels fall outside it fails.",
        form="comma-separated labels",
        decode=_class_names,
    )
    seed: int = _setting(
        0, "Seed of the partition, of the clients' validation splits and of the head", low=0
    )
    summary_dtype: str = _setting(
        "float32",
        "Precision of the summaries and of the reference on the wire",
        options=SUMMARY_DTYPES,
    )
    server_jobs: int = _setting(
        1,
        "Parallel jobs of the server's barycenter and maps over blocks of clients (-1: every core)",
        details="joblib's convention; see :class:`~skslot.BuresBarycenter`.",
        nonzero=True,
    )
    client_batch: int = _setting(
        0,
        "Clients the server's barycenter decomposes together (0: all in one float64 stack, "
        "the fastest)",
        details="A positive value bounds the iteration's memory beyond the decoded summaries "
        "to about ``5 * client_batch * m^2`` float64 per job, for many clients "
        "(docs/performance.md); all in one stack takes about ``5 K m^2``.",
        low=0,
    )

    def _check_together(self) -> None:
        try:
            head_class(self.head)
        except ValueError as exc:
            raise ValueError(f"{exc} {self.setting('head').where}") from None
        try:
            self.make_head()
        except ValueError as exc:
            raise ValueError(f"{exc} {self.setting('head_params').where}") from None

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

    def label_codes(self, labels: Any, *, where: str = "the node's data") -> np.ndarray:
        """A node's labels as the protocol's class set (integer labels, or name positions).

        Parameters
        ----------
        labels : array-like of shape (n_samples,)
            The node's labels: integer labels, or class names as ``classes``
            lists them.
        where : str, default="the node's data"
            Where the labels come from, for the error message.

        Returns
        -------
        codes : ndarray of shape (n_samples,) of int64
            Each label as its integer label, or as its class name's position
            in ``classes``.

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
            shown = ", ".join(map(repr, bad[:5])) + (f" and {len(bad) - 5} more" if bad[5:] else "")
            raise ValueError(
                f"labels [{shown}] of {where} are not in the run's class set {self.classes!r}: "
                f"set `{self.setting('classes').key}` in the run config to every class of the "
                "federation (names or integers, comma-separated)"
            )
        return codes


@_declared
@dataclass(frozen=True)
class AlignmentSettings(_Settings):
    """How far each client moves its features, and how the federation chooses ``tau``."""

    tau: float | str = _setting(
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
    mean_tau: float | None = _setting(
        MEAN_TAU,
        "Fraction of the mean's transport, the same for every client and candidate tau "
        "('none': the mean follows each client's tau, the paper's geodesic)",
        details=":class:`~skslot.SLOTTransformer`'s ``mean_tau``; the paper's configuration "
        'is ``tau = 0.4``, ``mean-tau = "none"``, ``client-tau = "uniform"``.',
        low=0.0,
        high=1.0,
    )
    client_tau: str = _setting(
        CLIENT_TAU,
        "Each client's fraction of the transport: tau for all ('uniform', the paper's), or "
        "tau times the total-variation distance between its class proportions and the "
        "federation's ('label-shift')",
        details='With ``"label-shift"`` the clients upload their class counts (see '
        ":mod:`skslot.label_shift`).",
        options=CLIENT_TAU_RULES,
    )
    summary_covariance: str = _setting(
        "total",
        "The covariance each client's summary transports: of all its rows ('total', the "
        "paper's) or of its class-centred rows ('within', label-aware)",
        details='See :class:`~skslot.GaussianSummaryEstimator`; ``"within"`` has no '
        "private release of its own, so it is refused with ``epsilon`` where the summary is "
        "released (O-FedAvg); FedCGS derives it from its released statistics.",
        options=COVARIANCES,
    )
    taus: str = _setting(
        ",".join(f"{t:g}" for t in DEFAULT_TAUS),
        "The candidates of tau = 'auto', comma-separated, distinct, in [0, 1]",
        form="comma-separated numbers",
        decode=_tau_grid,
    )
    head_grid: str = _setting(
        "",
        "With tau = 'auto', server-side head parameters searched along with tau, as a JSON "
        "object of lists, such as '{\"shrinkage\": [0.001, 0.1]}' for FedCGS",
        details="Any of the head's ``server_params``, as :class:`~skslot.FederatedTauSearch`'s "
        "``head_grid``.",
        form="a JSON object of lists",
        decode=_json_grid,
    )
    validation_fraction: float = _setting(
        VALIDATION_FRACTION,
        "The share of each class of each client held out for validation, with tau = 'auto' "
        "or a screening",
        low=0.0,
        high=1.0,
        low_open=True,
        high_open=True,
    )
    selection_rule: str = _setting(
        "one-standard-error",
        "How the server chooses from the validation scores: the least-transport candidate "
        "within one standard error of the best, or the best",
        details="See :func:`~skslot.selection.select_candidate`.",
        options=SELECTION_RULES,
    )

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


@_declared
@dataclass(frozen=True)
class DefenceSettings(_Settings):
    """What the server accepts from a client.

    The defaults of the bounds are :class:`~skslot.defence.DefenceBounds`'.
    """

    defence: bool = _setting(
        True,
        "Screen the clients against each other: implausible summaries and counts rejected, "
        "weights capped, a head's statistics checked against the client's own summary",
        details="The bounds below (:mod:`skslot.defence`).  ``False`` accepts every client "
        "whose messages pass the wire checks (for studying attacks; docs/security.md).",
    )
    max_dimension: int = _setting(
        4096,
        "Largest feature dimension the server accepts from a client",
        details="It bounds the memory and time one summary can cost: ``8 m^2`` bytes.",
        low=1,
    )
    n_features: int = _setting(
        0,
        "The feature dimension every client must send (0: the dimension most clients send)",
        details="At most ``max_dimension``.",
        low=0,
    )
    max_count_ratio: float = _setting(
        _BOUNDS["max_count_ratio"],
        "A client declaring more than this many times the median client's rows is rejected",
        low=1.0,
    )
    max_weight_ratio: float = _setting(
        _BOUNDS["max_weight_ratio"],
        "Each remaining client's weight, in the barycenter and the head, is capped at this "
        "many times the median count",
        low=1.0,
    )
    max_norm_ratio: float = _setting(
        _BOUNDS["max_norm_ratio"],
        "O-FedAvg: a client whose local head's norm exceeds this many times the median "
        "client's is rejected",
        low=1.0,
    )
    max_variance_ratio: float = _setting(
        _BOUNDS["max_variance_ratio"],
        "A summary whose mean variance tr(S) / m is more than this factor above or below the "
        "clients' median is rejected",
        details="With 3 or more clients; honest clients of the real data sets stay within "
        "9.5 (docs/deployment.md).",
        low=1.0,
    )
    max_mean_offset: float = _setting(
        _BOUNDS["max_mean_offset"],
        "A summary whose mean lies more than this many median standard deviations from the "
        "clients' coordinate-wise median mean is rejected",
        details="The median standard deviation is ``sqrt(m * median variance)``; honest "
        "clients stay within 2.0.",
        low=0.0,
    )
    screen: str = _setting(
        "auto",
        "Screen each client's contribution by the other clients' validation: 'auto' wherever "
        "the defence is on, 'on' the same but refused without it, 'off' never",
        details="See :mod:`skslot.screening`.  A run of four clients or more screens (at a "
        "fixed ``tau`` too: one more exchange); the clients then hold out validation rows, "
        "and the final head is the screened one, fitted on the fitting rows.",
        options=SCREENING,
    )
    screen_significance: float = _setting(
        _BOUNDS["screen_significance"],
        "Family-wise level of the screening's sign test",
        low=0.0,
        high=1.0,
    )
    screen_min_gain: float = _setting(
        _BOUNDS["screen_min_gain"],
        "Smallest gain of the other clients' validation accuracy without a client that excludes it",
        low=0.0,
        high=1.0,
    )

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

    def bounds(self) -> DefenceBounds | None:
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
        return DefenceBounds(**{name: getattr(self, name) for name in _BOUNDS})


@_declared
@dataclass(frozen=True)
class DataSettings(_Settings):
    """Where a node's rows come from when its node config names a partition."""

    alpha: float | None = _setting(
        0.1,
        "Dirichlet label skew of the partition ('none': no skew)",
        details="Used by the clients whose node config names a multi-domain data set.",
        low=0.0,
        low_open=True,
    )
    dataset: str = _setting(
        "digits",
        "The multi-domain data set partitioned among the clients: an embedded one (digits, "
        "office-caltech10) or a file every node can read",
        details="See :func:`skslot.datasets.load_dataset`; a node's own ``dataset`` node "
        "config takes precedence (:func:`~skslot.flower.load_client_data`).",
    )
    clients_per_domain: int = _setting(
        1,
        "Clients each domain's rows are dealt into before the Dirichlet step",
        details="See :func:`skslot.datasets.dirichlet_partition`.",
        low=1,
    )
    test_size: float = _setting(
        0.3,
        "Share of each domain's rows held out as the clients' test rows",
        low=0.0,
        high=1.0,
    )


@_declared
@dataclass(frozen=True)
class PrivacySettings(_Settings):
    """Each client's differential-privacy budget (:mod:`skslot.accounting`)."""

    epsilon: float | None = _setting(
        None,
        "The epsilon of each client's privacy budget ('none': exact values)",
        details="One (epsilon, delta) budget per client covers everything it sends "
        "(skslot.accounting): with FedCGS its statistics, from which the server derives its "
        "summary, with FedPFT its class moments (one component per class), with O-FedAvg its "
        "summary, its label-shift counts and its local head (keep the head's C times "
        "clip-norm squared near 0.1: its noise grows with it), and its test counts; at a "
        "fixed tau and without the screening. "
        "A node's own 'epsilon', 'delta' and 'clip-norm' (node config) is the budget it "
        "enforces, and it refuses a run under another.  With a head of no private release "
        "of its own, only the summary is private.",
        low=0.0,
        low_open=True,
    )
    delta: float = _setting(
        1e-5,
        "The delta of each client's (epsilon, delta) budget",
        low=0.0,
        high=1.0,
        low_open=True,
    )
    clip_norm: float = _setting(
        1.0,
        "Row-norm bound of the private releases, in the features' units (choose it from "
        "public knowledge: 1 clips nothing for L2-normalised features)",
        low=0.0,
        low_open=True,
    )


@_declared
@dataclass(frozen=True)
class RunSettings(_Settings):
    """Who takes part, how long the server waits, and where it writes."""

    num_clients: int = _setting(
        0,
        "Clients the server waits for, up to connect-timeout seconds (0: whoever is "
        "connected by then)",
        low=0,
    )
    min_clients: int = _setting(
        2,
        "Fewest clients that must answer every stage; below it the run fails with an error "
        "naming who was missing or rejected",
        low=1,
    )
    accept_partial: bool = _setting(
        False,
        "Whether a run some node left (rejected or missing, with min-clients still met) counts "
        "as a success for skslot flower-run",
        details="``False``: ``skslot flower-run`` exits 4 "
        "(:data:`skslot.flower.launch.PARTIAL`) and names each node left out with why; the "
        "server runs the same either way.",
    )
    connect_timeout: float = _setting(
        60.0, "Seconds the server waits for num-clients nodes to connect", low=0.0
    )
    reply_timeout: float = _setting(
        300.0,
        "Seconds the server waits for the replies of one stage; a node that has not answered "
        "by then is reported missing (hung or disconnected)",
        low=0.0,
    )
    progress_interval: float = _setting(
        10.0,
        "Seconds between the server's progress lines while it waits for a stage's replies "
        "(0: only the line at each stage's end)",
        low=0.0,
    )
    retry_interval: float = _setting(
        10.0,
        "Seconds after which the server sends a stage's message again to a node whose "
        "message or reply the SuperLink reports lost",
        details="As long as the stage's ``reply_timeout`` has not run out (after a SuperLink "
        "restart, say).",
        low=0.0,
    )
    output_dir: str = _setting(
        "",
        "Where the server writes each run's folder, run-<run id>/, and the latest and "
        "last-completed pointers (empty: nothing is written)",
        details="A run's folder holds ``report.json``, ``global_head.npz`` and "
        "``reference.bin`` (:mod:`skslot.flower.outputs`).",
    )


# -- the whole configuration --------------------------------------------------------------


@dataclass(frozen=True, init=False)
class DeploymentConfig:
    """Settings of one deployment run, shared by the server and the clients.

    Flower passes them as one flat run config (keys in kebab-case); they
    come in parts, each declaring its settings and the checks between them:
    :class:`ProtocolSettings` (the head, the class set, the seed, the server
    step), :class:`AlignmentSettings` (``tau`` and its choice),
    :class:`DefenceSettings` (what the server accepts), :class:`DataSettings`
    (a node's partition), :class:`PrivacySettings` and :class:`RunSettings`
    (participants, timeouts, outputs).  Every value is checked once, when the
    configuration is built, before any client is contacted; an error names
    the setting, its run-config key, what it allows and the value given.

    Every setting is also read as an attribute of the configuration
    (``config.tau`` is ``config.alignment_settings.tau``): the server, the
    clients and a user's code read a setting by the one name it has in the
    run config, the command line and the reports, without knowing which part
    declares it, and these attributes are written from the declarations, so
    no list of names is kept by hand.  The parts group the declarations,
    their checks and their documentation.

    Parameters
    ----------
    protocol_settings, alignment_settings, defence_settings : part, optional
        The parts (:class:`ProtocolSettings`, :class:`AlignmentSettings`,
        :class:`DefenceSettings`; the part's defaults when omitted).
    data_settings, privacy_settings, run_settings : part, optional
        The parts (:class:`DataSettings`, :class:`PrivacySettings`,
        :class:`RunSettings`; the part's defaults when omitted).
    **settings
        Any setting of the parts by its name, such as ``tau=0.4`` (each part
        lists its settings), overriding the part's value.  A run config's
        spellings work too: ``"none"`` for ``None``, an integer for a float.

    Raises
    ------
    ValueError
        For a value a setting does not allow, or settings that do not go
        together (a ``head-grid`` that names parameters the head does not
        have, ``epsilon`` with a head whose statistics are exact moments).
    TypeError
        For a name that is no setting.

    See Also
    --------
    Setting : a setting's declaration.
    write_flower_app : a Flower App running with these settings.

    Examples
    --------
    >>> from skslot.flower import DeploymentConfig
    >>> config = DeploymentConfig.from_run_config({"head": "FedPFT", "alpha": "none"})
    >>> config.head, config.alpha, config.label_mix, config.tau, config.mean_tau, config.client_tau
    ('FedPFT', None, 'client', 'default', 1.0, 'label-shift')
    >>> config.protocol().tau  # the label mix's default
    0.0
    >>> config.to_run_config()["alpha"]
    'none'
    >>> DeploymentConfig.from_run_config({"mean-tau": "none"}).mean_tau is None  # the paper's
    True
    >>> config.make_head()
    FedPFTClassifier(random_state=0)
    >>> config.alignment_settings.selection_rule
    'one-standard-error'
    >>> DeploymentConfig(selection_rule="max")
    Traceback (most recent call last):
    ...
    ValueError: selection_rule must be one of 'one-standard-error', 'best', got 'max' ...
    """

    protocol_settings: ProtocolSettings = field(default_factory=ProtocolSettings)
    alignment_settings: AlignmentSettings = field(default_factory=AlignmentSettings)
    defence_settings: DefenceSettings = field(default_factory=DefenceSettings)
    data_settings: DataSettings = field(default_factory=DataSettings)
    privacy_settings: PrivacySettings = field(default_factory=PrivacySettings)
    run_settings: RunSettings = field(default_factory=RunSettings)

    def __init__(
        self,
        *,
        protocol_settings: ProtocolSettings | None = None,
        alignment_settings: AlignmentSettings | None = None,
        defence_settings: DefenceSettings | None = None,
        data_settings: DataSettings | None = None,
        privacy_settings: PrivacySettings | None = None,
        run_settings: RunSettings | None = None,
        **settings: Any,
    ) -> None:
        given: dict[str, _Settings | None] = {
            "protocol_settings": protocol_settings,
            "alignment_settings": alignment_settings,
            "defence_settings": defence_settings,
            "data_settings": data_settings,
            "privacy_settings": privacy_settings,
            "run_settings": run_settings,
        }
        home = self._homes()
        unknown = sorted(set(settings) - set(home))
        if unknown:
            close = [name for name in home if unknown[0] in name.split("_")]
            close = close or difflib.get_close_matches(unknown[0], home, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"DeploymentConfig has no setting {unknown[0]!r}{hint}")
        for attribute, part_class in self.parts().items():
            values = {name: v for name, v in settings.items() if home[name] == attribute}
            part = given[attribute]
            if part is None:
                part = part_class(**values)
            elif not isinstance(part, part_class):
                raise TypeError(
                    f"{attribute} must be {part_class.__name__}, got {type(part).__name__}"
                )
            elif values:
                part = replace(part, **values)
            object.__setattr__(self, attribute, part)
        self._check_together()

    if TYPE_CHECKING:  # each setting is an attribute (set below, from the declarations)

        def __getattr__(self, name: str) -> Any: ...

    @classmethod
    def _homes(cls) -> dict[str, str]:
        """Each setting's part: setting name -> the part's attribute."""
        return {s.name: name for name, part in cls.parts().items() for s in part.settings()}

    @classmethod
    def settings(cls) -> tuple[Setting, ...]:
        """Every setting, part by part, in the order of a run config.

        Returns
        -------
        settings : tuple of Setting
            The declarations of every part's settings.
        """
        return tuple(s for part in cls.parts().values() for s in part.settings())

    @classmethod
    def setting(cls, name: str) -> Setting:
        """The declaration of one setting, by its name or its run-config key.

        Parameters
        ----------
        name : str
            The setting's name (``"mean_tau"``) or run-config key
            (``"mean-tau"``).

        Returns
        -------
        setting : Setting

        Raises
        ------
        KeyError
            For a name that is no setting.
        """
        return _find_setting(cls.settings(), name, "no setting")

    @classmethod
    def parts(cls) -> dict[str, type[_Settings]]:
        """The parts' classes (their annotations) by their attribute (``"alignment_settings"``).

        Returns
        -------
        parts : dict of str to type
            Each part's class, by its attribute, in the order of a run config.
        """
        hints = typing.get_type_hints(cls)
        return {f.name: hints[f.name] for f in fields(cls)}

    def _check_together(self) -> None:
        """The checks between parts; each part has checked its own settings."""
        head = self.make_head()
        if self.auto:
            try:
                candidate_grid(head, self.tau_grid, self.head_grid_values())
            except ValueError as exc:
                raise ValueError(f"{exc} {self.setting('head_grid').where}") from None
        try:
            self.summary_estimator()._validate_params()
        except ValueError as exc:
            raise ValueError(
                f"{exc} (run-config keys 'summary-covariance', 'epsilon', 'delta' and 'clip-norm')"
            ) from None
        if head.private_release is None:
            why = private_summary_problem(head, self.epsilon)
        elif self.epsilon is not None:
            why = private_run_problem(
                head,
                auto=self.auto,
                screen=self.screen,
                summary_covariance=self.summary_covariance,
            )
        else:
            why = None
        if why:
            raise ValueError(
                f"{why} (run-config keys 'epsilon', 'head', 'tau', 'screen' and "
                "'summary-covariance')"
            )

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> DeploymentConfig:
        """Read Flower's ``run_config`` (keys in kebab-case; others are ignored).

        Parameters
        ----------
        run_config : mapping of str to value
            Flower's run config: a value per run-config key; a setting it
            does not hold keeps its default.

        Returns
        -------
        config : DeploymentConfig

        Raises
        ------
        ValueError
            For a value a setting does not allow, or settings that do not go
            together.
        """
        return cls(**{s.name: run_config[s.key] for s in cls.settings() if s.key in run_config})

    def to_run_config(self) -> dict[str, Any]:
        """The inverse of :meth:`from_run_config` (``None`` as ``"none"``).

        Returns
        -------
        run_config : dict of str to bool, int, float or str
            Every setting's value, by its run-config key.
        """
        return {s.key: s.to_run_config(getattr(self, s.name)) for s in self.settings()}

    # -- what the apps build from the settings --------------------------------------------

    @property
    def auto(self) -> bool:
        """Whether ``tau`` is chosen by the federation."""
        return self.alignment_settings.auto

    @property
    def tau_grid(self) -> tuple[float, ...]:
        """The candidate taus of ``tau = "auto"`` (sorted)."""
        return self.alignment_settings.tau_grid

    def head_grid_values(self) -> dict[str, list] | None:
        """Server-side head parameters searched with ``tau``, decoded (``None``: none).

        Returns
        -------
        head_grid : dict of str to list or None
            See :meth:`AlignmentSettings.head_grid_values`.
        """
        return self.alignment_settings.head_grid_values()

    def make_head(self) -> OneShotHead:
        """The run's head, with its parameters (:func:`skslot.heads.make_head`).

        Returns
        -------
        head : OneShotHead
            See :meth:`ProtocolSettings.make_head`.
        """
        return self.protocol_settings.make_head()

    @property
    def head_name(self) -> str:
        """The head's class name, for logs."""
        return head_class(self.head).__name__

    @property
    def class_names(self) -> list[str]:
        """The agreed classes as listed (names, or integer labels as text)."""
        return self.protocol_settings.class_names

    @property
    def class_set(self) -> np.ndarray:
        """The agreed classes as the protocol sends them (:attr:`ProtocolSettings.class_set`)."""
        return self.protocol_settings.class_set

    def label_codes(self, labels: Any, *, where: str = "the node's data") -> np.ndarray:
        """A node's labels as the protocol's class set (:meth:`ProtocolSettings.label_codes`).

        Parameters
        ----------
        labels : array-like of shape (n_samples,)
            The node's labels: integer labels, or class names as ``classes``
            lists them.
        where : str, default="the node's data"
            Where the labels come from, for the error message.

        Returns
        -------
        codes : ndarray of shape (n_samples,) of int64
            Each label as its integer label, or as its class name's position
            in ``classes``.

        Raises
        ------
        ValueError
            For a label outside the run's class set, naming it and the set.
        """
        return self.protocol_settings.label_codes(labels, where=where)

    def defence_bounds(self) -> DefenceBounds | None:
        """The defence's bounds (``None`` with the defence off).

        Returns
        -------
        bounds : DefenceBounds or None
            See :meth:`DefenceSettings.bounds`.
        """
        return self.defence_settings.bounds()

    def summary_estimator(self) -> GaussianSummaryEstimator:
        """How every client summarises its rows: the summary kind and its privacy.

        Returns
        -------
        estimator : GaussianSummaryEstimator
            Of ``summary_covariance``, private with ``epsilon``, ``delta`` and
            ``clip_norm`` when ``epsilon`` is set.
        """
        # a head with a private release derives the summary from it: no epsilon of its own
        private = self.epsilon is not None and self.make_head().private_release is None
        return GaussianSummaryEstimator(
            covariance=self.summary_covariance,
            epsilon=self.epsilon if private else None,
            delta=self.delta,
            clip_norm=self.clip_norm if private else None,
        )

    def privacy_budget(self) -> PrivacyBudget | None:
        """Each client's budget for the run, where the head makes private releases.

        Returns
        -------
        PrivacyBudget or None
            ``(epsilon, delta, clip_norm)`` with a head that has a private
            release (each built-in head); ``None`` without ``epsilon``, or
            with a head whose only private message is the summary.
        """
        if self.epsilon is None or self.make_head().private_release is None:
            return None
        return PrivacyBudget(self.epsilon, self.delta, self.clip_norm)

    def protocol(self) -> OneShotProtocol:
        """The run's protocol driver (:class:`skslot.protocol.OneShotProtocol`).

        Returns
        -------
        protocol : OneShotProtocol
            The server's driver, with every setting of this configuration.
        """
        barycenter = BuresBarycenter(
            client_batch=self.client_batch or None, n_jobs=self.server_jobs
        )
        return OneShotProtocol(
            self.make_head(),
            tau=None if self.tau == "default" else self.tau,
            taus=self.tau_grid,
            head_grid=self.head_grid_values(),
            validation_fraction=self.validation_fraction,
            selection_rule=self.selection_rule,
            reference=ReferenceStep(barycenter, wire_dtype=self.summary_dtype),
            defence=self.defence_bounds(),
            min_clients=self.min_clients,
            random_state=self.seed,
            client_tau=self.client_tau,
            mean_tau=self.mean_tau,
            summary_covariance=self.summary_covariance,
            screen=self.screen,
            privacy=self.privacy_budget(),
            config=self.to_run_config(),
        )


def _read_from(part: str, s: Setting) -> property:
    """``config.<setting>``: the setting's value, read from its part (its help, its docstring)."""

    def read(self: DeploymentConfig) -> Any:
        return getattr(getattr(self, part), s.name)

    read.__name__ = s.name
    read.__qualname__ = f"DeploymentConfig.{s.name}"
    read.__doc__ = f"{s.help}."
    return property(read)


for _part, _class in DeploymentConfig.parts().items():
    for _s in _class.settings():
        if hasattr(DeploymentConfig, _s.name):  # a setting may not hide a method
            raise TypeError(f"the setting {_s.name!r} clashes with DeploymentConfig.{_s.name}")
        setattr(DeploymentConfig, _s.name, _read_from(_part, _s))
del _part, _class, _s


# -- the Flower App -----------------------------------------------------------------------


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
