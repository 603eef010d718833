"""Tools a turn's caller runs (TurnOptions.caller_tools, what `agctl serve` offers for its
client): the turn ends at the reply asking for calls, the caller's results continue it, and
the slot ends up as agctl's own tool loop leaves it, the requests the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import Adder, Watching, calls, tool_call, tool_result

from agctl.base.errors import InvalidInput, UsageError
from agctl.context.models import Message, messages_to_openai
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn
from agctl.turn.steps import check_results

ASKED = ({"a": 1, "b": 2}, {"a": 3, "b": 4})


def test_a_caller_answered_turn_stores_and_sends_what_agctls_own_tool_loop_does(
    store: Store, tmp_path: Path
) -> None:
    adder = Adder(tmp_path)
    for session in ("own", "caller"):
        store.create_session(session, system_prompt="Be brief.")

    own = Watching([[calls(*ASKED), "3 and 7"]])
    options = TurnOptions(model="offline", tools=adder, tool_choice="required")
    done = send_turn(store, "own", "add them", own, options)
    assert adder.ran() == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]

    theirs = Watching([calls(*ASKED), "3 and 7"])
    offered = TurnOptions(
        model="offline",
        caller_tools=adder.definitions(),
        tool_choice="required",
        parallel_tool_calls=True,
    )
    asked = send_turn(store, "caller", "add them", theirs, offered)
    # The turn ended at the calls, committed with them; nothing ran them.
    assert asked.finish_reason == "tool_calls"
    assert [c.id for c in asked.reply.tool_calls or ()] == ["c0", "c1"]
    assert len(adder.ran()) == 2
    assert [m.role for m in store.load_slot("caller", None).messages] == ["user", "assistant"]
    (first,) = theirs.requests
    assert first.tools == adder.definitions()
    assert first.tool_choice == "required"
    assert first.parallel_tool_calls is True

    # The caller's results appended, the turn goes on from them with no prompt.
    results = [tool_result("c0", "3"), tool_result("c1", "7")]
    store.update_slot("caller", None, lambda slot: slot.messages.extend(results))
    answered = send_turn(store, "caller", "", theirs, offered)
    assert (answered.reply.text(), answered.finish_reason) == ("3 and 7", "stop")

    def seen(session: str) -> list[dict[str, object]]:
        return messages_to_openai(store.load_slot(session, None).messages, reasoning=False)

    assert seen("caller") == seen("own")
    assert [m.role for m in store.load_slot("caller", None).messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    # The continuation sends what the loop's second step sent.
    assert theirs.requests[1].messages == own.requests[1].messages
    assert theirs.requests[1].tools == own.requests[1].tools
    assert done.reply.text() == answered.reply.text()


def test_a_turn_without_caller_tools_sends_none_of_their_fields(store: Store, sid: str) -> None:
    plain = Watching(["fine"])
    send_turn(store, sid, "go", plain, TurnOptions(model="offline", parallel_tool_calls=False))
    (request,) = plain.requests
    assert (request.tools, request.tool_choice, request.parallel_tool_calls) == (None, None, None)
    assert "parallel_tool_calls" not in request.params()


def test_tools_are_run_by_agctl_or_by_the_caller_not_both(tmp_path: Path) -> None:
    adder = Adder(tmp_path)
    with pytest.raises(UsageError, match="not both"):
        TurnOptions(model="m", tools=adder, caller_tools=adder.definitions())


ASKING = [Message(role="user", content="go"), tool_call(("a", "f", "{}"), ("b", "g", "{}"))]


@pytest.mark.parametrize(
    ("before", "given", "needle"),
    [
        (ASKING, ["a", "z"], "tool_call_id 'z' answers no call waiting (waiting: b)"),
        (ASKING, ["a", "a"], "tool_call_id 'a' answers no call waiting (waiting: b)"),
        (ASKING, ["b"], "the tool calls a have no tool message"),
        ([*ASKING, tool_result("a", "1")], ["a"], "'a' answers no call waiting (waiting: b)"),
        (ASKING[:1], ["a"], "'a' answers no call waiting (none is waiting)"),
        ([], ["a"], "none is waiting"),
    ],
)
def test_results_that_do_not_answer_the_calls_waiting_are_refused(
    before: list[Message], given: list[str], needle: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_results(before, [tool_result(ident, "x") for ident in given])
    assert needle in str(caught.value)


def test_results_answering_each_call_waiting_once_pass() -> None:
    check_results(ASKING, [tool_result("b", "2"), tool_result("a", "1")])
    check_results([*ASKING, tool_result("a", "1")], [tool_result("b", "2")])
    check_results(ASKING[:1], [])
