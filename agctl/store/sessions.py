"""The session rules: creating, replacing and destroying sessions (parents, children,
orphans and loops of parent links), the session document, its memory and settings; and
work on many sessions at once (the forest, removing several). The current-session pointer
is the backend's.

A rule that changes one session takes the unit of work the Store opened (agctl.store.work); a
rule over the whole store (listing, creating, replacing, destroying) takes the storage
backend. None reaches back up to the Store: its methods of the same names call down here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from pydantic import ValidationError

from agctl.base.errors import (
    AgctlError,
    AlreadyExists,
    DataError,
    HasChildren,
    InvalidInput,
    NotFound,
    StoreError,
    UsageError,
)
from agctl.base.ids import new_session_id, resolve_prefix, validate_id
from agctl.base.validation import validation_summary
from agctl.base.vocab import SESSION_SETTINGS
from agctl.config.settings import session_setting_from_text
from agctl.context.models import Session, Slot, SlotConfig
from agctl.store.slots import DEFAULT_SLOT, new_slot, update_session
from agctl.store.work import snapshot, work_on

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Unpack

    from agctl.base.vocab import SlotMode
    from agctl.storage.base import Backend, Reader
    from agctl.store.work import Work

log = logging.getLogger("agctl.store")

T = TypeVar("T")


def _in_cycles(parents: Mapping[str, str | None]) -> set[str]:
    """The sessions that lie on a loop of parent links (possible only in data written
    by hand or imported before imports checked): each walk over parents stops there."""
    looped: set[str] = set()
    done: set[str] = set()
    for start in parents:
        path: list[str] = []
        on_path: set[str] = set()
        node: str | None = start
        while node is not None and node in parents and node not in done:
            if node in on_path:
                looped.update(path[path.index(node) :])
                break
            path.append(node)
            on_path.add(node)
            node = parents[node]
        done.update(path)
    return looped


class NewSession(TypedDict, total=False):
    """The settings a new session may be given (create_session, replace_session)."""

    system_prompt: str | None
    parent_id: str | None
    title: str | None
    profile: str | None
    model: str | None


@dataclass
class SessionInfo:
    """A session as listed: the document plus what only the whole store knows."""

    session: Session
    children: list[str] = field(default_factory=list)
    orphan: bool = False
    # Its parent chain loops back (data written by hand, or imported before imports
    # checked): shown as a root, its parent link ignored by every walk.
    looped: bool = False


@dataclass
class Replaced:
    """What `replace_session` made, and what became of the old session's children."""

    session: Session
    replaced: bool
    destroyed: list[str] = field(default_factory=list)
    detached: list[str] = field(default_factory=list)


@dataclass
class Destroyed:
    """What `destroy_session` removed, and which children it left without a parent."""

    destroyed: list[str]
    orphaned: list[str]


# How many ids a new session may draw: 3 random characters a second, so two sessions made
# in the same second (parallel CI jobs) share one once in 32,768 pairs.
ID_DRAWS = 8


class History(TypedDict, total=False):
    """What a new session may bring beside its slots: the checkpoint log and the ids of
    its removed checkpoints (an import, a fork, a copy between stores)."""

    checkpoint_log: bytes
    removed: Sequence[str]


def materialize(
    backend: Backend,
    session: Session,
    slots: Sequence[Slot],
    drawn_id: bool = False,
    **history: Unpack[History],
) -> Session:
    """The session created on the backend whole, with `history`; when its id was drawn
    (`drawn_id`) and another process drew the same one meanwhile, drawn again, up to
    ID_DRAWS times. The session as written."""
    draws = ID_DRAWS if drawn_id else 1
    while True:
        try:
            backend.create_session(session, slots, **history)
            return session
        except AlreadyExists:
            draws -= 1
            if not draws:
                raise
            session = session.model_copy(update={"id": new_session_id()})


def replace_state(work: Work, session: Session, slots: Sequence[Slot]) -> None:
    """Make the session exactly `session` with exactly `slots`, in the work's transaction.
    Documents are written as given — no timestamps are touched."""
    keep = {slot.id for slot in slots}
    tx = work.changing()
    for slot in slots:
        tx.put_slot(slot)
    for slot_id in tx.slot_ids(session.id):
        if slot_id not in keep:
            tx.delete_slot(slot_id)
    tx.put_session(session)


def resolve_session(backend: Backend, prefix: str) -> str:
    """A session id, or the session a unique prefix names. A whole id is looked up on its
    own, never by listing every session (a shared store may hold thousands)."""
    if backend.has_session(validate_id(prefix, "session")):
        return prefix
    return resolve_prefix("session", prefix, backend.session_ids())


def list_sessions(backend: Backend, problems: list[AgctlError] | None = None) -> list[SessionInfo]:
    """Every session, oldest first, with its children and whether its parent is gone.

    A session that cannot be read raises, unless `problems` is given: then its error is
    appended there and the listing goes on without it.
    """
    infos: list[SessionInfo] = []
    for sid in backend.session_ids():
        try:
            infos.append(SessionInfo(snapshot(backend, sid).load_session(sid)))
        except (DataError, StoreError) as exc:
            if problems is None:
                raise
            problems.append(exc)
    by_id = {info.session.id: info for info in infos}
    looped = _in_cycles({sid: info.session.parent_id for sid, info in by_id.items()})
    for info in infos:
        parent = info.session.parent_id
        if parent is None:
            continue
        if info.session.id in looped:
            info.looped = True
        elif parent in by_id:
            by_id[parent].children.append(info.session.id)
        else:
            info.orphan = True
    infos.sort(key=lambda i: (i.session.created_at, i.session.id))
    return infos


def children(backend: Backend, session_id: str) -> list[str]:
    """Ids of the sessions whose parent is `session_id` (unreadable sessions skipped)."""
    return sorted(
        info.session.id
        for info in list_sessions(backend, problems=[])
        if info.session.parent_id == session_id
    )


def create_session(
    backend: Backend,
    session_id: str | None = None,
    *,
    slot_mode: SlotMode | None = None,
    **settings: Unpack[NewSession],
) -> Session:
    """A new session (its id drawn when None) with its `default` slot (in `slot_mode` if
    given), written whole."""
    session = _new_session(backend, session_id, settings)
    first = _default_slot(slot_mode)
    session = materialize(backend, session, [first], drawn_id=session_id is None)
    log.info("session created: %s (parent %s)", session.id, session.parent_id or "-")
    return session


def _default_slot(mode: SlotMode | None) -> Slot:
    """A new session's `default` slot, in `mode` if given (`session new -t`'s template)."""
    return new_slot(DEFAULT_SLOT, None if mode is None else SlotConfig(mode=mode))


def _new_session(backend: Backend, session_id: str | None, settings: NewSession) -> Session:
    sid = new_session_id() if session_id is None else validate_id(session_id, "session")
    parent_id = settings.get("parent_id")
    if parent_id is not None:
        parent_id = resolve_session(backend, parent_id)
    return Session(id=sid, **{**settings, "parent_id": parent_id})


def replace_session(
    backend: Backend,
    session_id: str,
    *,
    recursive: bool = False,
    orphan: bool = False,
    slot_mode: SlotMode | None = None,
    **settings: Unpack[NewSession],
) -> Replaced:
    """A new session `session_id`, in place of the one of that id if there is one.

    The new session is built aside and swapped in whole, so a failure leaves the old
    session as it was and a crash one or the other. A session with children is
    refused unless `recursive` (its descendants are destroyed) or `orphan` (its
    children are kept, detached: their parent would be a different session now).
    """
    session = _new_session(backend, session_id, settings)
    sid = session.id
    if sid not in backend.session_ids():
        materialize(backend, session, [_default_slot(slot_mode)])
        log.info("session created: %s (parent %s)", sid, session.parent_id or "-")
        return Replaced(session, replaced=False)
    kids = children(backend, sid)
    if kids and not (recursive or orphan):
        raise HasChildren(sid, kids)
    check_parent(backend, sid, session.parent_id)
    backend.replace_session(session, [_default_slot(slot_mode)])
    log.info("session replaced: %s (parent %s)", sid, session.parent_id or "-")
    result = Replaced(session, replaced=True)
    for child in kids:
        if recursive:
            result.destroyed += destroy_session(backend, child, recursive=True).destroyed
        else:
            with work_on(backend, child) as work:
                update_session(work, lambda s: setattr(s, "parent_id", None))
            result.detached.append(child)
    return result


def check_parent(reader: Reader, session_id: str, parent_id: str | None) -> None:
    """Refuse a parent link that would make a loop: `parent_id` or one of its
    ancestors is `session_id` itself (exit 5)."""
    seen = {session_id}
    node = parent_id
    while node is not None:
        if node in seen:
            raise InvalidInput(
                f"session {session_id!r} cannot have parent {parent_id!r}: "
                f"the parent chain would loop through {node!r}"
            )
        seen.add(node)
        try:
            node = reader.load_session(node).parent_id
        except (NotFound, DataError):  # an ancestor gone or unreadable ends the chain
            return


def parent(reader: Reader, session_id: str) -> str | None:
    """The parent's id, or None when there is none or it was destroyed (an orphan)."""
    parent_id = reader.load_session(session_id).parent_id
    if parent_id is None or parent_id not in reader.session_ids():
        return None
    return parent_id


def destroy_session(
    backend: Backend, session_id: str, *, recursive: bool = False, orphan: bool = False
) -> Destroyed:
    """Remove a session, and with `recursive` its descendants.

    A session with children is refused unless `recursive` (remove them too) or `orphan`
    (leave them, their parent gone).
    """
    if session_id not in backend.session_ids():
        raise NotFound(f"session {session_id!r} not found")
    kids: dict[str, list[str]] = {}
    for info in list_sessions(backend, problems=[]):
        parent = info.session.parent_id
        if parent is not None and not info.looped:  # a parent that may be unreadable
            kids.setdefault(parent, []).append(info.session.id)
    direct = kids.get(session_id, [])
    if direct and not (recursive or orphan):
        raise HasChildren(session_id, direct)
    doomed: list[str] = []
    queue = [session_id]
    while queue:
        sid = queue.pop(0)
        if sid in doomed:  # a parent chain that loops (imported before it was refused)
            continue
        doomed.append(sid)
        if recursive:
            queue.extend(kids.get(sid, []))
    for sid in reversed(doomed):
        backend.destroy_session(sid)
        log.info("session destroyed: %s", sid)
    if backend.current_session_id() in doomed:
        backend.set_current_session(None)
    return Destroyed(destroyed=doomed, orphaned=[] if recursive else direct)


# ---- memory ---------------------------------------------------------------------------


def memory_set(work: Work, key: str, value: str) -> None:
    """Set a memory key of the session."""
    update_session(work, lambda s: s.memory.__setitem__(key, value))


def memory_get(reader: Reader, session_id: str, key: str) -> str:
    """A memory key's value (NotFound when it is not set)."""
    memory = reader.load_session(session_id).memory
    if key not in memory:
        raise NotFound(f"memory key {key!r} not set in session {session_id!r}")
    return memory[key]


def memory_remove(work: Work, key: str) -> str:
    """Remove a memory key and return its value (NotFound when it is not set)."""

    def remove(session: Session) -> str:
        if key not in session.memory:
            raise NotFound(f"memory key {key!r} not set in session {session.id!r}")
        return session.memory.pop(key)

    return update_session(work, remove)


# ---- settings -------------------------------------------------------------------------


def configure_session(work: Work, changes: Mapping[str, Any]) -> Session:
    """Change session settings (validated): title, system_prompt, profile, model,
    memory_in_context, auto_compress."""
    unknown = set(changes).difference(SESSION_SETTINGS)
    if unknown:
        raise UsageError(
            f"unknown session setting {sorted(unknown)[0]!r}; "
            f"choose from {', '.join(sorted(SESSION_SETTINGS))}"
        )

    def apply(session: Session) -> Session:
        data = session.model_dump()
        data.update(changes)
        try:
            updated = Session.model_validate(data)
        except ValidationError as exc:
            raise UsageError(f"invalid session setting: {validation_summary(exc)}") from None
        for key in changes:
            setattr(session, key, getattr(updated, key))
        return session

    return update_session(work, apply)


def set_session_setting(work: Work, key: str, text: str) -> Session:
    """Change one session setting from its text on a command line (see
    agctl.config.settings.session_setting_from_text)."""
    return configure_session(work, {key: session_setting_from_text(key, text)})


# ---- many sessions at once ------------------------------------------------------------


@dataclass
class SessionNode:
    """A session in the forest, with the sessions whose parent it is."""

    id: str
    title: str | None
    orphan: bool
    looped: bool
    current: bool
    children: list[SessionNode] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "orphan": self.orphan,
            "looped": self.looped,
            "current": self.current,
            "children": [child.to_dict() for child in self.children],
        }


def is_root(info: SessionInfo) -> bool:
    """Whether a session starts a tree: no parent, a parent gone, or a parent chain that
    loops (every walk ignores that link)."""
    return info.session.parent_id is None or info.orphan or info.looped


def session_forest(
    backend: Backend, root: str | None = None, problems: list[AgctlError] | None = None
) -> list[SessionNode]:
    """Every tree of sessions, oldest root first (or the one under `root`, an id or a
    prefix), so that a listing shows who forked whom.

    Sessions that cannot be read are left out (their errors appended to `problems`, or
    dropped when it is None); a `root` that cannot be read raises its error.
    """
    infos = {
        info.session.id: info
        for info in list_sessions(backend, problems=[] if problems is None else problems)
    }
    current = backend.current_session_id()
    if root is not None:
        root_id = resolve_session(backend, root)
        if root_id not in infos:
            backend.load_session(root_id)  # raises why it cannot be read
        roots = [root_id]
    else:
        roots = [sid for sid, info in infos.items() if is_root(info)]

    def node(sid: str) -> SessionNode:
        info = infos[sid]
        return SessionNode(
            id=sid,
            title=info.session.title,
            orphan=info.orphan,
            looped=info.looped,
            current=sid == current,
            children=[node(kid) for kid in info.children if kid in infos],
        )

    return [node(sid) for sid in roots if sid in infos]


@dataclass
class Removal:
    """What removing several sessions destroyed, and which children it left without a
    parent (none of them destroyed)."""

    destroyed: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, list[str]]:
        return {"destroyed": self.destroyed, "orphaned": self.orphaned}


def remove_sessions(
    backend: Backend, prefixes: Iterable[str], *, recursive: bool = False, orphan: bool = False
) -> Removal:
    """Destroy the sessions named by `prefixes` (ids or unique prefixes), in order.

    Every name is resolved before anything is destroyed, so a typo destroys nothing; a
    session named twice, or already gone as a descendant of one destroyed before it, is
    not destroyed again. A session with children is refused unless `recursive` or
    `orphan` (see destroy_session); what was destroyed before the refusal stays so.
    """
    targets = dict.fromkeys(resolve_session(backend, prefix) for prefix in prefixes)
    removal = Removal()
    for sid in targets:
        if sid in removal.destroyed:
            continue
        result = destroy_session(backend, sid, recursive=recursive, orphan=orphan)
        removal.destroyed += result.destroyed
        removal.orphaned = [
            o for o in removal.orphaned + result.orphaned if o not in removal.destroyed
        ]
    return removal
