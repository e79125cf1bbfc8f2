"""The Flower App directory that runs skslot's apps under a deployment's settings."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .config import DeploymentConfig

__all__ = ["write_flower_app"]


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
    # a run config's values (bool, int, finite float, str) read the same in JSON and TOML
    settings = "\n".join(
        f"{key} = {json.dumps(value, ensure_ascii=False)}"
        for key, value in config.to_run_config().items()
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
