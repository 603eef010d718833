"""Budgets that tell the truth: partial budgets, shares of the window, a reserve that leaves
no room refused, and parts over their budget flagged (ctx show) and warned (a turn)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import Result
from helpers import file_only

from agctl.base.errors import EXIT_USAGE, UsageError
from agctl.context.budget import breakdown, check_limit, effective_budget, updated_budget
from agctl.context.models import ContextBudget, Message, Slot, SlotConfig
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn

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
