"""The tool loop of a turn: requests and tool calls in order, one turn committed, the step
limit, and the step log that lets a failed turn go on without running a tool twice.

The tools here are real processes (a small Python program), answered through a ToolBox
of the test's own: what agctl.turn.tools adds (approval, scrubbing, limits) is tested there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import Adder, Watching, calls, file_only

from agctl.base.errors import AgctlError, Blocked, ProviderError, StepLimit, StoreError
from agctl.context.models import ToolCall
from agctl.providers.base import ChatRequest, Event, WirePart
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn
from agctl.turn.steps import CallRecord


@pytest.fixture
def sid(store: Store) -> str:
    return store.create_session("s", system_prompt="Add things.").id


def options(tools: Adder, **changes: Any) -> TurnOptions:
    return TurnOptions(model="offline", tools=tools, **changes)


def test_a_loop_runs_the_calls_in_order_and_commits_one_turn(
    store: Store, sid: str, tmp_path: Path
) -> None:
    tools = Adder(tmp_path)
    provider = Watching([[calls({"a": 2, "b": 3}, {"a": 1, "b": 1}), "5 and 2."]])
    result = send_turn(store, sid, "add 2+3 and 1+1", provider, options(tools))
    assert [r["a"] for r in tools.ran()] == [2, 1]
    slot = store.load_slot(sid)
    assert [(m.role, m.text()) for m in slot.messages] == [
        ("user", "add 2+3 and 1+1"),
        ("assistant", ""),
        ("tool", "5"),
        ("tool", "2"),
        ("assistant", "5 and 2."),
    ]
    assert [m.tool_call_id for m in slot.messages if m.role == "tool"] == ["c0", "c1"]
    session = store.load_session(sid)
    assert session.turn_count == 1
    assert session.cost.by_model["offline"].requests == 2
    assert result.reply.text() == "5 and 2." and len(result.steps) == 2
    data = result.to_dict()
    assert [c["name"] for c in data["steps"][0]["tool_calls"]] == ["add", "add"]
    assert data["steps"][0]["tool_calls"][0]["exit"] == 0 and data["steps"][1]["tool_calls"] == []
    # The second request carries the first reply and both results; both offer the tools.
    first, second = provider.requests
    assert first.tools == second.tools == tools.definitions()
    assert [m["role"] for m in second.messages[-4:]] == ["user", "assistant", "tool", "tool"]
    assert second.context.step == 2
    # One turn: undo takes the whole loop away, and no draft is left.
    Checkpointer(store).undo(sid)
    assert store.load_slot(sid).messages == []
    assert store.load_session(sid).turn_count == 0
    assert store.files is None or not store.files.draft_slots(sid)


def test_at_the_step_limit_one_last_request_asks_for_the_answer(
    store: Store, sid: str, tmp_path: Path
) -> None:
    tools = Adder(tmp_path)
    provider = Watching([[calls({"a": 1, "b": 1}), "Two."]])
    send_turn(store, sid, "add", provider, options(tools, max_steps=1))
    assert [r.tool_choice for r in provider.requests] == [None, "none"]
    assert store.load_slot(sid).messages[-1].text() == "Two."


def test_a_model_that_still_asks_for_tools_stops_at_exit_10_keeping_everything(
    store: Store, sid: str, tmp_path: Path
) -> None:
    tools = Adder(tmp_path)
    script = [[calls({"a": 1, "b": 2}, prefix="x"), calls({"a": 3, "b": 4}, prefix="y")]]
    with pytest.raises(StepLimit) as raised:
        send_turn(store, sid, "loop forever", Watching(script), options(tools, max_steps=1))
    assert raised.value.exit_code == 10
    assert store.load_slot(sid).messages == [] and store.load_session(sid).turn_count == 0
    draft = store.load_draft(sid, "default")
    assert draft.prompt == "loop forever"
    assert [m.role for m in draft.steps] == ["assistant", "tool", "assistant"]
    assert "not run again" in "\n".join(raised.value.__notes__)


def test_a_turn_failing_at_step_two_goes_on_from_its_step_log_without_running_tools_again(
    store: Store, sid: str, tmp_path: Path
) -> None:
    tools = Adder(tmp_path)
    script = [[calls({"a": 20, "b": 1}), "It is 21."]]
    with pytest.raises(ProviderError):
        send_turn(store, sid, "add 20+1", Watching(script, fail_at=2), options(tools))
    assert len(tools.ran()) == 1
    draft = store.load_draft(sid, "default")
    assert [(m.role, m.text()) for m in draft.steps] == [("assistant", ""), ("tool", "21")]
    resumed = Watching(script)
    result = send_turn(store, sid, draft.prompt, resumed, options(tools), resume=draft.steps)
    assert [r.context.step for r in resumed.requests] == [2], "it went on at step 2"
    assert len(tools.ran()) == 1, "the recorded result was used, the tool not run again"
    assert result.reply.text() == "It is 21."
    assert [m.role for m in store.load_slot(sid).messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert not store.files or not store.files.draft_slots(sid)


@file_only
def test_each_steps_results_are_on_disk_before_the_next_request(
    store: Store, sid: str, tmp_path: Path, isolated_env: Path
) -> None:
    tools = Adder(tmp_path)
    seen: list[list[str]] = []

    class Looking(Watching):
        def stream(self, request: ChatRequest) -> Iterator[Event]:
            if request.context.step == 2 and store.files is not None:
                kept = Store(isolated_env).load_draft(sid, "default")
                seen.append([m.text() for m in kept.steps])
            return super().stream(request)

    send_turn(store, sid, "add", Looking([[calls({"a": 4, "b": 4}), "Eight."]]), options(tools))
    if store.files is not None:
        assert seen == [["", "8"]]


def test_calls_run_at_once_keep_their_order(store: Store, sid: str, tmp_path: Path) -> None:
    tools = Adder(tmp_path)
    # The first call ends only once the second has run: both run at once, or it fails.
    waits_for_the_second = calls({"a": 1, "b": 0, "after": 2}, {"a": 2, "b": 0})
    send_turn(
        store, sid, "both", Watching([[waits_for_the_second, "done"]]), options(tools, tool_jobs=2)
    )
    assert [r["a"] for r in tools.ran()] == [2, 1], "the second finished first"
    results = [m.text() for m in store.load_slot(sid).messages if m.role == "tool"]
    assert results == ["1", "2"], "results in the calls' order"


def test_without_tools_a_reply_asking_for_one_is_written_as_it_came(store: Store, sid: str) -> None:
    result = send_turn(
        store, sid, "hi", Watching([calls({"a": 1, "b": 1})]), TurnOptions(model="offline")
    )
    assert result.reply.tool_calls and "steps" not in result.to_dict()
    assert [m.role for m in store.load_slot(sid).messages] == ["user", "assistant"]


# ---- cassettes: a tool run recorded once, replayed in CI without running a tool -------


def test_a_recorded_tool_run_replays_in_a_fresh_data_dir_without_running_tools(
    tmp_path: Path,
) -> None:
    from agctl.providers.cassette import (
        CassetteTools,
        RecordingProvider,
        RecordingTools,
        ReplayProvider,
    )

    tools = Adder(tmp_path)
    cassette = tmp_path / "run.cassette"
    script = [[calls({"a": 2, "b": 2}), calls({"a": 4, "b": 4}, prefix="d"), "It is 8."]]
    recorded = Store(tmp_path / "recorded")
    recorded.create_session("s")
    provider = RecordingProvider(Watching(script), cassette)
    first = send_turn(
        recorded, "s", "double 2 twice", provider, options(RecordingTools(tools, cassette))
    )
    assert len(tools.ran()) == 2
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    assert [line.get("kind", "request") for line in lines] == [
        "request",
        "tool",
        "request",
        "tool",
        "request",
    ]
    assert {line["schema_version"] for line in lines} == {"2.0"}

    fresh = Store(tmp_path / "ci")
    fresh.create_session("s")
    replaying = CassetteTools(cassette, tools.definitions())
    again = send_turn(fresh, "s", "double 2 twice", ReplayProvider(cassette), options(replaying))
    assert len(tools.ran()) == 2, "no tool ran in the replay"
    assert again.reply.text() == first.reply.text() == "It is 8."
    assert [c.outcome for step in again.steps for c in step.calls] == ["replayed", "replayed"]
    texts = [[m.text() for m in s.load_slot("s").messages] for s in (recorded, fresh)]
    assert texts[0] == texts[1]


def test_a_call_the_cassette_never_saw_is_a_replay_miss_naming_the_closest(
    store: Store, sid: str, tmp_path: Path
) -> None:
    from agctl.base.errors import ReplayMiss
    from agctl.providers.cassette import CassetteTools

    cassette = tmp_path / "c.cassette"
    cassette.write_text(
        json.dumps(
            {
                "schema_version": "2.0",
                "kind": "tool",
                "hash": "x",
                "name": "add",
                "arguments": '{"a": 1, "b": 1}',
                "result": "2",
            }
        )
        + "\n"
    )
    tools = CassetteTools(cassette, Adder(tmp_path).definitions())
    with pytest.raises(ReplayMiss, match=r'add\(\{"a": 5, "b": 5\}\).*closest.*"a": 1'):
        send_turn(store, sid, "add", Watching([[calls({"a": 5, "b": 5}), "ten"]]), options(tools))
    # The same call with other spacing and key order is found (the hash is not trusted).
    found = send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"b": 1, "a": 1}), "two"], [calls({"b": 1, "a": 1}), "two"]]),
        options(tools),
    )
    assert [m.text() for m in store.load_slot(sid).messages if m.role == "tool"] == ["2"]
    assert found.reply.text() == "two"


def test_a_replay_checks_the_tool_calls_a_turn_makes(
    store: Store, sid: str, tmp_path: Path
) -> None:
    from agctl.turn.transcripts import TranscriptTurn, parse_transcript, replay

    tools = Adder(tmp_path)
    transcript = parse_transcript(
        b'{"input": "add", "expect": "4.",'
        b' "expect_tools": [{"name": "add", "arguments": {"a": 2}}]}\n'
        b'{"input": "again", "expect_tools": [{"name": "add", "arguments": {"a": 9}}]}\n'
        b'{"input": "none", "expect_tools": []}\n'
    )
    script = [
        [calls({"a": 2, "b": 2}), "4."],
        [calls({"a": 3, "b": 3}, prefix="e"), "6."],
        [calls({"a": 1, "b": 1}, prefix="f"), "2."],
    ]
    summary = replay(store, sid, transcript, Watching(script), options(tools), check="exact")
    assert summary.checked == 3 and summary.mismatched == [2, 3]
    report = summary.mismatch_report(5)
    assert '-tool call: add {"a":9}' in report and '+tool call: add {"a": 3, "b": 3}' in report
    assert "+tool call: add" in report.split("turn 3")[1]
    assert isinstance(transcript[0], TranscriptTurn)


class Refusing(Adder):
    """Adder that refuses (Blocked, as a hook blocking the call would) a call of `a` 0."""

    def run(self, call: ToolCall) -> tuple[str, CallRecord]:
        if json.loads(call.function.arguments)["a"] == 0:
            raise Blocked("a hook blocked the call")
        return super().run(call)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_call_that_stops_the_turn_keeps_the_results_of_the_calls_that_ran(
    store: Store, sid: str, tmp_path: Path, jobs: int
) -> None:
    """The call that ran before (one at a time) or beside (at once) the refused one keeps
    its result in the draft: the resumed turn does not run it again."""
    tools = Refusing(tmp_path)
    # Started first, the call that runs is running (or done) when the second is refused.
    first = calls({"a": 1, "b": 1}, {"a": 0, "b": 0})
    script = [[first, "Done."]]
    with pytest.raises(Blocked):
        send_turn(store, sid, "add", Watching(script), options(tools, tool_jobs=jobs))
    assert [r["a"] for r in tools.ran()] == [1]
    draft = store.load_draft(sid, "default")
    assert [m.role for m in draft.steps] == ["assistant", "tool"]
    send_turn(
        store, sid, draft.prompt, Watching(script), options(Adder(tmp_path)), resume=draft.steps
    )
    assert [r["a"] for r in tools.ran()] == [1, 0], "the call that ran is not run again"
    assert [m.role for m in store.load_slot(sid).messages] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]


def test_a_draft_that_cannot_be_kept_is_said_lost_with_its_tool_results(
    store: Store, sid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note claimed the tool results were "kept ... not run again" before it knew
    whether the draft was: when it is not, it says they are lost and the tools run again.
    (A real store that cannot take it, a PostgreSQL server stopped mid-turn, is in
    tests/process/test_postgres_cli.py.)"""

    def refused(session_id: str, draft: object) -> None:
        raise StoreError("the store cannot take the draft")

    monkeypatch.setattr(store, "save_draft", refused)
    tools = Adder(tmp_path)
    with pytest.raises(AgctlError) as raised:
        send_turn(store, sid, "add 1+1", Watching([[calls({"a": 1, "b": 1}), "Two."]]),
                  options(tools))  # fmt: skip
    notes = "\n".join(raised.value.__notes__)
    assert len(tools.ran()) == 1
    assert "the draft could not be kept" in notes
    assert "the 1 tool result(s) it got are lost with it" in notes
    assert "runs the tools again" in notes and "not run again" not in notes
    assert "your prompt was:\nadd 1+1" in notes


class Signing(Watching):
    """Watching, each reply carrying a signed part as Anthropic's thinking does."""

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        part = WirePart("anthropic", {"type": "thinking", "signature": f"s{len(self.requests)}"})
        return iter([part, *super().stream(request)])


def test_a_later_step_sends_back_the_loops_wire_parts_and_marks_its_end(
    store: Store, sid: str, tmp_path: Path
) -> None:
    provider = Signing([[calls({"a": 2, "b": 3}), "5."]])
    send_turn(store, sid, "add 2+3", provider, options(Adder(tmp_path)))
    first, second = provider.requests
    # system prompt, prompt | the call, its result: the call's parts stand where it does.
    assert [m["role"] for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert first.wire_parts is None
    assert second.wire_parts == {2: {"anthropic": [{"type": "thinking", "signature": "s0"}]}}
    # The zone marks stay; the turn so far is marked too, for the next step to read.
    assert first.breakpoints == (1,)
    assert second.breakpoints == (1, 4)
    reply = store.load_slot(sid).messages[-1]
    assert reply.wire_parts == {"anthropic": [{"type": "thinking", "signature": "s1"}]}
