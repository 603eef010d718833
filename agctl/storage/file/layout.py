"""The data dir's layout: the one place that knows its file and folder names.

    <root>/current-session                 the id `session use` chose
    <root>/sessions/<id>/session.json      the session document
    <root>/sessions/<id>/.lock             flock target of every read-modify-write
    <root>/sessions/<id>/slots/<slot>.json one document per slot
    <root>/sessions/<id>/slots/<slot>.log  turns appended to it since it was written whole
    <root>/sessions/<id>/drafts/<slot>.json the prompt of a failed turn, per slot
    <root>/sessions/<id>/draft.json        the single draft of older agctl (adopted)
    <root>/sessions/<id>/journal           the redo journal of its transactions
    <root>/sessions/<id>/turn.json         journal of a turn, of agctl before the redo journal
    <root>/sessions/<id>/checkpoints/      log, index.jsonl, heads.json, removed.json,
                                           restoring.json (a rollback's, of older agctl)
    <root>/sessions/.new-<id>-<hex>        a session being built (staging)
    <root>/sessions/.trash-<id>-<hex>      a session being destroyed
    <root>/stores/<key>/current-session    a shared store's current-session pointer
    <root>/stores/<key>/drafts/<id>/<slot>.json  a draft that store could not take
    <root>/cache/                          this machine's caches, of no store (agctl.base.paths)

The file store and TAB completion (which reads the layout directly, for speed) both use
it, so it imports the standard library only. Ids are validated by the callers.
"""

from __future__ import annotations

from pathlib import Path

SESSIONS = "sessions"
STORES = "stores"
# Caches of this machine, whatever store holds the sessions: prices (agctl.context.price_sheets).
CACHE = "cache"
PRICE_SHEETS = "prices.json"
CHAT_HISTORY = "chat-history"
CURRENT = "current-session"
SESSION = "session.json"
LOCK = ".lock"
SLOTS = "slots"
DRAFTS = "drafts"
LEGACY_DRAFT = "draft.json"
JOURNAL = "journal"
TURN_JOURNAL = "turn.json"
CHECKPOINTS = "checkpoints"
LOG = "log"
INDEX = "index.jsonl"
HEADS = "heads.json"
REMOVED = "removed.json"
RESTORE_JOURNAL = f"{CHECKPOINTS}/restoring.json"
DOCUMENT = ".json"
SLOT_LOG = ".log"
STAGING = ".new-"
TRASH = ".trash-"
# The directories a session dir holds.
SESSION_SUBDIRS = (SLOTS, CHECKPOINTS, DRAFTS)
# The journals of an unfinished operation that older agctl wrote, relative to the session dir.
LEGACY_JOURNALS = (TURN_JOURNAL, RESTORE_JOURNAL)


def sessions_dir(root: Path) -> Path:
    return root / SESSIONS


def current_pointer(root: Path) -> Path:
    return root / CURRENT


def store_pointer(root: Path, store_key: str) -> Path:
    """The current-session pointer of a shared store (one per store), kept on this
    machine in its data dir."""
    return root / STORES / store_key / CURRENT


def store_drafts(root: Path, store_key: str, session_id: str) -> Path:
    """Where this machine keeps the drafts of a shared store's session that the store
    could not take (its server down): one `<slot>.json` each."""
    return root / STORES / store_key / DRAFTS / session_id


def price_sheets(root: Path) -> Path:
    """The cache of genai-prices' prices of the models priced on this machine
    (agctl.context.price_sheets), in the data dir whatever store holds the sessions."""
    return root / CACHE / PRICE_SHEETS


def chat_history(root: Path, session_id: str) -> Path:
    """The lines `agctl chat` was typed on a session (its Up and Down), kept on this
    machine in its data dir whatever store holds the session."""
    return root / CHAT_HISTORY / f"{session_id}.history"


def store_draft(folder: Path, slot_id: str) -> Path:
    """A slot's draft in a `store_drafts` folder."""
    return folder / f"{slot_id}{DOCUMENT}"


def session_dir(root: Path, session_id: str) -> Path:
    return sessions_dir(root) / session_id


def staging_dir(root: Path, session_id: str, token: str) -> Path:
    return sessions_dir(root) / f"{STAGING}{session_id}-{token}"


def trash_dir(root: Path, session_id: str, token: str) -> Path:
    return sessions_dir(root) / f"{TRASH}{session_id}-{token}"


def is_leftover(name: str) -> bool:
    """A staging or trash dir's name (never a session's: ids do not start with a dot)."""
    return name.startswith((STAGING, TRASH))


# ---- under a session dir (a live one, or a staging one being built) --------------------


def session_document(directory: Path) -> Path:
    return directory / SESSION


def lock_file(directory: Path) -> Path:
    return directory / LOCK


def slots_dir(directory: Path) -> Path:
    return directory / SLOTS


def slot_document(directory: Path, slot_id: str) -> Path:
    return slots_dir(directory) / f"{slot_id}{DOCUMENT}"


def slot_log(document: Path) -> Path:
    """The append-only log beside a slot document."""
    return document.with_name(document.name[: -len(DOCUMENT)] + SLOT_LOG)


def drafts_dir(directory: Path) -> Path:
    return directory / DRAFTS


def draft_document(directory: Path, slot_id: str) -> Path:
    return drafts_dir(directory) / f"{slot_id}{DOCUMENT}"


def legacy_draft(directory: Path) -> Path:
    return directory / LEGACY_DRAFT


def journal(directory: Path, name: str) -> Path:
    """JOURNAL, or one of LEGACY_JOURNALS."""
    return directory / name


def checkpoints_dir(directory: Path) -> Path:
    return directory / CHECKPOINTS


def checkpoint_log(directory: Path) -> Path:
    return checkpoints_dir(directory) / LOG


def checkpoint_index(directory: Path) -> Path:
    return checkpoints_dir(directory) / INDEX


def checkpoint_heads(directory: Path) -> Path:
    return checkpoints_dir(directory) / HEADS


def removed_checkpoints(directory: Path) -> Path:
    return checkpoints_dir(directory) / REMOVED


def document_ids(names: list[str]) -> list[str]:
    """The ids of the documents among a folder's file names (slots, drafts), sorted;
    temp files and other dot files are not documents."""
    return sorted(
        name[: -len(DOCUMENT)]
        for name in names
        if name.endswith(DOCUMENT) and not name.startswith(".")
    )
