"""Conversations in and out of agctl (OpenAI arrays, JSON lines, Markdown, exports) and
across stores."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """What agctl.interchange held before it became this package (issue 26): its names,
    from agctl.interchange.formats, with a DeprecationWarning."""
    import importlib
    import warnings

    formats = importlib.import_module("agctl.interchange.formats")

    if name.startswith("__") or not hasattr(formats, name):
        raise AttributeError(f"module 'agctl.interchange' has no attribute {name!r}")
    warnings.warn(
        f"agctl.interchange.{name} is now agctl.interchange.formats.{name}: import it from there",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(formats, name)
