"""agctl: the context of LLM conversations as data.

The public library API is imported lazily so that `agctl --help` stays on the
click-only start-up path; `from agctl import Store` works as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The modules' names from before they were grouped into packages keep importing.
from agctl.base import moved

moved.install()

_LAZY = {
    "Store": "agctl.store",
    "Message": "agctl.context.models",
    "Slot": "agctl.context.models",
    "SlotConfig": "agctl.context.models",
    "FocusedConfig": "agctl.context.models",
    "ContextBudget": "agctl.context.models",
    "Session": "agctl.context.models",
    "slot_view": "agctl.context.view",
    "request_view": "agctl.context.view",
    "estimate_tokens": "agctl.context.tokens",
}

if TYPE_CHECKING:
    from agctl.context.models import (
        ContextBudget,
        FocusedConfig,
        Message,
        Session,
        Slot,
        SlotConfig,
    )
    from agctl.context.tokens import estimate_tokens
    from agctl.context.view import request_view, slot_view
    from agctl.store import Store


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agctl' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "ContextBudget",
    "FocusedConfig",
    "Message",
    "Session",
    "Slot",
    "SlotConfig",
    "Store",
    "__version__",
    "estimate_tokens",
    "request_view",
    "slot_view",
]
