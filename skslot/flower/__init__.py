"""SLOT-Align on Flower: the one-shot protocol between separate parties.

Install with ``pip install "skslot[flower]"``.  The apps are
``skslot.flower.server_app:app`` and ``skslot.flower.client_app:app``;
:func:`write_flower_app` writes a Flower App directory that runs them (see
``docs/deployment.md``).  Every computation is the library's own: summaries,
barycenter, maps and heads are the estimators a scikit-learn Pipeline uses;
this package only moves their wire formats through Flower messages and checks
what it receives.

:class:`DeploymentConfig` and :func:`write_flower_app` work without Flower
installed, the others import it.  Every name is imported on first use
(PEP 562), so that Flower's own commands, which import this
package to find the Apps, do not pay for the whole library.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .app_files import write_flower_app
    from .client_app import ClientData, load_client_data
    from .config import DeploymentConfig
    from .groups import (
        AlignmentSettings,
        DataSettings,
        DefenceSettings,
        PrivacySettings,
        ProtocolSettings,
        RunSettings,
    )
    from .server_app import run_one_shot
    from .settings import Setting
    from .transport import FlowerTransport

#: Each public name -> its module (those of client_app, server_app and transport import Flower).
_MODULES = {
    "AlignmentSettings": "groups",
    "ClientData": "client_app",
    "DataSettings": "groups",
    "DefenceSettings": "groups",
    "DeploymentConfig": "config",
    "FlowerTransport": "transport",
    "PrivacySettings": "groups",
    "ProtocolSettings": "groups",
    "RunSettings": "groups",
    "Setting": "settings",
    "load_client_data": "client_app",
    "run_one_shot": "server_app",
    "write_flower_app": "app_files",
}

__all__ = [
    "AlignmentSettings",
    "ClientData",
    "DataSettings",
    "DefenceSettings",
    "DeploymentConfig",
    "FlowerTransport",
    "PrivacySettings",
    "ProtocolSettings",
    "RunSettings",
    "Setting",
    "load_client_data",
    "run_one_shot",
    "write_flower_app",
]


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = import_module(f"{__name__}.{_MODULES[name]}")
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "flwr":
            raise
        raise ImportError(
            f"skslot.flower.{name} needs Flower: pip install 'skslot[flower]'"
        ) from exc
    value = getattr(module, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
