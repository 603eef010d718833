"""Messages made from what a person typed: one message of a role, validated, and the
scratch context and prompt of a request not yet sent."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError

from agctl.base.errors import UsageError
from agctl.base.validation import validation_summary
from agctl.context.models import Message, utcnow


def typed_message(
    role: str, text: str, *, name: str | None = None, tool_call_id: str | None = None
) -> Message:
    """A new message stamped now, or a UsageError saying what is wrong with it (a tool
    message without the call it answers, an unknown role): typed input is the user's
    mistake, never a traceback."""
    try:
        return Message(
            role=role, content=text, name=name, tool_call_id=tool_call_id, created_at=utcnow()
        )
    except ValidationError as exc:
        raise UsageError(f"invalid {role} message: {validation_summary(exc)}") from None


def scratch_messages(texts: Iterable[str]) -> list[Message]:
    """Scratch context as a request carries it: system messages after the view, never
    stored."""
    return [Message(role="system", content=text) for text in texts]


def prompt_message(prompt: str | None) -> Message | None:
    """The user message of a prompt, or None when there is none."""
    return Message(role="user", content=prompt) if prompt else None
