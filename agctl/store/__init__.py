"""The store: what users import (`from agctl.store import Store`, also `from agctl import
Store`), the unit of work it opens and hands down, and the rules under it (sessions, slots,
drafts, checkpoints). The facade is agctl.store.facade; its names are imported from here
when first used, so a rule's module (agctl.store.slots) loads no facade.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Each name is imported from its module when first used.
_LAZY = {
    "Store": "agctl.store.facade",
    "DEFAULT_SLOT": "agctl.store.slots",
    "Destroyed": "agctl.store.sessions",
    "Replaced": "agctl.store.sessions",
    "SessionInfo": "agctl.store.sessions",
    "default_data_dir": "agctl.base.paths",
    "lock_timeout": "agctl.storage.base",
}

if TYPE_CHECKING:
    from agctl.base.paths import default_data_dir
    from agctl.storage.base import lock_timeout
    from agctl.store.facade import Store
    from agctl.store.sessions import Destroyed, Replaced, SessionInfo
    from agctl.store.slots import DEFAULT_SLOT

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
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agctl.store' has no attribute {name!r}")
    # __import__, not importlib.import_module: the interpreter's own import, which
    # `python -X importtime` reports (and which runs no Python-level import machinery).
    return getattr(__import__(module, fromlist=[name]), name)
