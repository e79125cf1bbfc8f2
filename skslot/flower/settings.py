"""Settings declared once: a run config's values, their checks, help and documentation.

A group of settings is a frozen dataclass deriving from :class:`SettingsGroup`
and decorated with :func:`declared`; each field is declared with
:func:`declare`, whose metadata says what the field alone cannot (help,
bounds, options).  Reading and writing a run config, the checks, the
groups' documentation and the command line's help all come from these
declarations (:class:`Setting`).  Nothing here knows skslot's settings:
those are :mod:`skslot.flower.groups`'.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import itertools
import json
import math
import re
import sys
import textwrap
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from numbers import Integral, Real
from typing import Any, ClassVar, TypeVar

import numpy as np

from .._param_validation import Interval, Options

__all__ = ["Setting", "SettingsGroup", "declare", "declared", "naming", "owned"]

#: The key of a setting's declaration in its field's metadata.
_SETTING = "skslot.setting"


#: Marks a default not given (an :func:`owned` setting's is its owner's).
_UNSET: Any = object()


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
    owner : str, default=""
        The parameter the setting is (``"skslot.protocol.OneShotProtocol.mean_tau"``,
        :func:`owned`): its default, options, bounds, help and details are
        read from there.

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
    owner: str = ""

    @property
    def key(self) -> str:
        """The run-config key (and the command line's option without its ``--``)."""
        return self.name.replace("_", "-")

    @property
    def allowed(self) -> str:
        """The allowed values, in words (``"a number in [0, 1] or 'auto'"``)."""
        if self.kind is bool:
            return "true or false"
        if self.kind is int:
            if self.nonzero:
                return "a non-zero integer"
            if self.low in (0, 1) and self.high is None:
                return f"a {'non-negative' if self.low == 0 else 'positive'} integer"
            return "an integer" + self._bounds()
        if self.kind is float:
            return "a number" + self._bounds() + self._words()
        if self.options:
            return "one of " + ", ".join(map(repr, self.options))
        return self.form or "a string"

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
        number = isinstance(value, Real) and not isinstance(value, (bool, np.bool_))
        if self.kind is bool:
            valid = isinstance(value, (bool, np.bool_))
        elif self.kind is int:
            valid = number and isinstance(value, Integral) and self._within(int(value))
        elif self.kind is float:
            valid = number and math.isfinite(value)
            if valid and not self._within(float(value)):
                raise self._error(self._bounds().lstrip() + self._words(), value)
        else:
            valid = isinstance(value, str) and (not self.options or value in self.options)
        if not valid:  # a number of one bound: its bound said once its type is right
            one_bound = self.kind is float and (self.low is None) != (self.high is None)
            raise self._error(f"a number{self._words()}" if one_bound else self.allowed, value)
        if self.decode is not None:
            with naming(self.where):
                self.decode(self.name, value)
        return self.kind(value)

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

    @property
    def where(self) -> str:
        """``(run-config key '...')``, appended to the messages about this setting."""
        return f"(run-config key {self.key!r})"

    @property
    def shown_default(self) -> str:
        """The default as a run config writes it (``none``, ``true``, ``'FedCGS'``)."""
        return self.shown(self.default)

    def shown(self, value: Any) -> str:
        """A value as a run config writes it, for the messages and the help.

        Parameters
        ----------
        value : bool, int, float, str or None
            A value of the setting.

        Returns
        -------
        str
            ``none``, ``true``, ``0.4``, ``'FedCGS'`` (a word such as ``auto``
            unquoted).
        """
        if value is None:
            return "none"
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, str) and value not in self.words:
            return repr(value)
        return f"{value:g}" if isinstance(value, float) else str(value)

    @property
    def metavar(self) -> str:
        """How a command line's ``--help`` shows the value: its options, or its kind."""
        if self.options or self.kind is bool:
            return "{" + ",".join(self.options or ("true", "false")) + "}"
        words = (*self.words, *(("none",) if self.nullable else ()))
        return "|".join(({int: "INT", float: "NUMBER"}.get(self.kind, "TEXT"), *words))

    def add_option(
        self, parser: Any, dest: str = "", *, default: Any = _UNSET, check: bool = False
    ) -> None:
        """Add the setting's command-line option, ``--<dest>`` in kebab-case, to ``parser``.

        Parameters
        ----------
        parser : argparse.ArgumentParser or argument group
        dest : str, default=""
            The attribute of the parsed options ("": the setting's name).
        default : object, optional
            The command's default, where it is not the setting's: shown in
            the help, and the value when the option is not given (else
            ``None``).
        check : bool, default=False
            Whether the option's value is checked as it is parsed (a value
            the setting refuses is a usage error, its message without the
            run-config key); else the text is kept, for :meth:`from_text`.
        """
        dest = dest or self.name
        allowed = "" if self.options or self.kind is bool else f"{self.allowed}; "
        shown = self.shown_default if default is _UNSET else self.shown(default)

        def parse(text: str) -> Any:
            try:
                return self.check(self.from_text(text))
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc).removesuffix(f" {self.where}")) from None

        parser.add_argument(
            "--" + dest.replace("_", "-"),
            dest=dest,
            type=parse if check else str,
            default=None if default is _UNSET else default,
            metavar=self.metavar,
            help=f"{self.help} ({allowed}default: {shown})".replace("%", "%%"),
        )

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

    def _words(self) -> str:
        words = (*self.words, *(("none",) if self.nullable else ()))
        return "".join(f" or {word!r}" for word in words)

    def _bounds(self) -> str:
        """The bounds in words, after a space (``" in [0, 1]"``, ``" > 0"``; ``""``: none)."""
        low, high = self.low, self.high
        if low is not None and high is not None:
            left = "(" if self.low_open else "["
            right = ")" if self.high_open else "]"
            return f" in {left}{low:g}, {high:g}{right}"
        if low is not None:
            return f" {'>' if self.low_open else '>='} {low:g}"
        if high is not None:
            return f" {'<' if self.high_open else '<='} {high:g}"
        return ""

    def _within(self, value: float) -> bool:
        low = self.low is None or value > self.low or (value == self.low and not self.low_open)
        high = self.high is None or value < self.high or (value == self.high and not self.high_open)
        return low and high and not (self.nonzero and value == 0)


@contextlib.contextmanager
def naming(where: str) -> Iterator[None]:
    """A context in which a ``ValueError`` gets ``where`` (its run-config keys) after its message.

    Parameters
    ----------
    where : str
        What to append, such as ``"(run-config key 'head')"``.

    Yields
    ------
    None
    """
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"{exc} {where}") from None


def declare(default: Any, help: str | None = None, **declaration: Any) -> Any:
    """A group's dataclass field that declares a setting.

    Parameters
    ----------
    default : bool, int, float, str or None
        The field's default.
    help : str, optional
        One plain-text sentence (:attr:`Setting.help`).  By default the
        setting's description in its group's numpydoc ``Parameters``
        section, as for an :func:`owned` setting: its first sentence is the
        help, the rest the details.
    **declaration
        ``details``, ``words``, ``options``, ``low``, ``high``, ``low_open``,
        ``high_open``, ``nonzero``, ``form`` or ``decode``: as
        :class:`Setting`'s attributes of the same names.

    Returns
    -------
    dataclasses.Field
        A field whose metadata holds the declaration.
    """
    if help is not None:
        declaration["help"] = help
    return field(default=default, metadata={_SETTING: declaration})


def owned(owner: type, parameter: str, *, default: Any = _UNSET) -> Any:
    """A group's dataclass field for a setting that is a parameter of a library class.

    Everything but the name is the owner's, so the setting cannot drift from
    the parameter it configures: the default (unless the deployment's
    differs, given as ``default``) from its signature, the options and the
    bounds from its ``_parameter_constraints``
    (:class:`~skslot._param_validation.Interval`,
    :class:`~skslot._param_validation.Options`), and the documentation from
    the parameter's description in its numpydoc ``Parameters`` section: the
    first sentence, as plain text, is the help, the rest the details.

    Parameters
    ----------
    owner : type
        The class whose parameter this is (``OneShotProtocol``).
    parameter : str
        The parameter's name there.
    default : object, optional
        The deployment's default, where it is not the owner's.

    Returns
    -------
    dataclasses.Field

    Raises
    ------
    TypeError
        Where the owner has no such parameter, or its docstring does not
        describe it.
    """
    signature = inspect.signature(owner)
    if parameter not in signature.parameters:
        raise TypeError(f"{owner.__name__} has no parameter {parameter!r}")
    default = signature.parameters[parameter].default if default is _UNSET else default
    help, details = _described(_parameter_doc(owner, parameter))
    declared: dict[str, Any] = {
        "help": help,
        "details": f"{details} See :class:`~{_path(owner)}`'s ``{parameter}``.".lstrip(),
        "owner": f"{_path(owner)}.{parameter}",
    }
    for constraint in getattr(owner, "_parameter_constraints", {}).get(parameter, []):
        if isinstance(constraint, Options) and all(isinstance(o, str) for o in constraint.options):
            declared["options"] = tuple(constraint.options)  # (a number's are not the run's)
        elif isinstance(constraint, Interval):
            declared |= {
                "low": constraint.left,
                "high": constraint.right,
                "low_open": constraint.closed in ("right", "neither"),
                "high_open": constraint.closed in ("left", "neither"),
            }
    return field(default=default, metadata={_SETTING: declared})


def _parameter_doc(owner: type, parameter: str) -> str:
    """The description of one parameter in a class's numpydoc ``Parameters`` section.

    A small reader of numpydoc, so that the library needs no docs extra at
    run time: an entry is an unindented ``name : type`` line (``a, b : type``
    describes both), its description the indented lines below it; the
    section ends at the next section's title.

    Parameters
    ----------
    owner : type
        The class (its docstring, :func:`inspect.getdoc`).
    parameter : str
        The parameter's name.

    Returns
    -------
    description : str
        The description, its lines joined, single-spaced (reStructuredText).

    Raises
    ------
    TypeError
        Where the docstring does not describe ``parameter`` (under ``python
        -OO``, which strips docstrings, the description is the parameter's
        name).
    """
    lines = (inspect.getdoc(owner) or "").splitlines()
    body = lines[lines.index("Parameters") + 2 :] if "Parameters" in lines else []
    if not body and sys.flags.optimize >= 2:  # python -OO strips docstrings
        return parameter.replace("_", " ")
    entries: dict[str, list[str]] = {}
    described: list[str] = []
    for line, below in itertools.pairwise([*body, ""]):
        if below.startswith("---"):
            break
        if line[:1].isspace():
            described.append(line.strip())
        elif line:
            described = []
            for name in line.partition(" : ")[0].split(","):
                entries[name.strip()] = described
    if not entries.get(parameter):
        raise TypeError(f"{owner.__name__}'s docstring does not describe {parameter!r}")
    return " ".join(" ".join(entries[parameter]).split())


def _described(description: str) -> tuple[str, str]:
    """A numpydoc description as a setting's help (its first sentence, as plain text) and
    details (the rest)."""
    help, *details = re.split(r"(?<=\.)\s+(?=[A-Z`])", description, maxsplit=1)
    return _plain(help.removesuffix(".")), "".join(details)


def _plain(text: str) -> str:
    """reStructuredText as plain text: a role as its target, a literal as its text (``None``,
    ``True`` and ``False`` as a run config writes them)."""
    text = re.sub(r":\w+:`~[\w.]*?(\w+)`", r"\1", text)  # :class:`~a.B` -> B
    text = re.sub(r":\w+:`([^`]+)`", r"\1", text)
    words = {"None": "none", "True": "true", "False": "false"}
    return re.sub(
        r"``(.+?)``", lambda literal: words.get(literal[1], literal[1].replace('"', "'")), text
    )


def _path(owner: type) -> str:
    """The owner's public path: its package's, where the package exports it."""
    package = owner.__module__.split(".")
    for end in range(1, len(package) + 1):
        module = sys.modules.get(".".join(package[:end]))
        if module is not None and getattr(module, owner.__name__, None) is owner:
            return f"{module.__name__}.{owner.__name__}"
    return f"{owner.__module__}.{owner.__qualname__}"


_PartT = TypeVar("_PartT", bound="SettingsGroup")


def declared(cls: type[_PartT]) -> type[_PartT]:
    """Read a part's declarations into :class:`Setting` objects, and document them.

    The kind and whether ``None`` is allowed come from each field's type
    annotation (``float | None``; ``float | str`` with ``words``), the help
    and details of a setting declared without them from the part's numpydoc
    (its ``Parameters`` section names each such setting and describes it);
    the part's docstring then gets the Parameters section written from the
    settings.

    Parameters
    ----------
    cls : type
        A frozen dataclass deriving from :class:`SettingsGroup`, its fields
        made with :func:`declare`.

    Returns
    -------
    type
        ``cls``, with its settings read and its docstring written.
    """
    hints = typing.get_type_hints(cls)
    declared = []
    for f in fields(cls):
        kinds = set(typing.get_args(hints[f.name])) or {hints[f.name]}
        nullable = type(None) in kinds
        kinds.discard(type(None))
        if len(kinds) == 2 and str in kinds and f.metadata[_SETTING].get("words"):
            kinds.discard(str)  # a number that also takes words (``float | str``) is a number
        (kind,) = kinds
        declaration = dict(f.metadata[_SETTING])
        if "help" not in declaration:
            declaration["help"], declaration["details"] = _described(_parameter_doc(cls, f.name))
        declared.append(Setting(f.name, kind, f.default, nullable=nullable, **declaration))
    cls._settings = tuple(declared)
    for s in cls._settings:
        s.check(s.default)  # a declaration whose default it refuses is a bug here
    cls.__doc__ = parameters_section(cls)
    return cls


def parameters_section(cls: type[SettingsGroup]) -> str:
    summary = inspect.cleandoc(cls.__doc__ or "").partition("\nParameters\n---")[0].rstrip()
    lines = [summary, "", "Parameters", "----------"]
    for s in cls._settings:
        default = json.dumps(s.default) if isinstance(s.default, str) else repr(s.default)
        lines.append(f"{s.name} : {s.doc_type}, default={default}")
        text = " ".join(f"{s.help}. {s.details} Run config: ``{s.key}``, {s.allowed}.".split())
        text = textwrap.fill(text, 75, break_long_words=False, break_on_hyphens=False)
        lines.append(textwrap.indent(text, "    "))
    return "\n".join(lines) + "\n"


class SettingsGroup:
    """What every part shares: checks of its settings, from their declarations, and
    finding one (as :class:`~skslot.flower.DeploymentConfig` finds one of every part's)."""

    _settings: ClassVar[tuple[Setting, ...]] = ()
    #: Each part is a dataclass (its fields are its settings).
    __dataclass_fields__: ClassVar[dict[str, Any]]

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
        """The declaration of one of the settings, by its name or its run-config key.

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
            For a name that is none of the settings.
        """
        for s in cls.settings():
            if name in (s.name, s.key):
                return s
        raise KeyError(f"{cls.__name__} has no setting {name!r}")
