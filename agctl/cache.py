"""Keeping a provider's prefix cache warm: the routing key a request carries.

Providers cache the longest unchanged prefix of a request (see docs/cache.md). OpenAI
also routes by `prompt_cache_key`: requests with the same key reach the same cache. A
slot's key names the line it descends from, not the slot itself, so a fork (`ckpt fork`)
and a derived slot (`slot derive`) send their first request where their parent's prefix
is cached. The key is a hash: stable across turns, and no session or slot name leaves
the machine in it.
"""

from __future__ import annotations

import hashlib

from agctl.models import Session, Slot

KEY_PREFIX = "agctl-"


def slot_root(slot: Slot) -> str:
    """The slot its line of derives began with (its own id for a slot not derived)."""
    source = slot.config.source
    if source.kind != "derived":
        return slot.id
    return source.root_id or source.parent_id or slot.id


def session_root(session: Session) -> str:
    """The session its line of forks began with (its own id for a session not forked)."""
    origin = session.forked_from
    if not origin or not session.parent_id:
        return session.id
    root = origin.get("root")
    return root if isinstance(root, str) and root else session.parent_id


def cache_key(session: Session, slot: Slot) -> str:
    """The `prompt_cache_key` of a request on `slot`: the same for its forks and derives."""
    line = f"{session_root(session)}\0{slot_root(slot)}".encode()
    return KEY_PREFIX + hashlib.sha256(line).hexdigest()[:32]
