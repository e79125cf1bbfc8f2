"""The run configuration of a Flower deployment, shared by the server and every node.

Flower passes a run's settings to both apps as a flat ``run_config`` mapping
(from ``[tool.flwr.app.config]`` of the App's ``pyproject.toml``, overridden by
``flwr run --run-config``).  :class:`DeploymentConfig` reads and validates it
once, so the server and every client agree on its meaning.  Its settings come
in groups (:mod:`skslot.flower.groups`), each setting declared once
(:mod:`skslot.flower.settings`); :func:`~skslot.flower.write_flower_app`
writes the App directory that runs under it (:mod:`skslot.flower.app_files`).
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..barycenter import BuresBarycenter
from ..privacy import PrivacyBudget
from ..privacy._heads import private_release
from ..privacy.client import private_summary_problem
from ..protocol import OneShotProtocol, ReferenceStep
from ..summary import GaussianSummaryEstimator
from .groups import (
    AlignmentSettings,
    DataSettings,
    DefenceSettings,
    PrivacySettings,
    ProtocolSettings,
    RunSettings,
)
from .settings import Setting, SettingsGroup, naming

__all__ = ["DeploymentConfig"]


# -- the whole configuration --------------------------------------------------------------


@dataclass(frozen=True, init=False)
class DeploymentConfig(SettingsGroup):
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

    Every setting, and every method of a part, is also read as an attribute
    of the configuration (``config.tau`` is ``config.alignment_settings.tau``,
    ``config.make_head()`` is ``config.protocol_settings.make_head()``): the
    server, the clients and a user's code read a setting by the one name it
    has in the run config, the command line and the reports, without knowing
    which part declares it.  The parts group the declarations, their checks
    and their documentation.

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

    def __init__(self, **settings: Any) -> None:
        parts = self.parts()
        home = {s.name: attribute for attribute, part in parts.items() for s in part.settings()}
        unknown = sorted(set(settings) - set(home) - set(parts))
        if unknown:
            close = [name for name in home if unknown[0] in name.split("_")]
            close = close or difflib.get_close_matches(unknown[0], home, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"DeploymentConfig has no setting {unknown[0]!r}{hint}")
        for attribute, part_class in parts.items():
            values = {name: v for name, v in settings.items() if home.get(name) == attribute}
            part = settings.get(attribute)
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

    def __getattr__(self, name: str) -> Any:
        """A setting, or a part's method, by its name (``config.tau``, ``config.make_head``)."""
        if not name.startswith("_"):
            for part in self.__dict__.values():
                if hasattr(part, name):
                    return getattr(part, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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
    def parts(cls) -> dict[str, type[SettingsGroup]]:
        """The parts' classes (their annotations) by their attribute (``"alignment_settings"``).

        Returns
        -------
        parts : dict of str to type
            Each part's class, by its attribute, in the order of a run config.
        """
        hints = typing.get_type_hints(cls)
        return {f.name: hints[f.name] for f in fields(cls)}

    def _check_together(self) -> None:
        """The checks between parts; each part has checked its own settings.

        The protocol's rules between its settings (the head grid, a private
        run's head, ``tau`` and screening) are checked once, by building the
        protocol; the clients' own (their summary, a private summary beside
        a head's statistics) here.
        """
        with naming(
            "(run-config keys 'head', 'head-params', 'head-grid', 'tau', 'epsilon', 'screen' and "
            "'summary-covariance')"
        ):
            self.protocol()
        with naming(
            "(run-config keys 'summary-covariance', 'summary-form', 'epsilon', 'delta' and "
            "'clip-norm')"
        ):
            self.summary_estimator()._validate_params()
        if self.epsilon is not None and self.summary_form == "low-rank":
            raise ValueError(
                "summary-form 'low-rank' holds exact summaries, but a private run releases "
                "dense ones: use 'auto' or 'dense' with epsilon (run-config keys "
                "'summary-form' and 'epsilon')"
            )
        head = self.make_head()  # a head with a private release derives the summary from it
        why = None if private_release(head) else private_summary_problem(head, self.epsilon)
        if why:
            raise ValueError(f"{why} (run-config keys 'epsilon' and 'head')")

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
        values = {s.key: getattr(self, s.name) for s in self.settings()}
        return {key: "none" if value is None else value for key, value in values.items()}

    # -- what the apps build from the settings --------------------------------------------

    def summary_estimator(self) -> GaussianSummaryEstimator:
        """How every client summarises its rows: the summary kind and its privacy.

        Returns
        -------
        estimator : GaussianSummaryEstimator
            Of ``summary_covariance`` and ``summary_form``, private with ``epsilon``, ``delta`` and
            ``clip_norm`` when ``epsilon`` is set.
        """
        # a head with a private release derives the summary from it: no epsilon of its own
        private = self.epsilon is not None and private_release(self.make_head()) is None
        return GaussianSummaryEstimator(
            covariance=self.summary_covariance,
            form=self.summary_form,
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
        if self.epsilon is None or private_release(self.make_head()) is None:
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
