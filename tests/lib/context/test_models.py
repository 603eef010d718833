"""Documents: message round trips, versions, unknown fields, slot operations, budget, tokens."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from agctl.base.errors import NotFound, ReadonlySlot, UsageError
from agctl.context.models import (
    ContextBudget,
    FocusedConfig,
    Message,
    ModelCost,
    Session,
    Slot,
    SlotConfig,
    _dumped_requests,
    _plain_message,
    message_list_adapter,
    messages_to_openai,
    stored_messages,
)
from agctl.context.tokens import MESSAGE_OVERHEAD, estimate_content, estimate_text
from agctl.providers.base import Usage
from agctl.providers.offline import OfflineProvider
from agctl.reports.usage import ModelUsage
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn

OPENAI_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "x"}},
        ],
    },
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": "need the weather",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    },
    {"role": "tool", "content": "12C", "tool_call_id": "call_1"},
    {"role": "assistant", "content": "12C in Oslo.", "name": "bot", "refusal": None},
]


@pytest.mark.parametrize("data", OPENAI_MESSAGES)
def test_openai_round_trip_is_lossless(data: dict[str, Any]) -> None:
    assert Message.from_openai(data).to_openai() == data


def test_reasoning_is_stored_as_reasoning_and_metadata_stays_out_of_openai() -> None:
    message = Message.from_openai(OPENAI_MESSAGES[2])
    assert message.reasoning == "need the weather"
    message.tokens = 7
    message.model = "deepseek-reasoner"
    assert "tokens" not in message.to_openai() and "model" not in message.to_openai()
    stored = message.model_dump(mode="json")
    assert stored["tokens"] == 7 and "name" not in stored
    assert Message.model_validate(stored) == message


@pytest.mark.parametrize(
    "data",
    [
        {"role": "robot", "content": "hi"},
        {"role": "user"},
        {"role": "tool", "content": "x"},
        {"role": "user", "content": 5},
        {"role": "user", "content": "x", "tokens": -1},
    ],
)
def test_invalid_messages_are_refused(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Message.model_validate(data)


def test_unknown_fields_survive_a_rewrite_at_every_level() -> None:
    data = Slot(id="s", messages=[Message(role="user", content="hi")]).model_dump(mode="json")
    data["future_top"] = {"x": 1}
    data["config"]["future_config"] = [1, 2]
    data["messages"][0]["future_message"] = "kept"
    again = Slot.model_validate_json(Slot.model_validate(data).model_dump_json())
    dumped = again.model_dump(mode="json")
    assert dumped["future_top"] == {"x": 1}
    assert dumped["config"]["future_config"] == [1, 2]
    assert dumped["messages"][0]["future_message"] == "kept"


def test_missing_optional_fields_get_defaults() -> None:
    slot = Slot.model_validate({"id": "bare"})
    assert slot.config.mode == "full" and slot.messages == [] and slot.schema_version == "1.0"
    session = Session.model_validate({"id": "s"})
    assert session.current_slot == "default" and session.memory == {}


def slot_with(*texts: str, mode: str = "full") -> Slot:
    slot = Slot(id="s", messages=[Message(role="user", content=t) for t in texts])
    slot.config.mode = mode  # type: ignore[assignment]
    return slot


def test_message_operations_with_negative_indexes() -> None:
    slot = slot_with("a", "b", "c")
    assert slot.get(-1).text() == "c" and slot.position(-3) == 0
    assert slot.insert(-1, Message(role="assistant", content="x")) == 2
    assert [m.text() for m in slot.messages] == ["a", "b", "x", "c"]
    assert slot.insert(4, Message(role="user", content="end")) == 4
    assert slot.edit(-5, "A")[1].text() == "A"
    assert [(i, m.text()) for i, m in [slot.remove(1)]] == [(1, "b")]
    assert slot.pop()[0] == 3
    assert slot.pop(0)[1].text() == "A"
    assert [m.text() for m in slot.messages] == ["x", "c"]
    assert slot.find({"assistant"}) == [0]
    assert slot.retain({"user"}) == 1
    assert slot.clear() == 1 and slot.messages == []


@pytest.mark.parametrize("index", [3, -4, 100])
def test_out_of_range_index_is_not_found(index: int) -> None:
    with pytest.raises(NotFound, match="3 messages"):
        slot_with("a", "b", "c").get(index)


def test_edit_of_a_tool_call_message_is_refused() -> None:
    slot = Slot(
        id="s",
        messages=[Message(role="assistant", tool_calls=[{"id": "c", "function": {"name": "f"}}])],
    )
    with pytest.raises(UsageError):
        slot.edit(0, "text")


WRITES = [
    ("append", lambda s: s.append(Message(role="user", content="x"))),
    ("insert", lambda s: s.insert(0, Message(role="user", content="x"))),
    ("edit", lambda s: s.edit(0, "x")),
    ("remove", lambda s: s.remove(0)),
    ("pop", lambda s: s.pop()),
    ("retain", lambda s: s.retain({"user"})),
    ("clear", lambda s: s.clear()),
    ("import", lambda s: s.extend([Message(role="user", content="x")])),
]


@pytest.mark.parametrize(("action", "write"), WRITES, ids=[w[0] for w in WRITES])
def test_readonly_slot_refuses_every_write(action: str, write: Any) -> None:
    slot = slot_with("a", "b", mode="readonly")
    before = slot.model_dump()
    with pytest.raises(ReadonlySlot, match=action):
        write(slot)
    assert slot.model_dump() == before


def test_refresh_meta_counts_every_zone() -> None:
    slot = Slot(
        id="s",
        immutable=[Message(role="system", content="abcd")],
        messages=[Message(role="user", content="abcdefgh", tokens=100)],
    )
    slot.refresh_meta()
    assert slot.meta.message_count == 2
    assert slot.meta.total_tokens == (4 + 1) + 100


def test_budget_auto_splits_the_whole_window() -> None:
    budget = ContextBudget.auto(128_000)
    assert budget.total == 128_000
    assert budget.history > budget.tool_results > budget.reserve > 0
    assert ContextBudget.auto(1).total == 1
    with pytest.raises(ValueError):
        ContextBudget.auto(0)


def test_focused_config_updates_ignore_none_and_clear_summary() -> None:
    focus = FocusedConfig(recent_messages=4, summary_override="S")
    assert focus.updated({"recent_messages": None}).recent_messages == 4
    assert focus.updated({"summary_override": ""}).summary_override is None
    with pytest.raises(ValidationError):
        focus.updated({"recent_messages": -1})
    assert SlotConfig().focused.keep_system is True


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("abcd", 1), ("abcde", 2), ("你好世界", 4), ("hello 世界", 4), ("😀", 1)],
)
def test_token_estimate_is_script_aware(text: str, tokens: int) -> None:
    assert estimate_text(text) == tokens


# The fast reads of a long slot (agctl.context.models.stored_messages, Slot.from_json, the request
# form of plain messages, Message.counts) give exactly what pydantic gives: the same
# messages, fields set, dumps and errors, for stored messages of every shape, hostile ones
# included.


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


# A turn costs what it adds: zone memos keep each message's count and request form.


def said(number: int) -> Message:
    role = "user" if number % 2 == 0 else "assistant"
    return Message(role=role, content=f"message {number} " + "word " * (number % 7))


def tool(number: int) -> Message:
    return Message(role="tool", tool_call_id=f"c{number}", content="result " * number)


def sums(messages: list[Message]) -> tuple[int, int, int, int]:
    tools = [m for m in messages if m.role == "tool"]
    return (
        sum(m.token_count() for m in messages),
        sum(m.token_count() for m in tools),
        len(tools),
        sum(m.content_estimate() for m in messages),
    )


def memo_sums(slot: Slot) -> tuple[int, int, int, int]:
    memo = slot.memo("messages")
    return memo.tokens, memo.tool_tokens, memo.tool_messages, memo.estimate


def test_the_memo_follows_appends_edits_removals_and_copies() -> None:
    slot = Slot(id="s", messages=[said(n) for n in range(6)])
    assert memo_sums(slot) == sums(slot.messages)
    slot.messages += [tool(7), said(8)]
    assert memo_sums(slot) == sums(slot.messages)
    slot.edit(2, "a much longer text than the one it had before, to count differently")
    assert memo_sums(slot) == sums(slot.messages)
    slot.remove(0)
    slot.messages[3] = said(99)  # replaced in place, not through a method
    assert memo_sums(slot) == sums(slot.messages)
    copy = Slot.model_validate_json(slot.model_dump_json())
    copy._memos = slot._memos  # equal messages, other objects: still the same sums
    assert memo_sums(copy) == sums(copy.messages)
    slot.clear()
    assert memo_sums(slot) == (0, 0, 0, 0)


def test_the_request_form_is_that_of_the_whole_zone() -> None:
    slot = Slot(id="s", messages=[said(n) for n in range(5)])
    first = list(slot.memo("messages").requests())
    assert first == messages_to_openai(slot.messages, reasoning=False)
    slot.messages.append(Message(role="assistant", content="hm", reasoning="secret"))
    assert slot.memo("messages").requests() == messages_to_openai(slot.messages, reasoning=False)
    assert all("reasoning_content" not in d for d in slot.memo("messages").requests())


@pytest.mark.parametrize("mode", ["full", "focused"])
def test_a_turn_counts_only_what_is_new(
    store: Store, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    store.create_session("s")
    store.update_slot("s", None, lambda s: s.messages.extend(said(n) for n in range(500)))
    store.set_mode("s", None, mode)
    options = TurnOptions(model="offline", window=10_000_000, auto_compress=False)
    provider = OfflineProvider()
    first = send_turn(store, "s", "warm up", provider, options)
    counted: list[int] = []
    real = Message.token_count

    def counting(self: Message) -> int:
        counted.append(1)
        return real(self)

    monkeypatch.setattr(Message, "token_count", counting)
    send_turn(store, "s", "and now", provider, options, reuse=first.slot)
    # The focused view counts its own messages (up to recent + stride - 1 = 25), twice.
    assert len(counted) < 60, f"a turn onto 500 messages counted {len(counted)} of them"


# "Not reported" kept apart from 0 when counts are added up: an account's turns
# (ModelCost.merge), and a session written before cache counts existed.


def test_an_account_sums_what_was_reported_and_keeps_its_share_honest() -> None:
    account = ModelCost()
    account.merge(ModelCost.of(Usage(1000, 10), 0.5))  # an older turn: nothing reported
    assert account.cached_tokens is None and account.cache_saved is None
    account.merge(ModelCost.of(Usage(2000, 10, cached_tokens=1024), 0.25, 0.125))
    account.merge(ModelCost.of(Usage(2000, 10, cached_tokens=0), 0.5, 0.0))
    assert (account.prompt_tokens, account.cached_tokens) == (5000, 1024)
    assert account.cache_prompt_tokens == 4000  # the share is of these, not of all 5000
    assert (account.cost, account.cache_saved) == (1.25, 0.125)
    row = ModelUsage("m", account)
    assert (row.cache_share, row.cache_text()) == (0.256, "26% of 4000")
    # A request that reported its cache but had no price: what the cache saved is unknown
    # from then on, and so is the cost.
    account.merge(ModelCost.of(Usage(100, 1, cached_tokens=0), None, None))
    assert (account.cost, account.cache_saved, account.cached_tokens) == (None, None, 1024)
    assert ModelUsage("m", account).saved_text() == "unpriced"


def test_a_session_written_before_cache_counts_reads_as_not_reported() -> None:
    old = {"id": "s", "cost": {"prompt_tokens": 5, "completion_tokens": 1, "cost": 0.1,
           "by_model": {"m": {"requests": 1, "prompt_tokens": 5, "completion_tokens": 1,
                              "cost": 0.1}}}}  # fmt: skip
    session = Session.model_validate(old)
    entry = session.cost.by_model["m"]
    assert (entry.cached_tokens, entry.cache_prompt_tokens, entry.cache_saved) == (None,) * 3
    # Written back, it gains no field: nothing claims a count no provider gave.
    assert session.model_dump(mode="json")["cost"]["by_model"]["m"] == {
        "requests": 1,
        "prompt_tokens": 5,
        "completion_tokens": 1,
        "cost": 0.1,
    }
    assert ModelUsage("m", entry).cache_text() == "not reported"


# Imports the modules of the models every command builds with pydantic's Field counting
# its calls by their arguments, then prints the definitions made more than once, and
# those made again but for the default (a constraint a type alias could give once).
FIELD_CALLS = """
import collections, json, pydantic, pydantic.fields
made, constraints = collections.Counter(), collections.Counter()
field = pydantic.fields.Field
def counted(*args, **kwargs):
    made[repr((args, sorted(kwargs.items(), key=lambda item: item[0])))] += 1
    constraints[repr((args, sorted((k, v) for k, v in kwargs.items() if k != "default")))] += 1
    return field(*args, **kwargs)
pydantic.Field = pydantic.fields.Field = counted
import agctl.context.models, agctl.config.file, agctl.store.checkpoints.records
print(json.dumps({
    "calls": sum(made.values()),
    "repeated": [k for k, n in made.items() if n > 1],
    "constraints_repeated": [k for k, n in constraints.items() if n > 1],
}))
"""


def test_the_models_every_command_builds_define_each_field_once() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", FIELD_CALLS], capture_output=True, text=True, timeout=120, check=True
    )
    made = json.loads(done.stdout)
    assert made["calls"] > 20  # the count is real
    assert made["repeated"] == []  # each a call of Field: ~0.1M instructions of every turn
    assert made["constraints_repeated"] == []


def test_fields_defined_alike_stay_apart() -> None:
    from agctl.context.models import _is_none, _optional, shared_field

    assert _optional() is shared_field(default=None, exclude_if=_is_none)
    first, second = Slot(session_id="s", id="a"), Slot(session_id="s", id="b")
    first.messages.append(Message(role="user", content="hi"))
    assert second.messages == [] and first.compressed == [] and first.immutable == []
    fields = Message.model_fields
    assert fields["name"] is not fields["model"]
    assert (fields["name"].annotation, fields["tokens"].annotation) == (str | None, int | None)
    assert [m.__class__.__name__ for m in fields["tokens"].metadata] == ["Ge"]
    assert fields["name"].metadata == [] and shared_field(default=None).metadata == []
    dumped = Message(role="user", content="hi", name="n").model_dump()
    assert "model" not in dumped and dumped["name"] == "n"


def test_a_slot_stores_no_summary_template_until_one_is_set() -> None:
    slot = Slot(session_id="s", id="a")
    document = slot.model_dump(mode="json")
    assert "summary_template" not in document["config"]  # read back, a null was checked
    document["config"]["summary_template"] = None  # as slots written before stored it
    assert Slot.from_json(orjson.dumps(document)).config.summary_template is None
    templated = SlotConfig.model_validate({"summary_template": "## Risks"})
    assert templated.model_dump(mode="json")["summary_template"] == "## Risks"
    with pytest.raises(ValidationError):
        SlotConfig.model_validate({"summary_template": ""})
