"""agctl.context.messages: messages made from typed input, validated as the user's mistakes."""

from __future__ import annotations

import pytest

from agctl.base.errors import UsageError
from agctl.context.messages import prompt_message, scratch_messages, typed_message


def test_a_typed_message_is_stamped_and_keeps_its_fields() -> None:
    message = typed_message("tool", '{"ok": true}', tool_call_id="call_1", name="fn")
    assert (message.role, message.text(), message.tool_call_id, message.name) == (
        "tool",
        '{"ok": true}',
        "call_1",
        "fn",
    )
    assert message.created_at is not None


@pytest.mark.parametrize(
    ("role", "reason"),
    [("tool", "a tool message needs tool_call_id"), ("bogus", "role: Input should be")],
)
def test_an_invalid_typed_message_is_a_usage_error(role: str, reason: str) -> None:
    with pytest.raises(UsageError, match=f"invalid {role} message: {reason}") as caught:
        typed_message(role, "hi")
    assert caught.value.exit_code == 2


def test_scratch_and_prompt_of_a_request() -> None:
    assert [(m.role, m.text()) for m in scratch_messages(["a", "b"])] == [
        ("system", "a"),
        ("system", "b"),
    ]
    prompt = prompt_message("next?")
    assert prompt is not None and (prompt.role, prompt.text()) == ("user", "next?")
    assert prompt_message("") is None and prompt_message(None) is None
