"""The config file (profiles, tools, hooks, store settings) and settings typed on a
command line."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """What agctl.config held before it became this package (issue 26): its names, from
    agctl.config.file, with a DeprecationWarning (ConfigStore is ConfigFile now)."""
    import importlib
    import warnings

    file = importlib.import_module("agctl.config.file")

    new = "ConfigFile" if name == "ConfigStore" else name
    if name.startswith("__") or not hasattr(file, new):
        raise AttributeError(f"module 'agctl.config' has no attribute {name!r}")
    warnings.warn(
        f"agctl.config.{name} is now agctl.config.file.{new}: import it from there",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(file, new)
