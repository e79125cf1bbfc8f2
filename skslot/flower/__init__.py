"""SLOT-Align on Flower: the one-shot protocol between separate parties.

Install with ``pip install "skslot[flower]"``.  The apps are
``skslot.flower.server_app:app`` and ``skslot.flower.client_app:app``;
:func:`write_flower_app` writes a Flower App directory that runs them (see
``docs/deployment.md``).  Every computation is the library's own: summaries,
barycenter, maps and heads are the estimators a scikit-learn Pipeline uses;
this package only moves their wire formats through Flower messages and checks
what it receives.

:class:`DeploymentConfig` and :func:`write_flower_app` work without Flower
installed; the other names import it on first use.
"""

from importlib import import_module
from typing import Any

from .._deprecation import moved_names
from .config import (
    AlignmentSettings,
    DataSettings,
    DefenceSettings,
    DeploymentConfig,
    PrivacySettings,
    ProtocolSettings,
    RunSettings,
    Setting,
    write_flower_app,
)

_NEED_FLOWER = {
    "ClientData": "client_app",
    "load_client_data": "client_app",
    "FlowerTransport": "transport",
    "run_one_shot": "server_app",
}

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
    *sorted(_NEED_FLOWER),
]


#: Deprecated names, and the one import path of what they name.
_MOVED = {
    "DeploymentError": ("skslot.protocol", "ProtocolRunError"),
    "DeploymentReport": ("skslot.protocol", "ProtocolReport"),
    "ProtocolError": ("skslot.wire", "MessageFormatError"),
}


_moved = moved_names(__name__, _MOVED)


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return _moved(name)
    if name not in _NEED_FLOWER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = import_module(f"{__name__}.{_NEED_FLOWER[name]}")
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "flwr":
            raise
        raise ImportError(
            f"skslot.flower.{name} needs Flower: pip install 'skslot[flower]'"
        ) from exc
    return getattr(module, name)
