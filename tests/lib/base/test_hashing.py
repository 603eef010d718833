"""The stored digests stay byte-identical: each is pinned to its value before agctl.base.hashing
existed (checkpoint logs, derive's branch hashes, drafts and cassettes keep them on disk)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agctl.base.errors import CorruptDocument
from agctl.base.hashing import (
    canonical_json,
    content_hash,
    data_hash,
    line_sum,
    message_hash,
    message_hashes,
    request_fingerprint,
)
from agctl.context.models import Message, Slot, SlotConfig, ToolCall
from agctl.providers.base import ChatRequest
from agctl.storage.encoding import encode_record
from agctl.storage.file.backend import FileLog
from agctl.store import Store
from agctl.store.checkpoints import messages_to_json
from agctl.store.checkpoints.pack import Log
from agctl.store.drafts import slot_state

MOMENT = datetime(2024, 5, 17, 9, 30, 0, tzinfo=UTC)
# The digests of MESSAGES as agctl 0.x computed them (blake2b-128 of sorted compact JSON).
MESSAGE_DIGESTS = ["cb4df65281b89a5abd7867f4c6c82923", "909b234d11ca9fd9f597d3f71e1011f2"]


def fixed_messages() -> list[Message]:
    call = ToolCall.model_validate(
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "f", "arguments": '{"b":1,"a":2}'},
        }
    )
    return [
        Message(role="user", content="Grüße, wörld ✓", created_at=MOMENT, tokens=7),
        Message(
            role="assistant", content=None, tool_calls=[call], model="m", usage={"z": 1, "a": 2}
        ),
    ]


def test_content_hash_of_a_json_value_is_pinned_and_ignores_key_order() -> None:
    value = {"b": [1, "é", None], "a": {"y": 1.5, "x": True}}
    assert content_hash(value) == "5e3ebd7ce4f2f0ea4e75271ff09f123a"
    assert content_hash({"a": {"x": True, "y": 1.5}, "b": [1, "é", None]}) == content_hash(value)
    assert canonical_json(value) == '{"a":{"x":true,"y":1.5},"b":[1,"é",null]}'.encode()


def test_message_hashes_are_pinned_whether_hashed_as_models_or_as_stored_json() -> None:
    messages = fixed_messages()
    assert message_hashes(messages) == MESSAGE_DIGESTS
    assert [message_hash(m) for m in messages] == MESSAGE_DIGESTS
    # checkpoints hash the slot's serialised messages: the same bytes, the same digests
    assert [content_hash(m) for m in messages_to_json(messages)] == MESSAGE_DIGESTS


def test_a_derived_slot_records_the_pinned_hashes_of_what_it_was_given(store: Store) -> None:
    store.create_session("s")

    def fill(slot: Slot) -> None:
        slot.messages = fixed_messages()

    store.update_slot("s", None, fill)
    derived = store.derive_slot("s", "branch")
    assert derived.meta.branch == MESSAGE_DIGESTS


def test_slot_state_of_a_draft_is_pinned() -> None:
    messages = fixed_messages()
    slot = Slot(id="main", config=SlotConfig(auto_compress=True), immutable=messages[:1])
    slot.messages = messages
    slot.meta.created_at = slot.meta.updated_at = MOMENT
    # Unset settings are left out: a setting added to SlotConfig later (summary_template)
    # must not change this.
    assert slot_state(slot) == "83aded3f378af378b45b2ac472c2bf32"


def test_the_cassette_fingerprint_of_a_request_is_pinned() -> None:
    request = ChatRequest(
        model="gpt-x",
        messages=[m.to_openai() for m in fixed_messages()],
        temperature=0.5,
        max_tokens=20,
        stream=True,
    )
    pinned = "5cd587227c441e4e3162b5aa1de35191cc8e4b487a52a7287cc6bc3242d8fa94"
    assert request.fingerprint() == request_fingerprint(request.model_input()) == pinned


def test_the_digest_of_an_exported_log_and_the_checksum_of_a_log_line_are_pinned() -> None:
    assert data_hash(b"line one\nline two\n") == "d0d2450ed34fc872de79419f5af403c2"
    assert line_sum(b'{"m":1}') == b"addb5f97"
    assert encode_record({"m": 1}) == b'{"m":1}\taddb5f97\n'


def test_a_log_verifies_a_node_by_the_pinned_message_digest(tmp_path: Path) -> None:
    history = Log(FileLog(tmp_path / "log"))
    data = messages_to_json(fixed_messages())[0]
    [good, bad] = history.append(
        [
            {"h": MESSAGE_DIGESTS[0], "p": -1, "m": data},
            {"h": MESSAGE_DIGESTS[1], "p": -1, "m": data},
        ]
    )
    assert [digest for digest, _, _ in history.chain(good, 1)] == MESSAGE_DIGESTS[:1]
    with pytest.raises(CorruptDocument):
        history.chain(bad, 1)
