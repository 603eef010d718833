"""Work on many sessions at once: the forest of parents and children, removing several
sessions in one go, and settings given as text.

Uses only the Store's public methods, so it sits above the storage seam and never below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agctl.settings import session_setting_from_text

if TYPE_CHECKING:
    from collections.abc import Iterable

    from agctl.errors import AgctlError
    from agctl.models import Session
    from agctl.store import SessionInfo, Store


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
    store: Store, root: str | None = None, problems: list[AgctlError] | None = None
) -> list[SessionNode]:
    """Every tree of sessions, oldest root first (or the one under `root`, an id or a
    prefix), so that a listing shows who forked whom.

    Sessions that cannot be read are left out (their errors appended to `problems`, or
    dropped when it is None); a `root` that cannot be read raises its error.
    """
    infos = {
        info.session.id: info
        for info in store.list_sessions(problems=[] if problems is None else problems)
    }
    current = store.current_session_id()
    if root is not None:
        root_id = store.resolve_session(root)
        if root_id not in infos:
            store.load_session(root_id)  # raises why it cannot be read
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
    store: Store, prefixes: Iterable[str], *, recursive: bool = False, orphan: bool = False
) -> Removal:
    """Destroy the sessions named by `prefixes` (ids or unique prefixes), in order.

    Every name is resolved before anything is destroyed, so a typo destroys nothing; a
    session named twice, or already gone as a descendant of one destroyed before it, is
    not destroyed again. A session with children is refused unless `recursive` or
    `orphan` (see Store.destroy_session); what was destroyed before the refusal stays so.
    """
    targets = dict.fromkeys(store.resolve_session(prefix) for prefix in prefixes)
    removal = Removal()
    for sid in targets:
        if sid in removal.destroyed:
            continue
        result = store.destroy_session(sid, recursive=recursive, orphan=orphan)
        removal.destroyed += result.destroyed
        removal.orphaned = [
            o for o in removal.orphaned + result.orphaned if o not in removal.destroyed
        ]
    return removal


def set_session_setting(store: Store, session_id: str, key: str, text: str) -> Session:
    """Change one session setting from its text on a command line (see
    agctl.settings.session_setting_from_text)."""
    return store.configure_session(session_id, {key: session_setting_from_text(key, text)})
