"""The fast reads of a long slot (agctl.context.models.stored_messages, Slot.from_json, the request
form of plain messages, Message.counts) give exactly what pydantic gives: the same
messages, fields set, dumps and errors, for stored messages of every shape, hostile ones
included."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from agctl.context.models import (
    Message,
    Slot,
    _dumped_requests,
    _plain_message,
    message_list_adapter,
    messages_to_openai,
    stored_messages,
)
from agctl.context.tokens import MESSAGE_OVERHEAD, estimate_content, estimate_text

TEXT = st.text(max_size=30) | st.sampled_from(["", "日本語", "\x00", "\u202e", "</script>"])
TIMES = st.sampled_from(
    [
        "2026-12-01T21:29:21.645726Z",
        "2026-12-01T21:29:21Z",
        "2026-12-01T21:29:21+00:00",
        "2026-12-01T21:29:21.645726+02:00",
        "2026-12-01 21:29:21.645726Z",
        "2026-12-01T21:29:21,645726Z",
        "2026-12-01T24:00:00.000000Z",
        "2026-13-01T21:29:21.645726Z",
        "2026-12-01T21:29:21.64572Z",
        "2026-12-01",
        "2026-12-01T21:29:21.6457261",
        "2026-12-01T21:29:21.645726z",
        "yesterday",
        "",
    ]
)
VALUES = st.none() | st.booleans() | st.integers(-3, 10**20) | TEXT | st.floats(allow_nan=False)
TOOL_CALL = st.fixed_dictionaries(
    {"id": TEXT, "function": st.fixed_dictionaries({"name": TEXT, "arguments": TEXT})}
)
FIELDS: dict[str, Any] = {
    "role": st.sampled_from(["system", "user", "assistant", "tool", "developer", "x"]) | VALUES,
    "content": TEXT | st.none() | st.lists(st.dictionaries(TEXT, VALUES, max_size=2), max_size=2),
    "name": TEXT | VALUES,
    "tool_calls": st.none() | st.lists(TOOL_CALL, max_size=2) | VALUES,
    "tool_call_id": TEXT | VALUES,
    "reasoning": TEXT | VALUES,
    "created_at": TIMES | VALUES,
    "model": TEXT | VALUES,
    "usage": st.dictionaries(TEXT, VALUES, max_size=2) | VALUES,
    "tokens": st.integers(-2, 3) | st.integers(0, 10**6) | VALUES,
    "output": TEXT | VALUES,
    "output_sha256": TEXT | VALUES,
    "unknown": VALUES,
}


@st.composite
def stored(draw: st.DrawFn) -> Any:
    """A message as a store's JSON may hold it: mostly plain, any field possibly wrong."""
    data: dict[str, Any] = {
        "role": draw(st.sampled_from(["user", "assistant", "system", "tool"])),
        "content": draw(TEXT),
    }
    # Often one field off the plain form, the case a fast path gets wrong most easily.
    keys = st.lists(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=5, unique=True)
    for key in draw(st.sampled_from(sorted(FIELDS)).map(lambda key: [key]) | keys):
        data[key] = draw(FIELDS[key])
    if draw(st.integers(0, 4)) == 0:
        data.pop(draw(st.sampled_from(["role", "content"])), None)
    # Through JSON, as a store gives it (no tuples, no non-str keys).
    return json.loads(json.dumps(data))


def same(fast: BaseModel, slow: BaseModel) -> None:
    assert fast == slow
    assert fast.__pydantic_fields_set__ == slow.__pydantic_fields_set__
    assert fast.model_dump_json() == slow.model_dump_json()
    assert fast.model_dump() == slow.model_dump()


@settings(max_examples=600, deadline=None)
@given(st.lists(stored(), max_size=4))
def test_stored_messages_are_pydantic_s_messages(items: list[Any]) -> None:
    try:
        slow = message_list_adapter().validate_python(items)
    except ValidationError:
        with pytest.raises(ValidationError):
            stored_messages(items)
        return
    fast = stored_messages(items)
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        same(a, b)
        assert a.created_at == b.created_at
        assert type(a.tokens) is type(b.tokens)


@settings(max_examples=300, deadline=None)
@given(stored())
def test_a_message_built_fast_is_only_ever_a_valid_one(item: Any) -> None:
    fast = _plain_message(item)
    if fast is not None:
        same(fast, Message.model_validate(item))


def test_the_plain_form_agctl_writes_is_built_fast() -> None:
    """The shapes a turn stores take the fast path (else it would be no faster)."""
    written = [
        Message(role="user", content="hi"),
        Message.model_validate(
            {
                "role": "assistant",
                "content": "hello",
                "created_at": "2026-12-01T21:29:21.645726Z",
                "model": "m",
                "usage": {"prompt_tokens": 3},
                "tokens": 2,
            }
        ),
        Message(role="tool", content="out", tool_call_id="c1", created_at="2026-12-01T21:29:21Z"),
    ]
    for message in written:
        item = orjson.loads(message.model_dump_json())
        fast = _plain_message(item)
        assert fast is not None
        same(fast, message)


def test_every_default_is_none() -> None:
    """_plain_message fills the fields a message leaves out with None."""
    assert {name: field.default for name, field in Message.model_fields.items()} == dict.fromkeys(
        Message.model_fields
    ) | {"role": Message.model_fields["role"].default}
    assert all(field.default_factory is None for field in Message.model_fields.values())


@settings(max_examples=300, deadline=None)
@given(st.lists(stored(), max_size=4), st.booleans())
def test_the_request_form_is_pydantic_s(items: list[Any], reasoning: bool) -> None:
    try:
        messages = message_list_adapter().validate_python(items)
    except ValidationError:
        return
    fast = messages_to_openai(messages, reasoning=reasoning)
    slow = _dumped_requests(messages, reasoning=reasoning)
    assert fast == slow
    assert orjson.dumps(fast) == orjson.dumps(slow)  # key order too: requests are replayed


@settings(max_examples=300, deadline=None)
@given(stored())
def test_counts_are_token_count_and_content_estimate(item: Any) -> None:
    try:
        message = Message.model_validate(item)
    except ValidationError:
        return
    assert message.counts() == (message.token_count(), message.content_estimate())
    assert message.content_estimate() == MESSAGE_OVERHEAD + estimate_content(message.content)


@settings(max_examples=300, deadline=None)
@given(st.lists(stored(), max_size=6))
def test_a_zone_memo_sums_each_message_s_counts(items: list[Any]) -> None:
    """The memo's sums, its inline case for plain text included, are those of counts()."""
    messages = []
    for item in items:
        try:
            messages.append(Message.model_validate(item))
        except ValidationError:
            continue
    memo = Slot(id="s", messages=messages).memo("messages")
    counts = [(m.role, *m.counts()) for m in messages]
    assert (memo.tokens, memo.tool_tokens, memo.tool_messages, memo.estimate) == (
        sum(count for _, count, _ in counts),
        sum(count for role, count, _ in counts if role == "tool"),
        sum(role == "tool" for role, _, _ in counts),
        sum(estimate for _, _, estimate in counts),
    )


@given(st.text())
def test_the_ascii_estimate_is_the_general_one(text: str) -> None:
    wide = (len(text.encode("utf-8", "surrogatepass")) - len(text)) // 2
    expected = wide + (max(len(text) - wide, 0) + 3) // 4 if text else 0
    assert estimate_text(text) == expected


def where(exc: ValidationError) -> list[tuple[Any, ...]]:
    return [(e["type"], e["loc"], e["msg"]) for e in exc.errors()]


def slot_json(zones: dict[str, Any], **extra: Any) -> bytes:
    document = {
        "rev": 7,
        "schema_version": Slot.model_fields["schema_version"].default,
        "id": "main",
        # fixed: left out, they would be the time of each read
        "meta": {"created_at": "2026-12-01T21:29:21Z", "updated_at": "2026-12-01T21:29:22Z"},
        **zones,
        **extra,
    }
    return json.dumps(document).encode()


@settings(max_examples=200, deadline=None)
@given(st.lists(stored(), max_size=3), st.lists(stored(), max_size=3))
def test_a_slot_read_fast_is_pydantic_s_slot(messages: list[Any], immutable: list[Any]) -> None:
    raw = slot_json({"messages": messages, "immutable": immutable})
    try:
        slow = Slot.model_validate_json(raw)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as caught:
            Slot.from_json(raw)
        assert where(caught.value) == where(exc)  # placed the same
        return
    fast = Slot.from_json(raw)
    same(fast, slow)
    assert fast.rev == slow.rev == 7
    for zone in ("immutable", "compressed", "messages"):
        for a, b in zip(getattr(fast, zone), getattr(slow, zone), strict=True):
            same(a, b)


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[1, 2]",
        slot_json({"messages": [{"role": "user", "content": "hi"}]}, config={"mode": "nope"}),
        slot_json({"messages": "many"}),
        slot_json({"messages": [{"role": "user", "content": "hi"}]}, schema_version="0.9"),
        b'{"id": "main", "messages": [{"role": "user", "content": "\\ud800"}]}',
    ],
)
def test_odd_documents_read_as_pydantic_reads_them(raw: bytes) -> None:
    try:
        slow = Slot.model_validate_json(raw)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as caught:
            Slot.from_json(raw)
        assert where(caught.value) == where(exc)
        return
    same(Slot.from_json(raw), slow)
