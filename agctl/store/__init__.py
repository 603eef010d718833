"""The store: what users import (`from agctl.store import Store`, also `from agctl import
Store`), the unit of work it opens and hands down, and the rules under it (sessions, slots,
drafts, checkpoints). The facade is agctl.store.facade; its names are imported from here
when first used, so a rule's module (agctl.store.slots) loads no facade.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agctl.store.facade import (
        DEFAULT_SLOT,
        Destroyed,
        Replaced,
        SessionInfo,
        Store,
        default_data_dir,
        lock_timeout,
    )

__all__ = [
    "DEFAULT_SLOT",
    "Destroyed",
    "Replaced",
    "SessionInfo",
    "Store",
    "default_data_dir",
    "lock_timeout",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'agctl.store' has no attribute {name!r}")
    from agctl.store import facade

    return getattr(facade, name)
