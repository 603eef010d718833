"""Budget, estimation and compression in the library: exact numbers, no CLI.

Token numbers are rebuilt here from `estimate_text` plus MESSAGE_OVERHEAD per message, so a
change to the estimator or to what a zone holds shows up as a precise failure.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import Result
from helpers import LONG, add, data_dir_files, draft_file, dumps, file_only, msg

from agctl.base.errors import EXIT_USAGE, ContextFull, ProviderError, ReadonlySlot, UsageError
from agctl.base.hashing import message_hashes
from agctl.context.budget import (
    CONTEXT_WINDOWS,
    DEFAULT_WINDOW,
    Breakdown,
    breakdown,
    check_limit,
    context_window,
    effective_budget,
    updated_budget,
)
from agctl.context.models import (
    ContextBudget,
    FocusedConfig,
    Message,
    Session,
    Slot,
    SlotConfig,
    ToolCall,
    ToolCallFunction,
)
from agctl.context.tokens import MESSAGE_OVERHEAD, estimate_content, estimate_text
from agctl.context.view import focused_messages, memory_message, request_view
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
from agctl.turn.steps import CallRecord

SYSTEM = "You are terse."


class RecordingOffline(OfflineProvider):
    """The offline provider, remembering every request it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ChatRequest] = []

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.requests.append(request)
        return super().stream(request)


def cost(text: str) -> int:
    """Tokens of one plain text message: the overhead plus the estimate of its text."""
    return MESSAGE_OVERHEAD + estimate_text(text)


def tool_call(*calls: tuple[str, str, str]) -> Message:
    """An assistant message calling tools, each given as (id, name, arguments)."""
    return Message(
        role="assistant",
        tool_calls=[
            ToolCall(id=i, function=ToolCallFunction(name=n, arguments=a)) for i, n, a in calls
        ],
    )


def tool_result(call_id: str, content: str) -> Message:
    return Message(role="tool", content=content, tool_call_id=call_id)


# ---- the estimator -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("a", 1),
        ("abcd", 1),
        ("abcde", 2),
        ("You are terse.", 4),  # 14 ASCII characters: ceil(14 / 4)
        ("你好世界", 4),  # CJK: one token a character
        ("ab你好", 3),  # 2 CJK + ceil(2 / 4)
        ("東京タワー", 5),
        ("Москва", 4),  # two-byte characters: half wide, half narrow: 3 + ceil(3 / 4)
    ],
)
def test_estimate_text_exact(text: str, tokens: int) -> None:
    assert estimate_text(text) == tokens


def test_message_tokens_count_overhead_tool_calls_and_reported_usage() -> None:
    assert msg("user", "abcdefgh").token_count() == MESSAGE_OVERHEAD + 2
    call = tool_call(("c1", "read_file", '{"path": "a.py"}'))
    # content None; name 9 chars -> 3, arguments 16 chars -> 4
    assert call.token_count() == MESSAGE_OVERHEAD + 3 + 4
    reported = msg("assistant", "a" * 400).model_copy(update={"tokens": 7})
    assert reported.token_count() == 7
    parts = [{"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert estimate_content(parts) == 1 + 85


# ---- budgets and windows -------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "parts"),
    [
        # (system, history, tools, tool_results, reserve): floor(window * ratio), and
        # history takes what the floors left over, so the parts always add up to the window.
        (8_192, (491, 5_245, 655, 1_146, 655)),
        (32_768, (1_966, 20_973, 2_621, 4_587, 2_621)),
        (65_536, (3_932, 41_945, 5_242, 9_175, 5_242)),
        (128_000, (7_680, 81_920, 10_240, 17_920, 10_240)),
        (200_000, (12_000, 128_000, 16_000, 28_000, 16_000)),
        (1_047_576, (62_854, 670_450, 83_806, 146_660, 83_806)),
        (100, (6, 64, 8, 14, 8)),
        (7, (0, 7, 0, 0, 0)),
        (1, (0, 1, 0, 0, 0)),
    ],
)
def test_auto_budget_parts_and_total(window: int, parts: tuple[int, ...]) -> None:
    budget = ContextBudget.auto(window)
    assert (
        budget.system,
        budget.history,
        budget.tools,
        budget.tool_results,
        budget.reserve,
    ) == parts
    assert budget.total == window


@pytest.mark.parametrize("window", [0, -1])
def test_auto_budget_refuses_an_empty_window(window: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        ContextBudget.auto(window)


def test_effective_budget_is_the_slots_own_else_auto() -> None:
    own = ContextBudget(system=100, history=1_000, tools=0, tool_results=200, reserve=300)
    in_tokens = effective_budget(Slot(id="a", config=SlotConfig(budget=own)), 8_192)
    assert in_tokens.model_dump() == own.model_dump()
    assert effective_budget(Slot(id="b"), 8_192) == ContextBudget.auto(8_192)
    assert effective_budget(Slot(id="b"), 128_000).reserve == 10_240


@pytest.mark.parametrize(
    ("model", "overrides", "window"),
    [
        ("gpt-4o", None, 128_000),  # exact
        ("offline", None, 8_192),
        ("llama3", None, 8_192),
        ("llama3.1:8b", None, 131_072),  # longest prefix: llama3.1, not llama3
        ("llama3:70b", None, 8_192),
        ("gpt-4.1-nano", None, 1_047_576),
        ("o3-mini", None, 200_000),
        ("deepseek-chat-v3", None, 65_536),
        ("gpt-4", None, DEFAULT_WINDOW),  # no entry is a prefix of it
        ("unknown-model", None, DEFAULT_WINDOW),
        ("gpt-4o", {"gpt-4o": 64_000}, 64_000),  # an override beats the table
        ("gpt-4o-2024-08-06", {"gpt-4o-2024": 5_000}, 5_000),  # a longer override prefix
        ("my-local-7b", {"my-local": 4_096}, 4_096),
        ("llama3.1:8b", {"llama3": 1_000}, 131_072),  # a shorter override loses to llama3.1
    ],
)
def test_context_window_lookup(model: str, overrides: dict[str, int] | None, window: int) -> None:
    assert context_window(model, overrides) == window


def test_default_window_and_table() -> None:
    assert DEFAULT_WINDOW == 32_768
    assert CONTEXT_WINDOWS["gpt-4o-mini"] == 128_000


# ---- the breakdown of a crafted request ----------------------------------------------

MEMORY_TEXT = "Known facts (session memory):\n- project: agctl\n- user: Ada"
IMMUTABLE = "Style guide: answer in English and cite file names."
COMPRESSED = 'Summary of 2 earlier messages: user: "Set up the repo"; assistant: "Done."'
FIRST_SYSTEM = "Repository: agctl, a CLI for LLM context."
SUMMARY_OVERRIDE = "We chose plan B: JSON files, one per slot."
SCRATCH = "Scratch: the user prefers short answers."
INPUT = "What should we do next?"


def crafted() -> tuple[Session, Slot]:
    """A session and a focused slot with something in every zone of the request."""
    session = Session(
        id="s",
        system_prompt=SYSTEM,
        memory={"user": "Ada", "project": "agctl"},
        memory_in_context=True,
    )
    messages = [
        msg("system", FIRST_SYSTEM),
        msg("user", "An old question that the focused view leaves out."),
        msg("assistant", "An old answer that the focused view leaves out too."),
        msg("user", "List the files and show the README."),
        tool_call(("call_1", "ls", '{"path": "."}'), ("call_2", "cat", '{"path": "README.md"}')),
        tool_result("call_1", "a.py b.py README.md"),
        tool_result("call_2", "# agctl\nManage LLM context as JSON files."),
        msg("assistant", "There are three files; the README describes agctl.").model_copy(
            update={"tokens": 9}
        ),
        msg("user", "Thanks."),
    ]
    slot = Slot(
        id="main",
        # The last 4 messages start at the second tool result: the view moves the cut back
        # to the assistant message that made the calls.
        config=SlotConfig(
            mode="focused",
            focused=FocusedConfig(stride=1, recent_messages=4, summary_override=SUMMARY_OVERRIDE),
        ),
        immutable=[msg("system", IMMUTABLE)],
        compressed=[msg("system", COMPRESSED)],
        messages=messages,
    )
    return session, slot


def crafted_breakdown(window: int = 8_192) -> Breakdown:
    session, slot = crafted()
    return breakdown(
        session,
        slot,
        model="offline",
        window=window,
        scratch=[msg("system", SCRATCH)],
        user_input=msg("user", INPUT),
    )


def test_breakdown_zone_by_zone() -> None:
    result = crafted_breakdown()
    calls = MESSAGE_OVERHEAD + sum(
        estimate_text(s) for s in ("ls", '{"path": "."}', "cat", '{"path": "README.md"}')
    )
    expected = {
        "system prompt": (1, cost(SYSTEM)),
        "memory": (1, cost(MEMORY_TEXT)),
        "immutable": (1, cost(IMMUTABLE)),
        "compressed": (1, cost(COMPRESSED)),
        # first system message, the summary override, the call, the reply (9 reported), Thanks.
        "messages": (5, cost(FIRST_SYSTEM) + cost(SUMMARY_OVERRIDE) + calls + 9 + cost("Thanks.")),
        "tool results": (
            2,
            cost("a.py b.py README.md") + cost("# agctl\nManage LLM context as JSON files."),
        ),
        "scratch": (1, cost(SCRATCH)),
        "input": (1, cost(INPUT)),
        "tool definitions": (0, 0),  # none offered
    }
    assert {z.name: (z.messages, z.tokens) for z in result.zones} == expected
    # The same numbers written out, so a change to the estimator is noticed here too.
    assert [z.tokens for z in result.zones] == [8, 17, 23, 61, 24, 19, 14, 10, 0]
    assert result.total == 176


def test_breakdown_limit_room_and_parts() -> None:
    result = crafted_breakdown()
    assert result.window == 8_192
    assert result.budget == ContextBudget.auto(8_192)
    assert result.limit == 8_192 - 655 == 7_537
    assert result.room == 7_537 - 176 == 7_361
    assert result.by_part() == {
        "system": 8 + 19 + 17 + 14,  # system prompt, memory, immutable, scratch
        "history": 23 + 61 + 10,  # compressed, messages, input
        "tools": 0,
        "tool_results": 24,
    }
    data = result.to_dict()
    assert (data["limit"], data["total"], data["room"], data["reserve"]) == (7_537, 176, 7_361, 655)
    assert data["budget"] == {
        "system": {"used": 58, "budget": 491, "over": False},
        "history": {"used": 94, "budget": 5_245, "over": False},
        "tools": {"used": 0, "budget": 655, "over": False},
        "tool_results": {"used": 24, "budget": 1_146, "over": False},
    }
    assert data["over_budget"] == []


# Two definitions as `turn send -T ls -T cat` offers them (agctl.turn.tools.definitions).
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
    for name, description in (("ls", "List a directory."), ("cat", "Show a file's text."))
]


def test_breakdown_counts_the_tool_definitions_offered_against_tools() -> None:
    session, slot = crafted()
    result = breakdown(session, slot, model="offline", window=8_192, tools=TOOLS)
    each = [
        estimate_text(json.dumps(tool, ensure_ascii=False, separators=(",", ":"))) for tool in TOOLS
    ]
    assert each == [43, 43]  # written out: a change to how they are counted shows here
    zone = result.zones[-1]
    assert (zone.name, zone.messages, zone.tokens, zone.budget_part) == (
        "tool definitions",
        2,
        43 + 43,
        "tools",
    )
    without = breakdown(session, slot, model="offline", window=8_192)
    assert result.total == without.total + 86
    assert result.by_part() == {**without.by_part(), "tools": 86}
    assert result.to_dict()["budget"]["tools"] == {"used": 86, "budget": 655, "over": False}


def test_tool_definitions_over_their_part_are_over_budget() -> None:
    session, slot = crafted()
    slot.config.budget = ContextBudget(tools=50)
    result = breakdown(session, slot, model="offline", window=8_192, tools=TOOLS)
    assert result.over_budget() == {"tools": (86, 50)}
    assert result.to_dict()["over_budget"] == ["tools"]


class Unrunnable:
    """A ToolBox offering TOOLS whose calls must never be answered."""

    def definitions(self) -> list[dict[str, Any]]:
        return TOOLS

    def begin_turn(self) -> None:
        pass

    def run(self, call: ToolCall) -> tuple[str, CallRecord]:
        raise AssertionError(f"no call was expected, got {call.function.name}")


def test_a_turn_counts_the_tools_it_offers_against_the_window(store: Store) -> None:
    """A request exactly at the limit without tools is over it by their definitions."""
    _, window = threshold_session(store)
    provider = RecordingOffline()
    options = TurnOptions(model="offline", window=window, auto_compress=False, tools=Unrunnable())

    with pytest.raises(ContextFull) as caught:
        send_turn(store, "s", PROMPT_AT_LIMIT, provider, options)

    assert caught.value.over == 86
    assert provider.requests == []


def test_breakdown_counts_exactly_the_request_view() -> None:
    session, slot = crafted()
    scratch, user_input = [msg("system", SCRATCH)], msg("user", INPUT)
    view = request_view(session, slot, scratch=scratch, user_input=user_input)
    assert sum(m.token_count() for m in view) == crafted_breakdown().total
    assert [m.text() for m in view][:3] == [SYSTEM, IMMUTABLE, COMPRESSED]
    assert [m.text() for m in view][-3:] == [MEMORY_TEXT, SCRATCH, INPUT]


def test_breakdown_with_the_slots_own_budget_and_a_reserve_larger_than_the_window() -> None:
    session, slot = crafted()
    slot.config.budget = ContextBudget(system=50, history=100, tools=0, tool_results=10, reserve=70)
    result = breakdown(session, slot, model="m", window=200)
    assert result.limit == 130
    assert result.total == 176 - cost(SCRATCH) - cost(INPUT) == 152
    assert result.room == 130 - 152 == -22
    slot.config.budget = ContextBudget(reserve=500)
    assert breakdown(session, slot, model="m", window=200).limit == 0


def test_breakdown_system_flag_replaces_the_prompt_and_memory_off_drops_the_zone() -> None:
    session, slot = crafted()
    session.memory_in_context = False
    result = breakdown(session, slot, model="m", window=8_192, system_prompt="Be verbose now.")
    zones = {z.name: z for z in result.zones}
    assert zones["system prompt"].tokens == cost("Be verbose now.")
    assert (zones["memory"].messages, zones["memory"].tokens) == (0, 0)


# ---- memory in context ---------------------------------------------------------------


def test_memory_message_is_one_sorted_system_message_after_the_history() -> None:
    """Memory follows the slot's messages (a memory change keeps the history's cache) and
    stands before the scratch and the new input."""
    session, slot = crafted()
    memory = memory_message(session)
    assert memory is not None
    assert (memory.role, memory.text()) == ("system", MEMORY_TEXT)
    scratch, user_input = msg("system", SCRATCH), msg("user", INPUT)
    view = request_view(session, slot, scratch=[scratch], user_input=user_input)
    assert [(m.role, m.text()) for m in view[-3:]] == [
        ("system", MEMORY_TEXT),
        ("system", SCRATCH),
        ("user", INPUT),
    ]
    assert view[-4].text() == "Thanks."
    assert sum(m.role == "system" and "session memory" in m.text() for m in view) == 1


def test_no_memory_message_when_off_or_empty() -> None:
    assert memory_message(Session(id="s", memory={"a": "1"})) is None
    assert memory_message(Session(id="s", memory_in_context=True)) is None
    only_memory = Session(id="s", memory={"a": "1"}, memory_in_context=True)
    view = request_view(only_memory, Slot(id="x"))
    assert [m.text() for m in view] == ["Known facts (session memory):\n- a: 1"]


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
    assert plan.hashes == message_hashes(slot.messages[1:start])


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

LEADING = "Project: agctl. Answer precisely."
KEEP = 4
PROMPT_AT_LIMIT = "q" * 40  # 10 tokens; one more character is one more token
PROMPT_OVER = "q" * 41


def window_for_limit(limit: int) -> int:
    """The smallest window whose auto budget leaves exactly `limit` tokens for a request."""
    return next(w for w in range(limit, 2 * limit) if w - ContextBudget.auto(w).reserve == limit)


def threshold_session(store: Store, **settings: object) -> tuple[list[Message], int]:
    """A session whose request with PROMPT_AT_LIMIT is exactly the limit of the window."""
    store.create_session("s", system_prompt=SYSTEM)
    original = [msg("system", LEADING)] + [
        msg("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(LONG)
    ]
    add(store, "s", None, *original)
    if settings:
        store.configure_session("s", {k: v for k, v in settings.items() if k != "slot"})
        if "slot" in settings:
            store.configure_slot("s", None, {"auto_compress": settings["slot"]})
    request = cost(SYSTEM) + sum(cost(m.text()) for m in original) + cost(PROMPT_AT_LIMIT)
    return original, window_for_limit(request)


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
    assert summary_text.startswith('Summary of 6 earlier messages: user: "We need to decide how')
    assert summary_text.count("user: ") == 3 and summary_text.count("assistant: ") == 3
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
    assert result.summary.startswith('Summary of 4 earlier messages: system: "Earlier."; user:')
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
        'Summary of 3 earlier messages: system: "Earlier."; user: "What is a monad?"; '
        'assistant: "A monoid of endofunctors.".'
    )
    assert slot.config.focused.summary_override == expected
    assert store.load_slot("s").config.focused.summary_override == expected
    assert dumps(store.load_slot("s").messages) == dumps(messages)


def test_offline_summary_is_deterministic_and_caps_the_list() -> None:
    transcript = "\n".join(f"[user] message {i}" for i in range(14))
    summary = offline_summary(transcript)
    assert summary == offline_summary(transcript)
    assert summary.startswith('Summary of 14 earlier messages: user: "message 0"; ')
    assert summary.endswith('user: "message 11"; and 2 more.')
    long_line = "[assistant] " + "word " * 40
    assert offline_summary(long_line) == (
        'Summary of 1 earlier messages: assistant: "' + ("word " * 12)[:59] + '…".'
    )


# ---- estimates against real tokenizers -----------------------------------------------

# The estimate divided by a real tokenizer's count, per paragraph, must stay within these
# bounds. Measured over the paragraphs below (bpe-openai):
#   cl100k_base: 0.76 (SQL, JavaScript) .. 1.55 (Russian); English 1.14-1.37, CJK 0.83-1.12
#   o200k_base:  0.76 (SQL, JavaScript) .. 2.63 (Russian); CJK 1.11-1.62
# The low end is what matters for staying inside a window: code, at about three ASCII
# characters a token, is the only text the estimator undercounts, by up to a quarter.
# The high end is Cyrillic, which o200k packs densely while the estimator counts a two-byte
# character as 0.625 tokens. Margins: 0.1 below the lowest ratio, 0.25 above cl100k's highest
# and 0.35 above o200k's, so that another realistic paragraph does not make the test flaky,
# while real regressions still fail: CJK counted per byte (about 3x) or ASCII per character
# (about 4x) land far outside.
RATIO_BOUNDS: dict[str, tuple[float, float]] = {
    "cl100k_base": (0.65, 1.8),
    "o200k_base": (0.65, 3.0),
}
# Chinese and Japanese are "about one token a character" (the issue): a tighter band around
# cl100k's count, measured 0.83-1.12.
CJK_BOUNDS_CL100K = (0.75, 1.3)

PARAGRAPHS: dict[str, list[str]] = {
    "english": [
        "The quarterly report shows that revenue grew by twelve percent, driven mostly by the "
        "new subscription tier. Churn stayed flat, but support tickets doubled after the March "
        "release, which suggests the onboarding flow needs another look before we expand.",
        "When you branch a conversation, the parent keeps its history untouched and the child "
        "starts with a copy of every message. Later you can merge what the branch worked out "
        "back into the main line, either verbatim or as a short summary written by the model.",
        "Please remember to water the plants on the balcony while I am away; the tomatoes need "
        "a full can every evening, and the basil only every other day. The key is under the "
        "blue pot next to the door.",
    ],
    "code": [
        "def effective_budget(slot: Slot, window: int) -> ContextBudget:\n"
        '    """The slot\'s own budget when it has one."""\n'
        "    if slot.config.budget is not None:\n"
        "        return slot.config.budget\n"
        "    return ContextBudget.auto(window)\n",
        "for (let i = 0; i < items.length; i++) {\n  const item = items[i];\n"
        "  if (item.price > 100 && !item.discounted) {\n    total += item.price * 0.9;\n"
        "  } else {\n    total += item.price;\n  }\n}\n"
        "console.log(`total: ${total.toFixed(2)}`);\n",
        "SELECT u.id, u.email, COUNT(o.id) AS orders\nFROM users u\n"
        "LEFT JOIN orders o ON o.user_id = u.id\nWHERE u.created_at >= '2024-01-01'\n"
        "GROUP BY u.id, u.email\nHAVING COUNT(o.id) > 3\nORDER BY orders DESC;\n",
    ],
    "chinese": [
        "上下文窗口是模型一次能够处理的最大令牌数。当对话变得很长时，我们需要把较早的消息压缩成"
        "摘要，同时保留最近的几条消息，这样模型才能继续回答新的问题。",
        "今天下午三点在会议室讨论新版本的发布计划。产品经理希望在月底之前完成所有测试，但是开发"
        "团队认为时间太紧，建议推迟两周。最后大家同意先发布测试版。",
        "北京是中国的首都，也是全国的政治和文化中心。这座城市有三千多年的历史，拥有故宫、长城和"
        "天坛等许多著名的名胜古迹，每年吸引数百万游客前来参观。",
    ],
    "japanese": [
        "コンテキストウィンドウとは、モデルが一度に処理できるトークンの最大数のことです。会話が"
        "長くなると、古いメッセージを要約にまとめ、最近のメッセージだけを残す必要があります。",
        "明日の会議は午前十時から始まります。資料は前日までに共有フォルダにアップロードして"
        "ください。質問がある場合は、田中さんにメールで連絡してください。",
        "東京の桜は三月の終わりごろに咲き始め、四月の初めに満開になります。上野公園や目黒川には"
        "毎年たくさんの人が花見に訪れます。",
    ],
    "russian": [
        "Контекстное окно — это максимальное число токенов, которое модель может обработать за "
        "один раз. Когда разговор становится длинным, старые сообщения нужно сжимать в краткое "
        "изложение и оставлять только последние.",
        "Завтра в десять утра состоится совещание по новому выпуску. Пожалуйста, загрузите "
        "материалы в общую папку до вечера, вопросы присылайте Ивану по электронной почте.",
        "Москва — столица России и крупнейший город страны. Здесь находятся Кремль, Красная "
        "площадь и Большой театр, которые каждый год посещают миллионы туристов.",
    ],
    "mixed": [
        "The function 计算总价(items) returns the total price; если список пуст, it returns 0. "
        "詳しくはドキュメントを参照してください。",
        "Meeting notes (会议记录): we agreed to ship v2.1 on Friday. Иван отвечает за релиз, "
        "田中さん handles the Japanese docs, and 王芳 reviews the Chinese translation.",
        "Error: ファイルが見つかりません (file not found) at /home/user/数据/report.csv — "
        "проверьте путь и права доступа, then retry with --force.",
    ],
}


def ratios(encoding: str, script: str) -> list[float]:
    bpe_openai = pytest.importorskip("bpe_openai")
    encoder = bpe_openai.get_encoding(encoding)
    return [estimate_text(p) / len(encoder.encode(p)) for p in PARAGRAPHS[script]]


@pytest.mark.parametrize("encoding", sorted(RATIO_BOUNDS))
@pytest.mark.parametrize("script", sorted(PARAGRAPHS))
def test_estimate_is_within_tolerance_of_real_tokenizers(encoding: str, script: str) -> None:
    low, high = RATIO_BOUNDS[encoding]
    measured = ratios(encoding, script)
    assert all(low <= r <= high for r in measured), [round(r, 3) for r in measured]


@pytest.mark.parametrize("script", ["chinese", "japanese"])
def test_cjk_is_about_one_token_a_character(script: str) -> None:
    low, high = CJK_BOUNDS_CL100K
    measured = ratios("cl100k_base", script)
    assert all(low <= r <= high for r in measured), [round(r, 3) for r in measured]
    for paragraph in PARAGRAPHS[script]:
        assert estimate_text(paragraph) == len(paragraph)


# Budgets that tell the truth: partial budgets, shares of the window, a reserve that leaves
# no room refused, and parts over their budget flagged (ctx show) and warned (a turn).


Run = Callable[..., Result]
WINDOW = 8_192  # the offline model's window
AUTO = ContextBudget.auto(WINDOW)
LONG_SYSTEM = "word " * 600  # far more than the system part's auto share of 8,192


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def stored_budget(store: Store) -> dict[str, Any] | None:
    budget = store.load_slot("s", "default").config.budget
    return None if budget is None else budget.model_dump()


# ---- the library -------------------------------------------------------------------


def test_a_budget_naming_some_parts_gives_the_others_their_auto_share() -> None:
    """Before: the model's defaults gave every part left out a fixed count (reserve 10,000,
    more than the whole offline window)."""
    partial = ContextBudget.model_validate({"system": 100})
    assert partial.model_dump() == {
        "system": 100,
        "history": None,
        "tools": None,
        "tool_results": None,
        "reserve": None,
    }
    tokens = partial.resolve(WINDOW)
    assert tokens.system == 100
    assert (tokens.history, tokens.tools, tokens.tool_results, tokens.reserve) == (
        AUTO.history,
        AUTO.tools,
        AUTO.tool_results,
        AUTO.reserve,
    )
    assert effective_budget(Slot(id="a", config=SlotConfig(budget=partial)), WINDOW) == tokens


def test_a_share_is_a_fraction_of_the_window_it_is_resolved_for() -> None:
    budget = ContextBudget(reserve=0.1, tool_results=0.25)
    assert budget.resolve(8_192).reserve == 819
    assert budget.resolve(128_000).reserve == 12_800
    assert budget.resolve(128_000).tool_results == 32_000


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (1.0, "neither a token count nor a share"),  # 100 % or one token?
        (2000.0, "neither a token count nor a share"),
        (0.0, "neither a token count nor a share"),
        (-0.5, "neither a token count nor a share"),
        (-1, "0 or more"),
        (True, "a token count (2000), a share of the window (0.1) or null"),
        ("10%", "a token count (2000), a share of the window (0.1) or null"),
    ],
)
def test_a_part_that_is_neither_a_count_nor_a_share_is_refused(value: object, says: str) -> None:
    with pytest.raises(UsageError, match=f"budget part reserve: .*{re.escape(says)}"):
        updated_budget(None, {"reserve": value})


def test_updated_budget_keeps_what_is_not_named_and_null_goes_back_to_auto() -> None:
    current = ContextBudget(system=100, reserve=0.1)
    changed = updated_budget(current, {"history": 4_000, "system": None})
    assert changed.model_dump() == {
        "system": None,
        "history": 4_000,
        "tools": None,
        "tool_results": None,
        "reserve": 0.1,
    }
    with pytest.raises(UsageError, match="unknown budget part 'memory'; choose from system"):
        updated_budget(current, {"memory": 1})


@pytest.mark.parametrize("reserve", [8_192, 9_000])
def test_a_reserve_that_leaves_no_room_is_refused_with_the_numbers(reserve: int) -> None:
    tokens = ContextBudget(reserve=reserve).resolve(WINDOW)
    limit = WINDOW - tokens.reserve
    with pytest.raises(UsageError) as caught:
        check_limit(ContextBudget(reserve=reserve), WINDOW, "offline")
    message = str(caught.value)
    assert f"a reserve of {tokens.reserve} tokens" in message
    assert f"the {WINDOW}-token window of offline (limit {limit})" in message
    assert check_limit(ContextBudget(reserve=WINDOW - 1), WINDOW, "offline").reserve == WINDOW - 1


def test_set_budget_merges_into_the_stored_budget_and_a_refusal_writes_nothing(
    store: Store,
) -> None:
    store.create_session("s")
    store.set_budget("s", None, {"reserve": 0.1}, window=WINDOW, model="offline")
    store.set_budget("s", None, {"system": 300}, window=WINDOW, model="offline")
    expected = {"system": 300, "history": None, "tools": None, "tool_results": None}
    assert stored_budget(store) == {**expected, "reserve": 0.1}
    with pytest.raises(UsageError, match="limit -808"):
        store.set_budget("s", None, {"reserve": 9_000}, window=WINDOW, model="offline")
    assert stored_budget(store) == {**expected, "reserve": 0.1}
    store.set_budget("s", None, None, window=WINDOW, model="offline")
    assert stored_budget(store) is None


def test_breakdown_names_the_parts_over_their_budget(store: Store) -> None:
    session = store.create_session("s", system_prompt=LONG_SYSTEM)
    slot = store.load_slot("s", None)
    slot.messages.append(Message(role="user", content="hello"))
    slot.config.budget = ContextBudget(system=100, history=0)
    result = breakdown(session, slot, model="offline", window=WINDOW)
    used = result.by_part()
    assert result.over_budget() == {
        "system": (used["system"], 100),
        "history": (used["history"], 0),
    }
    data = result.to_dict()
    assert data["over_budget"] == ["system", "history"]
    assert data["budget"]["system"] == {"used": used["system"], "budget": 100, "over": True}
    assert data["budget"]["tool_results"]["over"] is False


def test_a_turn_over_a_part_budget_warns_and_is_still_sent(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.create_session("s", system_prompt=LONG_SYSTEM)
    store.configure_slot("s", None, {"budget": {"system": 100}})
    system_tokens = Message(role="system", content=LONG_SYSTEM).token_count()
    with caplog.at_level(logging.WARNING, logger="agctl"):
        result = send_turn(
            store, "s", "hi", OfflineProvider(), TurnOptions(model="offline", window=WINDOW)
        )
    assert result.turn == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"slot default: system uses {system_tokens} tokens, over its budget of 100 "
        f"by {system_tokens - 100}"
    ]


def test_a_turn_over_an_auto_share_warns_nothing_ctx_show_flags_it(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """An auto share is no budget the user set: a long system prompt over it would warn
    on every turn."""
    store.create_session("s", system_prompt=LONG_SYSTEM)
    store.configure_slot("s", None, {"budget": {"history": 0.5}})  # system stays auto
    with caplog.at_level(logging.WARNING, logger="agctl"):
        send_turn(store, "s", "hi", OfflineProvider(), TurnOptions(model="offline", window=WINDOW))
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    shown = breakdown(store.load_session("s"), store.load_slot("s"), model="offline", window=WINDOW)
    assert "system" in shown.over_budget()


def test_a_turn_within_every_part_budget_warns_nothing(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.create_session("s", system_prompt="Be brief.")
    with caplog.at_level(logging.WARNING, logger="agctl"):
        send_turn(store, "s", "hi", OfflineProvider(), TurnOptions(model="offline", window=WINDOW))
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


# ---- the command line --------------------------------------------------------------


@file_only
def test_slot_set_budget_partial_and_shares(run: Run, store: Store) -> None:
    ok(run("session", "new", "s"))
    first = json.loads(ok(run("--json", "slot", "set", "budget", '{"reserve": 0.1}')).stdout)
    assert first["budget"]["reserve"] == 0.1
    assert first["tokens"] == {**AUTO.model_dump(), "reserve": 819}
    assert (first["model"], first["window"], first["limit"]) == ("offline", WINDOW, WINDOW - 819)
    text = ok(run("slot", "set", "budget", '{"system": 100}')).stdout
    assert text.startswith("slot default: budget system 100, history ")
    assert f"reserve 819 (10%) (window {WINDOW} of offline, limit {WINDOW - 819})" in text
    assert stored_budget(store) == {
        "system": 100,
        "history": None,
        "tools": None,
        "tool_results": None,
        "reserve": 0.1,
    }
    shown = ok(run("slot", "show")).stdout
    assert "budget      system 100, history auto, tools auto, tool_results auto, reserve 10%" in (
        shown
    )
    ok(run("slot", "set", "budget", "auto"))
    assert stored_budget(store) is None


@file_only
@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('{"reserve": 9000}', "a reserve of 9000 tokens leaves no room"),
        ('{"reserve": 1.0}', "1.0 is neither a token count nor a share"),
        ('{"memory": 1}', "unknown budget part 'memory'"),
        ("[1, 2]", "a budget is a JSON object of parts or 'auto', not [1,2]"),
        ("12", "a budget is a JSON object of parts or 'auto', not 12"),
    ],
)
def test_slot_set_budget_refuses_bad_budgets_with_exit_2(
    run: Run, store: Store, value: str, says: str
) -> None:
    ok(run("session", "new", "s"))
    ok(run("slot", "set", "budget", '{"system": 50}'))
    result = run("slot", "set", "budget", value)
    assert result.exit_code == EXIT_USAGE
    assert says in result.stderr
    assert "Traceback" not in result.stderr
    assert stored_budget(store) == {
        "system": 50,
        "history": None,
        "tools": None,
        "tool_results": None,
        "reserve": None,
    }


def test_ctx_show_flags_a_part_over_budget_and_the_turn_warns(run: Run) -> None:
    ok(run("session", "new", "s", "--system", LONG_SYSTEM))
    ok(run("slot", "set", "budget", '{"system": 100}'))
    system_tokens = Message(role="system", content=LONG_SYSTEM).token_count()
    over = system_tokens - 100
    data = json.loads(ok(run("--json", "ctx", "show")).stdout)
    assert data["over_budget"] == ["system"]
    assert data["budget"]["system"] == {"used": system_tokens, "budget": 100, "over": True}
    text = ok(run("ctx", "show")).stdout
    system_row = next(line for line in text.splitlines() if line.startswith("system  "))
    assert system_row.split() == ["system", str(system_tokens), "100", "over", "by", str(over)]
    history_row = next(line for line in text.splitlines() if line.startswith("history  "))
    assert "over" not in history_row
    turn = ok(run("turn", "send", "hi"))
    assert turn.stderr == (
        f"agctl: warning: slot default: system uses {system_tokens} tokens, "
        f"over its budget of 100 by {over}\n"
    )
