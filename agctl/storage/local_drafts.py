"""Drafts kept on this machine when a shared store cannot take them (its server down).

A turn that fails because its store does not answer would lose its prompt and the tool
results it got: they are kept here instead, a file a slot in the data dir
(`stores/<store>/drafts/<session>/<slot>.json`: directories 0700, files 0600, never
through a link), where agctl.store.drafts finds them beside the store's own. `--resume-draft`
sends the newer of the two, and the turn that commits it removes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from agctl.base.errors import CorruptDocument, DamagedDraft, NotFound, StoreError
from agctl.base.fsio import make_dirs, read_bytes, remove_file, write_atomic
from agctl.base.ids import validate_id
from agctl.context.models import Draft
from agctl.storage.file import layout
from agctl.storage.file.documents import invalid_document


class LocalDrafts:
    """The drafts of one shared store's sessions kept in a data dir; `folder(session_id)`
    is where a session's are."""

    def __init__(self, folder: Callable[[str], Path]) -> None:
        self._folder = folder

    @classmethod
    def in_data_dir(cls, data_dir: Path, store_key: str) -> LocalDrafts:
        """The drafts of the store named `store_key` (see listing.store_key) in `data_dir`."""
        return cls(lambda session_id: layout.store_drafts(data_dir, store_key, session_id))

    def path(self, session_id: str, slot_id: str) -> Path:
        folder = self._folder(validate_id(session_id, "session"))
        return layout.store_draft(folder, validate_id(slot_id, "slot"))

    def put(self, session_id: str, draft: Draft) -> Path:
        """Keep `draft` (replacing the slot's), durably; where it is."""
        path = self.path(session_id, draft.slot)
        make_dirs(path.parent)
        write_atomic(path, draft.model_dump_json().encode())
        return path

    def get(self, session_id: str, slot_id: str) -> Draft | None:
        """The slot's draft kept here (None: none); DamagedDraft when it does not read."""
        path = self.path(session_id, slot_id)
        try:
            return Draft.model_validate_json(read_bytes(path, "draft"))
        except NotFound:
            return None
        except ValidationError as exc:
            raise DamagedDraft(path, invalid_document(exc), slot_id) from None
        except CorruptDocument as exc:
            raise DamagedDraft(exc.path, exc.reason, slot_id) from None

    def slots(self, session_id: str) -> list[str]:
        folder = self._folder(validate_id(session_id, "session"))
        try:
            return layout.document_ids(os.listdir(folder))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"cannot list the drafts kept in {folder}: {exc}") from exc

    def drop(self, session_id: str, slot_id: str) -> bool:
        """Remove the slot's draft kept here; whether there was one."""
        path = self.path(session_id, slot_id)
        if not path.exists() and not path.is_symlink():
            return False
        remove_file(path)
        return True
