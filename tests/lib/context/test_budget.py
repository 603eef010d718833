"""Budget, estimation and compression in the library: exact numbers, no CLI.

Token numbers are rebuilt here from `estimate_text` plus MESSAGE_OVERHEAD per message, so a
change to the estimator or to what a zone holds shows up as a precise failure.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import Result
from helpers import (
    PROMPT_AT_LIMIT,
    SYSTEM,
    RecordingOffline,
    cost,
    file_only,
    msg,
    threshold_session,
    tool_call,
    tool_result,
)

from agctl.base.errors import EXIT_USAGE, ContextFull, UsageError
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
)
from agctl.context.tokens import MESSAGE_OVERHEAD, estimate_text
from agctl.context.view import memory_message, request_view
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn
from agctl.turn.steps import CallRecord

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

    def end_turn(self) -> None:
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
