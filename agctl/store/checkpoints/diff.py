"""What changed between two states of a session: per slot, config, messages and tokens."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

import orjson

from agctl.base.hashing import content_hash
from agctl.base.vocab import ZONES
from agctl.context.models import Slot
from agctl.store.checkpoints.reader import live_state, load, state
from agctl.store.checkpoints.records import SessionState

if TYPE_CHECKING:
    from agctl.storage.base import Backend


def diff(backend: Backend, session_id: str, a: str, b: str | None = None) -> dict[str, Any]:
    """What changed from checkpoint `a` to checkpoint `b` (default: the live state)."""
    old = state(backend, session_id, load(backend, session_id, a))
    new = (
        state(backend, session_id, load(backend, session_id, b))
        if b is not None
        else live_state(backend, session_id)
    )
    return diff_states(old, new, a, b or "live")


def _preview(message: dict[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        text = ""
    else:
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
    if not text and message.get("tool_calls"):
        text = ", ".join(c["function"]["name"] + "()" for c in message["tool_calls"])
    flat = " ".join(str(text).split())
    return flat if len(flat) <= 70 else flat[:69] + "…"


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        flat: dict[str, Any] = {}
        for key, value in data.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: data}


def _zone_diff(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, Any]:
    old_hashes = [content_hash(m) for m in old]
    new_hashes = [content_hash(m) for m in new]
    added: list[dict[str, Any]] = []
    removed: list[dict[str, Any]] = []
    changed: list[dict[str, Any]] = []
    matcher = difflib.SequenceMatcher(a=old_hashes, b=new_hashes, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                changed.append(
                    {
                        "index": j,
                        "role": new[j].get("role"),
                        "old": _preview(old[i]),
                        "new": _preview(new[j]),
                    }
                )
            continue
        for i in range(i1, i2):
            removed.append({"index": i, "role": old[i].get("role"), "text": _preview(old[i])})
        for j in range(j1, j2):
            added.append({"index": j, "role": new[j].get("role"), "text": _preview(new[j])})
    return {"added": added, "removed": removed, "changed": changed}


def _tokens(slot: Slot) -> int:
    return sum(m.token_count() for zone in ZONES for m in getattr(slot, zone))


def diff_states(
    old: SessionState, new: SessionState, old_name: str, new_name: str
) -> dict[str, Any]:
    """Per slot: config changes, messages added/removed/changed per zone, token delta."""
    changed: dict[str, Any] = {}
    for slot_id in sorted(old.slots.keys() & new.slots.keys()):
        before, after = old.slots[slot_id], new.slots[slot_id]
        entry: dict[str, Any] = {}
        old_config = _flatten(before.model_dump(mode="json")["config"])
        new_config = _flatten(after.model_dump(mode="json")["config"])
        config = {
            k: [old_config.get(k), new_config.get(k)]
            for k in sorted(old_config.keys() | new_config.keys())
            if old_config.get(k) != new_config.get(k)
        }
        if config:
            entry["config"] = config
        for zone in ZONES:
            zone_diff = _zone_diff(
                [m.model_dump(mode="json") for m in getattr(before, zone)],
                [m.model_dump(mode="json") for m in getattr(after, zone)],
            )
            if any(zone_diff.values()):
                entry[zone] = zone_diff
        delta = _tokens(after) - _tokens(before)
        if entry or delta:
            entry["tokens"] = delta
            changed[slot_id] = entry
    old_memory, new_memory = old.session.memory, new.session.memory
    memory = {
        "added": {k: new_memory[k] for k in sorted(new_memory.keys() - old_memory.keys())},
        "removed": {k: old_memory[k] for k in sorted(old_memory.keys() - new_memory.keys())},
        "changed": {
            k: [old_memory[k], new_memory[k]]
            for k in sorted(old_memory.keys() & new_memory.keys())
            if old_memory[k] != new_memory[k]
        },
    }
    old_tokens = sum(_tokens(s) for s in old.slots.values())
    new_tokens = sum(_tokens(s) for s in new.slots.values())
    return {
        "from": old_name,
        "to": new_name,
        "slots": {
            "created": sorted(new.slots.keys() - old.slots.keys()),
            "deleted": sorted(old.slots.keys() - new.slots.keys()),
            "changed": changed,
        },
        "current_slot": [old.session.current_slot, new.session.current_slot],
        "turn_count": [old.session.turn_count, new.session.turn_count],
        "memory": memory,
        "tokens": new_tokens - old_tokens,
    }
