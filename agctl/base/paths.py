"""Where agctl's own places are on this machine: the data dir, the config file, the caches.

Standard library only (platformdirs is imported when a default is needed): the store's
factory and TAB completion find them without loading the core.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_data_dir() -> Path:
    """AGCTL_DATA_DIR, else the platform's user data dir for agctl."""
    env = os.environ.get("AGCTL_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("agctl"))


def default_config_path() -> Path:
    """AGCTL_CONFIG, else config.json in the platform's user config dir for agctl."""
    env = os.environ.get("AGCTL_CONFIG")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_config_dir("agctl")) / "config.json"


def templates_dir() -> Path:
    """`templates/` beside the config file: one YAML file a template (agctl.config.templates;
    TAB completion lists it without loading that)."""
    return default_config_path().parent / "templates"
