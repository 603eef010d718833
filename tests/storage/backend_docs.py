"""Documents for the storage tests: rich enough that a lost field shows."""

from __future__ import annotations

from typing import Any

from agctl.context.models import Draft, Message, Session, Slot
from agctl.storage.base import CACHES, Backend

SID = "s"


def rich_session(session_id: str = SID, **changes: Any) -> Session:
    data: dict[str, Any] = {
        "id": session_id,
        "title": "rich",
        "system_prompt": "Be brief.",
        "current_slot": "default",
        "turn_count": 3,
        "memory": {"goal": "ship it"},
        "cost": {"prompt_tokens": 40, "by_model": {"offline": {"requests": 3}}},
        "x_session": {"a": [1, None]},
    }
    return Session.model_validate({**data, **changes})


def rich_slot(slot_id: str = "default", *texts: str) -> Slot:
    """A slot with all three zones, tool calls, reasoning and unknown fields; `texts`
    add user messages at the end."""
    return Slot.model_validate(
        {
            "id": slot_id,
            "config": {"mode": "focused", "focused": {"recent_messages": 2}, "x_color": "teal"},
            "meta": {"parent_id": "base", "message_count": 5, "x_seen": "yes"},
            "immutable": [{"role": "system", "content": "You are a pirate."}],
            "compressed": [{"role": "system", "content": "Compressed: we said hello."}],
            "messages": [
                {"role": "user", "content": "tides?", "x_note": "kept verbatim"},
                {
                    "role": "assistant",
                    "content": None,
                    "reasoning": "The tide table has it.",
                    "tool_calls": [
                        {"id": "call_7", "function": {"name": "lookup", "arguments": '{"q": 1}'}}
                    ],
                },
                {"role": "tool", "tool_call_id": "call_7", "content": '{"tide": "high"}'},
                {"role": "assistant", "content": [{"type": "text", "text": "High tide."}]},
                *({"role": "user", "content": text} for text in texts),
            ],
            "x_plugin": {"pinned": [1, 2]},
        }
    )


def rich_draft(slot_id: str = "default") -> Draft:
    return Draft(
        prompt="what next?",
        slot=slot_id,
        error="the model timed out",
        reply=Message(role="assistant", content="late answer"),
        slot_state="abc123",
        slot_messages=4,
    )


def user(text: str) -> Message:
    return Message(role="user", content=text)


def dump(document: Session | Slot | Draft) -> dict[str, Any]:
    """A document as JSON, its revision aside (compared on its own)."""
    return document.model_dump(mode="json", exclude={"rev"})


def snapshot(backend: Backend, session_id: str = SID) -> dict[str, Any]:
    """Everything a reader of the backend can see of a session."""
    log = backend.checkpoint_log(session_id)
    return {
        "session": dump(backend.load_session(session_id)),
        "slots": {s: dump(backend.load_slot(session_id, s)) for s in backend.slot_ids(session_id)},
        "drafts": {
            s: dump(backend.load_draft(session_id, s)) for s in backend.draft_slots(session_id)
        },
        "log": log.open().read() if log.size() else b"",
        "removed": backend.removed_checkpoints(session_id),
        "caches": {name: backend.cache(session_id, name) for name in CACHES},
    }


def seed(backend: Backend, session_id: str = SID, *slot_ids: str) -> None:
    """A session with a rich `default` slot (and empty `slot_ids`)."""
    slots = [rich_slot(), *(Slot(id=slot_id) for slot_id in slot_ids)]
    backend.create_session(rich_session(session_id), slots)
