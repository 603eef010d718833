"""`agctl doctor`: what a data dir holds that agctl did not put there, or left behind (the
file backend's checks, agctl.storage.file.checks), with each checkpoint log verified."""

from __future__ import annotations

from agctl.base.errors import StoreError
from agctl.storage.file.checks import Finding
from agctl.store import Store

__all__ = ["Finding", "diagnose"]


def diagnose(store: Store, *, fix: bool = False) -> list[Finding]:
    """Every finding in the store's data dir (repaired where safe, with `fix`); for a
    store kept elsewhere (PostgreSQL), in this machine's data dir, which it uses too."""
    from agctl.storage.file import checks
    from agctl.store.checkpointer import Checkpointer

    if store.files is None:
        if store.local_dir is None:
            raise StoreError(f"agctl doctor checks a data dir; this store ({store.shown}) has none")
        store = Store(store.local_dir)
    assert store.files is not None
    return checks.diagnose(store.files, Checkpointer(store).verify, fix=fix)
