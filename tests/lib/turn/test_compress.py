"""Compression (agctl.turn.compress): tool-call groups kept whole, at the threshold in a turn,
and on demand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import (
    KEEP,
    LEADING,
    LONG,
    PROMPT_AT_LIMIT,
    SYSTEM,
    RecordingOffline,
    add,
    data_dir_files,
    draft_file,
    dumps,
    file_only,
    msg,
    threshold_session,
    tool_call,
    tool_result,
    window_for_limit,
)

from agctl.base.errors import ContextFull, ProviderError, ReadonlySlot
from agctl.context.models import ContextBudget, FocusedConfig, Message, Slot
from agctl.context.view import focused_messages
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider, offline_summary
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.compress import (
    SUMMARY_INSTRUCTIONS,
    compress,
    plan_compression,
    render_transcript,
    summarize_slot,
)
from agctl.turn.send import TurnOptions, send_turn

# ---- tool-call groups ----------------------------------------------------------------


def tool_conversation() -> list[Message]:
    return [
        msg("system", "Rules."),
        msg("user", "u1"),
        msg("assistant", "a1"),
        msg("user", "Read both files."),
        tool_call(("c1", "cat", '{"p": "a"}'), ("c2", "cat", '{"p": "b"}')),
        tool_result("c1", "contents of a"),
        tool_result("c2", "contents of b"),
        msg("assistant", "Both read."),
        msg("user", "u3"),
    ]


@pytest.mark.parametrize(
    ("keep_recent", "start"),
    [
        (1, 8),  # only "u3"
        (2, 7),  # cut after the group: the group is folded whole
        (3, 4),  # cut on the second result: moved back to the call
        (4, 4),  # cut on the first result: moved back to the call
        (5, 4),  # cut on the call itself
        (6, 3),
    ],
)
def test_compression_plan_never_splits_a_tool_call_from_its_results(
    keep_recent: int, start: int
) -> None:
    slot = Slot(id="x", messages=tool_conversation())
    plan = plan_compression(slot, keep_recent)
    assert plan is not None
    assert (plan.head, plan.start) == (1, start)


def test_compression_plan_with_nothing_to_fold() -> None:
    group = [msg("system", "s"), tool_call(("c", "f", "{}")), tool_result("c", "r")]
    assert plan_compression(Slot(id="x", messages=group), 1) is None
    assert plan_compression(Slot(id="x", messages=tool_conversation()), 8) is None
    assert plan_compression(Slot(id="x"), 0) is None


def test_compress_keeps_the_whole_group(store: Store) -> None:
    store.create_session("s")
    original = tool_conversation()
    add(store, "s", None, *original)
    result = compress(store, "s", None, strategy="truncate", keep_recent=3)
    assert (result.folded, result.kept) == (3, 6)
    kept = store.load_slot("s").messages
    assert dumps(kept) == dumps([original[0], *original[4:]])
    assert kept[1].tool_calls is not None and [m.tool_call_id for m in kept[2:4]] == ["c1", "c2"]


@pytest.mark.parametrize("recent", [3, 4])
def test_focused_view_never_splits_a_tool_call_from_its_results(recent: int) -> None:
    messages = tool_conversation()
    view = focused_messages(messages, FocusedConfig(stride=1, recent_messages=recent))
    assert dumps(view) == dumps([messages[0], *messages[4:]])


# ---- compression at the threshold, in a turn -----------------------------------------

PROMPT_OVER = "q" * 41


def test_window_for_limit() -> None:
    window = window_for_limit(1_000)
    assert window - ContextBudget.auto(window).reserve == 1_000
    assert window_for_limit(7_537) == 8_192


def test_request_of_exactly_the_limit_goes_through_untouched(store: Store) -> None:
    original, window = threshold_session(store)
    provider = RecordingOffline()
    options = TurnOptions(model="offline", window=window, keep_recent=KEEP)

    result = send_turn(store, "s", PROMPT_AT_LIMIT, provider, options)

    (request,) = provider.requests
    assert request.context.purpose == "turn"
    assert [m["content"] for m in request.messages] == [
        SYSTEM,
        *[m.text() for m in original],
        PROMPT_AT_LIMIT,
    ]
    slot = store.load_slot("s")
    assert slot.compressed == []
    assert dumps(slot.messages[:-2]) == dumps(original)
    assert slot.messages[-1].text() == result.reply.text()
    labels = [c.label for c in Checkpointer(store).summaries("s")]
    assert labels == ["after turn 1", "before turn 1"]


def test_one_token_over_compresses_then_sends(store: Store) -> None:
    original, window = threshold_session(store)
    provider = RecordingOffline()
    options = TurnOptions(model="offline", window=window, keep_recent=KEEP)

    result = send_turn(store, "s", PROMPT_OVER, provider, options)

    folded, kept = original[1:-KEEP], original[-KEEP:]
    summary_text = offline_summary(render_transcript(folded))
    # The offline provider's summary is the extract: with no instruction or artifact
    # folded, the latest sentences, as many as the budget of 128 tokens holds (a short
    # one where a long one does not fit).
    assert summary_text.splitlines() == [
        "Extract of 6 earlier messages (4 of 8 sentences, verbatim):",
        "[assistant] Agreed.",
        f"[user] {LONG[2]}",
        f"[assistant] {LONG[5]}",
    ]
    summary_request, turn_request = provider.requests
    assert summary_request.context.purpose == "summary"
    assert summary_request.messages == [
        {"role": "system", "content": SUMMARY_INSTRUCTIONS},
        {"role": "user", "content": render_transcript(folded)},
    ]
    assert [(m["role"], m["content"]) for m in turn_request.messages] == [
        ("system", SYSTEM),
        ("system", summary_text),
        ("system", LEADING),
        *[(m.role, m.text()) for m in kept],
        ("user", PROMPT_OVER),
    ]

    slot = store.load_slot("s")
    assert [(m.role, m.text()) for m in slot.compressed] == [("system", summary_text)]
    assert dumps(slot.messages[: 1 + KEEP]) == dumps([original[0], *kept])
    assert [m.text() for m in slot.messages[1 + KEEP :]] == [PROMPT_OVER, result.reply.text()]
    assert store.load_session("s").turn_count == 1

    checkpointer = Checkpointer(store)
    summaries = checkpointer.summaries("s")
    assert [c.label for c in summaries] == [
        "after turn 1",
        "after compression",
        "before compression",
    ]
    before = checkpointer.load("s", summaries[2].id)
    assert dumps(checkpointer.state("s", before).slots["default"].messages) == dumps(original)
    checkpointer.rollback("s", before.id)
    restored = store.load_slot("s")
    assert dumps(restored.messages) == dumps(original) and restored.compressed == []


@file_only
def test_one_token_over_with_auto_compress_off_is_context_full(store: Store) -> None:
    _, window = threshold_session(store)
    before = data_dir_files(store.root)
    provider = RecordingOffline()
    options = TurnOptions(model="offline", window=window, auto_compress=False)

    with pytest.raises(ContextFull) as caught:
        send_turn(store, "s", PROMPT_OVER, provider, options)

    limit = window - ContextBudget.auto(window).reserve
    assert (caught.value.total, caught.value.limit, caught.value.over) == (limit + 1, limit, 1)
    assert str(caught.value).startswith("context full")
    assert "1 tokens over" in str(caught.value)
    assert provider.requests == []
    after = data_dir_files(store.root)
    assert set(after) - set(before) == {draft_file("s")}
    assert {k: v for k, v in after.items() if k in before} == before
    assert store.load_draft("s", "default").prompt == PROMPT_OVER


def test_a_turn_that_fails_after_compressing_does_not_say_nothing_was_written(
    store: Store,
) -> None:
    """The compression was written (checkpointed before and after); the turn was not."""
    _, window = threshold_session(store)

    class FailsTheTurn(RecordingOffline):
        def stream(self, request: ChatRequest) -> Iterator[Event]:
            if request.context is not None and request.context.purpose == "turn":
                raise ProviderError("the server went away")
            return super().stream(request)

    options = TurnOptions(model="offline", window=window, keep_recent=KEEP)
    with pytest.raises(ProviderError) as caught:
        send_turn(store, "s", PROMPT_OVER, FailsTheTurn(), options)
    (note,) = caught.value.__notes__
    before = Checkpointer(store).summaries("s")[-1]
    assert before.label == "before compression"
    assert note.startswith(
        "the slot was compressed to make room (the originals are in checkpoint "
        f"{before.id}), but the turn was not written; your prompt was kept as a draft"
    )
    assert "nothing was written" not in note
    assert len(store.load_slot("s").compressed) == 1


@pytest.mark.parametrize(
    ("config", "session", "slot", "compresses"),
    [
        (True, None, None, True),
        (False, None, None, False),
        (True, False, None, False),  # the session beats the config
        (False, True, None, True),
        (True, True, False, False),  # the slot beats the session
        (False, False, True, True),
        (True, None, False, False),
        (False, None, True, True),
    ],
)
def test_auto_compress_precedence_slot_then_session_then_config(
    store: Store, config: bool, session: bool | None, slot: bool | None, compresses: bool
) -> None:
    settings: dict[str, object] = {}
    if session is not None:
        settings["auto_compress"] = session
    if slot is not None:
        settings["slot"] = slot
    _, window = threshold_session(store, **settings)
    provider = RecordingOffline()
    options = TurnOptions(model="offline", window=window, auto_compress=config, keep_recent=KEEP)
    if compresses:
        send_turn(store, "s", PROMPT_OVER, provider, options)
        assert [r.context.purpose for r in provider.requests] == ["summary", "turn"]
        assert len(store.load_slot("s").compressed) == 1
    else:
        with pytest.raises(ContextFull):
            send_turn(store, "s", PROMPT_OVER, provider, options)
        assert provider.requests == []


def test_turn_compression_keeps_a_tool_group_that_straddles_the_cut(store: Store) -> None:
    store.create_session("s", system_prompt=SYSTEM)
    padding = [msg("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(LONG)]
    group = tool_conversation()[4:7]
    tail = [msg("assistant", "Both read."), msg("user", "u3")]
    add(store, "s", None, *padding, *group, *tail)
    provider = RecordingOffline()
    # keep_recent=3 puts the cut on the second tool result.
    options = TurnOptions(model="offline", window=400, keep_recent=3)

    send_turn(store, "s", "next", provider, options)

    slot = store.load_slot("s")
    assert dumps(slot.messages[:5]) == dumps([*group, *tail])
    assert offline_summary(render_transcript(padding)) == slot.compressed[0].text()


def test_compression_that_is_not_enough_is_still_context_full(store: Store) -> None:
    store.create_session("s", system_prompt=SYSTEM)
    add(store, "s", None, *[msg("user", text) for text in LONG])
    options = TurnOptions(model="offline", window=60, keep_recent=KEEP)
    with pytest.raises(ContextFull):
        send_turn(store, "s", "next", RecordingOffline(), options)
    assert store.load_draft("s", "default").prompt == "next"
    assert len(store.load_slot("s").compressed) == 1


def test_context_full_after_compressing_says_what_was_written(store: Store) -> None:
    store.create_session("s", system_prompt=SYSTEM)
    add(store, "s", None, *[msg("user", text) for text in LONG])
    options = TurnOptions(model="offline", window=60, keep_recent=KEEP)
    with pytest.raises(ContextFull) as caught:
        send_turn(store, "s", "next", RecordingOffline(), options)
    assert len(store.load_slot("s").compressed) == 1
    said = "\n".join([str(caught.value), *getattr(caught.value, "__notes__", [])])
    assert "nothing was written" not in said
    assert "turn auto-compress on" not in said


# ---- compress and summarize on demand ------------------------------------------------


def test_compress_truncate_drops_old_messages_without_a_provider(store: Store) -> None:
    store.create_session("s")
    original = [msg("system", LEADING), *[msg("user", t) for t in LONG]]
    add(store, "s", None, *original)
    store.update_slot("s", None, lambda s: s.compressed.append(msg("system", "Earlier.")))

    result = compress(store, "s", None, strategy="truncate", keep_recent=2)

    assert (result.folded, result.kept, result.summary) == (8, 3, None)
    slot = store.load_slot("s")
    assert dumps(slot.messages) == dumps([original[0], *original[-2:]])
    assert [m.text() for m in slot.compressed] == ["Earlier."]
    assert result.before is not None and result.after is not None


def test_compress_summarize_folds_the_previous_summary_too(store: Store) -> None:
    store.create_session("s")
    add(store, "s", None, *[msg("user", t) for t in LONG[:5]])
    store.update_slot("s", None, lambda s: s.compressed.append(msg("system", "Earlier.")))

    result = compress(store, "s", None, keep_recent=2, provider=OfflineProvider())

    folded = [msg("system", "Earlier."), *[msg("user", t) for t in LONG[:3]]]
    assert result.summary == offline_summary(render_transcript(folded))
    assert result.summary.splitlines()[:2] == [
        "Extract of 4 earlier messages (5 of 6 sentences, verbatim):",
        "[system] Earlier.",
    ]
    assert [m.text() for m in store.load_slot("s").compressed] == [result.summary]


@file_only
def test_compress_and_summarize_refuse_a_readonly_slot(store: Store) -> None:
    store.create_session("s")
    add(store, "s", None, *[msg("user", t) for t in LONG])
    store.set_mode("s", None, "readonly")
    before = data_dir_files(store.root)
    with pytest.raises(ReadonlySlot):
        compress(store, "s", None, strategy="truncate", keep_recent=1)
    with pytest.raises(ReadonlySlot):
        summarize_slot(store, "s", None, OfflineProvider())
    assert data_dir_files(store.root) == before


def test_summarize_slot_stores_the_offline_summary_as_summary_override(store: Store) -> None:
    store.create_session("s")
    messages = [msg("user", "What is a monad?"), msg("assistant", "A monoid of endofunctors.")]
    add(store, "s", None, *messages)
    store.update_slot("s", None, lambda s: s.compressed.append(msg("system", "Earlier.")))

    slot = summarize_slot(store, "s", None, OfflineProvider())

    expected = (
        "Extract of 3 earlier messages (3 of 3 sentences, verbatim):\n[system] Earlier.\n"
        "[user] What is a monad?\n[assistant] A monoid of endofunctors."
    )
    assert slot.config.focused.summary_override == expected
    assert store.load_slot("s").config.focused.summary_override == expected
    assert dumps(store.load_slot("s").messages) == dumps(messages)
