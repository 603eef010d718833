"""`agctl doctor`: what a data dir holds that agctl did not put there, or left behind (the
file backend's checks, agctl.storage.file.doctor), with each checkpoint log verified."""

from __future__ import annotations

from agctl.errors import StoreError
from agctl.storage.file.doctor import Finding
from agctl.store import Store

__all__ = ["Finding", "diagnose"]


def diagnose(store: Store, *, fix: bool = False) -> list[Finding]:
    """Every finding in the store's data dir (repaired where safe, with `fix`); for a
    store kept elsewhere (PostgreSQL), in this machine's data dir, which it uses too."""
    from agctl.checkpointer import Checkpointer
    from agctl.storage.file import doctor

    if store.files is None:
        if store.local_dir is None:
            raise StoreError(f"agctl doctor checks a data dir; this store ({store.shown}) has none")
        store = Store(store.local_dir)
    assert store.files is not None
    return doctor.diagnose(store.files, Checkpointer(store).verify, fix=fix)
