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

from .config import (
    DataSettings,
    DefenceSettings,
    DeploymentConfig,
    PrivacySettings,
    ProtocolSettings,
    RunSettings,
    write_flower_app,
)

_NEED_FLOWER = {
    "ClientData": "client_app",
    "load_client_data": "client_app",
    "ProtocolError": "messages",
    "DeploymentError": "server_app",
    "DeploymentReport": "server_app",
    "FlowerTransport": "transport",
    "run_one_shot": "server_app",
}

__all__ = [
    "DataSettings",
    "DefenceSettings",
    "DeploymentConfig",
    "PrivacySettings",
    "ProtocolSettings",
    "RunSettings",
    "write_flower_app",
    *sorted(_NEED_FLOWER),
]


def __getattr__(name: str) -> Any:
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
