"""The API reference (docs/api.rst) lists every public name of every public module, and
every public function, class and method has its numpydoc sections."""

import ast
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import pkgutil
import re
import textwrap
import warnings
from pathlib import Path

import pytest

API = Path(__file__).resolve().parents[1] / "docs" / "api.rst"
MODULES = [
    "skslot",
    "skslot.barycenter",
    "skslot.baselines",
    "skslot_bench",
    "skslot.datasets",
    "skslot.defaults",
    "skslot.defence",
    "skslot.defence.consistency",
    "skslot.defence.screening",
    "skslot.exceptions",
    "skslot.flower",
    "skslot.gaussian",
    "skslot.heads",
    "skslot.label_mix",
    "skslot.label_shift",
    "skslot.maps",
    "skslot.privacy",
    "skslot.privacy.client",
    "skslot.privacy.server",
    "skslot.protocol",
    "skslot.selection",
    "skslot.summary",
    "skslot.tau_search",
    "skslot.transformer",
    "skslot.wire",
]


def documented_names() -> set[str]:
    """``module.name`` for every autosummary entry, resolved against its currentmodule."""
    names, current = set(), None
    for line in API.read_text().splitlines():
        if match := re.match(r"\.\. currentmodule:: ([\w.]+)", line):
            current = match.group(1)
        elif (match := re.match(r"^ {3}([\w.]+)$", line)) and current:
            names.add(f"{current}.{match.group(1)}")
    return names


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_is_in_the_api_reference(module):
    documented = documented_names()
    public = importlib.import_module(module).__all__
    # documented under this module, or under the module that re-exports it
    missing = [
        name
        for name in public
        if f"{module}.{name}" not in documented
        and not any(entry.endswith(f".{name}") for entry in documented)
    ]
    assert not missing, f"{module}: {missing} are missing from docs/api.rst"


@pytest.mark.parametrize(
    "name",
    [
        "skslot.BuresBarycenter",
        "skslot.ClientStandardScaler",
        "skslot.FederatedTauSearch",
        "skslot.GaussianSummaryEstimator",
        "skslot.SLOTTransformer",
        "skslot.heads.FedCGSClassifier",
        "skslot.heads.FedPFTClassifier",
        "skslot.heads.OneShotFedAvgClassifier",
    ],
)
def test_html_repr_links_to_the_estimators_api_page(name):
    """The "?" of the HTML repr opens the estimator's page of the docs site's API reference."""
    from skslot._doc_link import DOCS_URL
    from skslot.heads import FedCGSClassifier

    module, _, cls_name = name.rpartition(".")
    cls = getattr(importlib.import_module(module), cls_name)
    estimator = cls(FedCGSClassifier()) if cls_name == "FederatedTauSearch" else cls()
    assert name in documented_names()
    assert estimator._get_doc_link() == f"{DOCS_URL}generated/{name}.html"
    assert f'href="{DOCS_URL}generated/{name}.html"' in estimator._repr_html_()


# -- numpydoc sections of the public API -------------------------------------------

#: Method wrappers whose function (``__func__``) holds the docstring and signature.
_ACCESSORS = (staticmethod, classmethod)


def _is_public(dotted: str) -> bool:
    return not any(part.startswith("_") for part in dotted.split("."))


def public_modules() -> list:
    """Every public module and package of skslot (the Flower ones only with flwr)."""
    import skslot

    with_flower = importlib.util.find_spec("flwr") is not None
    names = ["skslot"] + [
        info.name
        for info in pkgutil.walk_packages(skslot.__path__, "skslot.", onerror=lambda name: None)
        if _is_public(info.name) and (with_flower or not info.name.startswith("skslot.flower"))
    ]
    return [importlib.import_module(name) for name in names]


def _in_skslot(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "skslot"


def _is_protocol_stub(cls) -> bool:
    return bool(getattr(cls, "_is_protocol", False))


def _listed(section) -> set[str]:
    """The names a Parameters (or Attributes) section lists: ``a, b : type`` lists two."""
    return {
        name.strip().lstrip("*")
        for entry in section
        for name in entry.name.split(",")
        if name.strip()
    }


def _named_parameters(func, *, bound: bool) -> list[str]:
    """The parameters a caller names: no ``self``/``cls``, no ``*args``/``**kwargs``."""
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    params = list(inspect.signature(func).parameters.values())
    if bound and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return [p.name for p in params if p.kind not in variadic]


def _returns_something(func) -> bool:
    """Whether ``func`` returns a value: its annotation, else a ``return x``/``yield`` in it."""
    annotation = inspect.signature(func).return_annotation
    if annotation is not inspect.Signature.empty:
        return annotation not in (None, type(None), "None", "NoReturn", "Never", "typing.NoReturn")
    source = textwrap.dedent(inspect.getsource(func))
    tree = ast.parse(source).body[0]
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)

    def walk(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, nested):
                continue
            if isinstance(child, (ast.Yield, ast.YieldFrom)):
                return True
            if isinstance(child, ast.Return) and child.value is not None:
                if not (isinstance(child.value, ast.Constant) and child.value.value is None):
                    return True
            if walk(child):
                return True
        return False

    return walk(tree)


def _parse(obj, where: str, problems: list[str], *, is_class: bool = False):
    """The numpydoc view of ``obj``'s docstring, or ``None`` (with the problem noted)."""
    from numpydoc.docscrape import ClassDoc, FunctionDoc

    if not (inspect.getdoc(obj) or "").strip():
        problems.append(f"{where}: no docstring")
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if is_class:
                return ClassDoc(obj, config={"show_class_members": False})
            return FunctionDoc(obj, config={})
        except Exception as exc:  # numpydoc raises ValueError on a malformed section
            problems.append(f"{where}: docstring does not parse ({exc})")
            return None


def _check_function(func, where: str, problems: list[str], *, bound: bool) -> None:
    doc = _parse(func, where, problems)
    if doc is None:
        return
    named = _named_parameters(func, bound=bound)
    if named:
        if not doc["Parameters"]:
            problems.append(f"{where}: no Parameters section")
        else:
            missing = [name for name in named if name not in _listed(doc["Parameters"])]
            if missing:
                problems.append(f"{where}: Parameters does not list {', '.join(missing)}")
    if _returns_something(func) and not (doc["Returns"] or doc["Yields"]):
        problems.append(f"{where}: no Returns section")


def _check_class(cls, where: str, problems: list[str], checked: set[str]) -> None:
    doc = _parse(cls, where, problems, is_class=True)
    if doc is not None:
        init = cls.__dict__.get("__init__")
        fields = None
        if dataclasses.is_dataclass(cls) and "__dataclass_fields__" in cls.__dict__:
            fields = [f.name for f in dataclasses.fields(cls) if f.init]
        elif issubclass(cls, tuple) and "_fields" in cls.__dict__:  # a NamedTuple
            fields = list(cls._fields)
        if fields is not None:
            listed = _listed(doc["Parameters"]) | _listed(doc["Attributes"])
            missing = [name for name in fields if name not in listed]
            if missing:
                problems.append(
                    f"{where}: Parameters/Attributes does not list {', '.join(missing)}"
                )
        elif inspect.isfunction(init):
            named = _named_parameters(init, bound=True)
            missing = [name for name in named if name not in _listed(doc["Parameters"])]
            if named and not doc["Parameters"]:
                problems.append(f"{where}: no Parameters section (for __init__)")
            elif missing:
                problems.append(f"{where}: Parameters does not list {', '.join(missing)}")
    # the class's own members and those of its skslot bases, not sklearn's or object's;
    # a member is reported once, under the class that defines it
    seen: set[str] = set()
    for owner in cls.__mro__:
        if not _in_skslot(owner) or _is_protocol_stub(owner):
            continue
        for name, attr in vars(owner).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            member = f"{owner.__module__}.{owner.__qualname__}.{name}"
            if member in checked:
                continue
            checked.add(member)
            if isinstance(attr, (property, functools.cached_property)):
                getter = attr.fget if isinstance(attr, property) else attr.func
                if not (inspect.getdoc(getter) or "").strip():
                    problems.append(f"{member}: no docstring (property)")
                continue
            func = attr.__func__ if isinstance(attr, _ACCESSORS) else attr
            if inspect.isfunction(func) and _in_skslot(func):
                bound = not isinstance(attr, staticmethod)
                _check_function(func, member, problems, bound=bound)


def numpydoc_problems() -> list[str]:
    """``module.name: what is missing`` for every public function, class and method."""
    problems: list[str] = []
    checked: set[str] = set()
    for module in public_modules():
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or not _in_skslot(obj):
                continue
            where = f"{obj.__module__}.{obj.__qualname__}"
            if where in checked:
                continue
            checked.add(where)
            if inspect.isclass(obj):
                if not _is_protocol_stub(obj):
                    _check_class(obj, where, problems, checked)
            else:
                _check_function(obj, where, problems, bound=False)
    return sorted(problems)


def test_public_api_has_numpydoc_sections():
    """Every public function, class and method has a docstring with its numpydoc sections.

    A signature with parameters needs a ``Parameters`` section listing each of them (a
    class's ``__init__`` ones in the class docstring, a dataclass's or a named tuple's
    fields under ``Parameters`` or ``Attributes``); one that returns a value needs ``Returns`` (or
    ``Yields``); a property needs a one-line docstring.
    """
    pytest.importorskip("numpydoc")
    problems = numpydoc_problems()
    assert not problems, f"{len(problems)} docstring gaps:\n" + "\n".join(problems)


def test_dir_of_the_package_is_its_public_api():
    import skslot

    names = [name for name in dir(skslot) if not name.startswith("__")]
    assert names == sorted(skslot.__all__)  # no TYPE_CHECKING, importlib, annotations
    assert all(hasattr(skslot, name) for name in dir(skslot))
    assert "__version__" in dir(skslot)
