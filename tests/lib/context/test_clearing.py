"""Tool results cleared in the request, never in the store (a slot's clear_tool_results):
which are cleared moves only in batches, so the request's prefix stays the same between
them; the stored slot is the same bytes as without clearing; every reader sees it whole."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from helpers import WARM_SETTINGS
from hypothesis import event, given
from hypothesis import strategies as st

from agctl.context.models import Message, Session, Slot, ToolCall
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider, ScriptedReply
from agctl.providers.openai import request_body
from agctl.storage.memory import MemoryBackend
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn
from agctl.turn.steps import CallRecord

STUB = "[tool result cleared: "


class Wire:
    """The offline provider, keeping the body the OpenAI wire would send for each request."""

    name = "offline"

    def __init__(self, script: list[Any]) -> None:
        self.bodies: list[bytes] = []
        self.provider = OfflineProvider(script)

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.bodies.append(request_body(request))
        return self.provider.stream(request)


class Big:
    """Tools answered in process with a result of the size their arguments ask for."""

    def definitions(self) -> list[dict[str, Any]]:
        schema = {"type": "object", "properties": {"size": {"type": "integer"}}}
        return [
            {"type": "function", "function": {"name": name, "parameters": schema}}
            for name in ("read", "plan")
        ]

    def begin_turn(self) -> None:
        pass

    def end_turn(self) -> None:
        pass

    def run(self, call: ToolCall) -> tuple[str, CallRecord]:
        size = json.loads(call.function.arguments)["size"]
        line = f"{call.function.name} {call.id}: " + "lorem ipsum dolor sit amet " * 4
        text = (line * (size // len(line) + 1))[:size]
        return text, CallRecord(call.id, call.function.name, call.function.arguments)


def script(turns: list[list[tuple[str, int]]]) -> list[Any]:
    """Each turn: one step calling the tools (name, result size), then an answer."""
    return [
        [
            ScriptedReply(
                tool_calls=[
                    {"id": f"c{n}-{i}", "name": name, "arguments": json.dumps({"size": size})}
                    for i, (name, size) in enumerate(calls)
                ]
            ),
            ScriptedReply(content=f"answer {n}"),
        ]
        for n, calls in enumerate(turns)
    ]


def run_turns(
    store: Store, turns: list[list[tuple[str, int]]], setting: dict[str, Any] | None
) -> Wire:
    store.create_session("s", system_prompt="Use the tools.")
    if setting is not None:
        store.configure_slot("s", None, {"clear_tool_results": setting})
    wire = Wire(script(turns))
    options = TurnOptions(model="offline", checkpoint=False, tools=Big(), window=100_000)
    for number in range(len(turns)):
        send_turn(store, "s", f"question {number}", wire, options)
    return wire


def sent_messages(body: bytes) -> list[dict[str, Any]]:
    return list(orjson.loads(body)["messages"])


def stubs(body: bytes) -> list[str]:
    return [
        m["tool_call_id"]
        for m in sent_messages(body)
        if m["role"] == "tool" and m["content"].startswith(STUB)
    ]


def first_requests(wire: Wire) -> list[bytes]:
    """Each turn's first request (its later steps only append the turn so far)."""
    return [body for body in wire.bodies if sent_messages(body)[-1]["role"] == "user"]


def test_cleared_results_move_in_batches_and_the_prefix_stays_between_them() -> None:
    """Between two batches each turn's request is a byte prefix of the next one's (the
    cleared results stay cleared); a batch clears at least min_tokens at once, the oldest
    results first, and keeps the last K whole."""
    turns = [[("read", 2000)] for _ in range(12)]
    setting = {"keep_last": 2, "trigger": 1500, "min_tokens": 1000}
    wire = run_turns(Store(backend=MemoryBackend()), turns, setting)
    requests = first_requests(wire)
    assert len(requests) == 12
    kept_prefix = batches = 0
    for before, after in itertools.pairwise(requests):
        cleared_before, cleared_after = stubs(before), stubs(after)
        assert cleared_after[: len(cleared_before)] == cleared_before  # stays cleared
        if cleared_after == cleared_before:
            body = request_prefix(before)
            assert request_prefix(after).startswith(body)
            kept_prefix += 1
        else:
            batches += 1
            new = len(cleared_after) - len(cleared_before)
            assert new * (2000 // 4 - 40) >= 1000  # at least min_tokens cleared at once
            assert not request_prefix(after).startswith(request_prefix(before))
    assert kept_prefix >= 5 and batches >= 2, (kept_prefix, batches)
    last = sent_messages(requests[-1])
    results = [m for m in last if m["role"] == "tool"]
    assert [m["content"].startswith(STUB) for m in results][-2:] == [False, False]
    assert results[0]["content"].startswith(STUB)


def request_prefix(body: bytes) -> bytes:
    """The body through its messages but the new input: what the next turn must keep."""
    payload = orjson.loads(body)
    start = b'{"model":' + orjson.dumps(payload["model"]) + b',"messages":['
    items = [orjson.dumps(m) for m in payload["messages"][:-1]]
    whole = start + b",".join(items)
    assert body.startswith(whole)
    return whole


def test_a_stub_names_the_tool_the_size_and_the_digest() -> None:
    """The stub keeps the call id; its text names the tool of the call with that id, the
    result's bytes and sha256, and a preview when asked; excluded tools stay whole."""
    turns = [[("read", 3000), ("plan", 3000)] for _ in range(4)]
    setting = {"keep_last": 0, "trigger": 10, "min_tokens": 0, "exclude": ["plan"], "preview": 9}
    wire = run_turns(Store(backend=MemoryBackend()), turns, setting)
    last = sent_messages(first_requests(wire)[-1])
    text = Big().run(ToolCall.model_validate(call("c0-0", "read", 3000)))[0]
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    cleared = [m for m in last if m["role"] == "tool" and m["tool_call_id"] == "c0-0"]
    said = f"read, 3000 bytes, sha256 {digest}; preview: {text[:9]}"
    assert cleared == [
        {
            "role": "tool",
            "content": f"[tool result cleared: {said}]",
            "tool_call_id": "c0-0",
        }
    ]
    plans = [m for m in last if m["role"] == "tool" and m["tool_call_id"].endswith("-1")]
    assert plans and all(len(m["content"]) == 3000 for m in plans)


def call(call_id: str, name: str, size: int) -> dict[str, Any]:
    arguments = json.dumps({"size": size})
    return {"id": call_id, "function": {"name": name, "arguments": arguments}}


def stored(store: Store) -> list[dict[str, Any]]:
    """The slot's stored messages, but the time each was written and each reply's usage
    (the prompt it reports is the smaller one clearing sends)."""
    slot = store.load_slot("s", None)
    return [m.model_dump(mode="json", exclude={"created_at", "usage"}) for m in slot.messages]


@WARM_SETTINGS
@given(
    turns=st.lists(
        st.lists(
            st.tuples(st.sampled_from(["read", "plan"]), st.integers(1, 4000)),
            min_size=1,
            max_size=3,
        ),
        min_size=1,
        max_size=6,
    ),
    keep_last=st.integers(0, 2),
    trigger=st.integers(0, 1500),
    min_tokens=st.integers(0, 1000),
    preview=st.integers(0, 50),
)
def test_clearing_never_changes_what_is_stored(
    turns: list[list[tuple[str, int]]],
    keep_last: int,
    trigger: int,
    min_tokens: int,
    preview: int,
) -> None:
    """The same turns with clearing on and off store the same messages, every tool result
    whole, and what was stored before a turn stays byte for byte after it."""
    setting = {
        "keep_last": keep_last,
        "trigger": trigger,
        "min_tokens": min_tokens,
        "preview": preview,
        "exclude": ["plan"],
    }
    on, off = Store(backend=MemoryBackend()), Store(backend=MemoryBackend())
    cleared = run_turns(on, turns, setting)
    run_turns(off, turns, None)
    event("results cleared" if any(stubs(body) for body in cleared.bodies) else "none cleared")
    assert stored(on) == stored(off)
    assert not any(STUB in str(m.get("content")) for m in stored(on))
    slot = on.load_slot("s", None)
    dumped = [m.model_dump_json() for m in slot.messages]
    # What a turn found stored is a prefix of what the next turn stores.
    again = run_more(on, setting)
    assert [m.model_dump_json() for m in again.messages][: len(dumped)] == dumped


def run_more(store: Store, setting: dict[str, Any]) -> Slot:
    """One more turn with a large result on the session `run_turns` made."""
    wire = Wire(script([[("read", 5000)]]))
    options = TurnOptions(model="offline", checkpoint=False, tools=Big(), window=100_000)
    send_turn(store, "s", "one more", wire, options)
    return store.load_slot("s", None)


def test_readers_see_the_whole_results(run: Any, isolated_env: Path) -> None:
    """msg list, msg export and search read the store: the results whole, never a stub;
    ctx show counts the cleared results and the tokens they save (text and JSON)."""
    store = Store(isolated_env)
    turns = [[("read", 4000)] for _ in range(5)]
    wire = run_turns(store, turns, {"keep_last": 1, "trigger": 100, "min_tokens": 500})
    assert stubs(first_requests(wire)[-1])
    run("session", "use", "s")
    exported = json.loads(run("msg", "export").output)
    results = [m for m in exported if m["role"] == "tool"]
    assert len(results) == 5 and all(len(m["content"]) == 4000 for m in results)
    listed = run("--json", "msg", "list").output
    assert STUB not in listed and listed.count('"role": "tool"') == 5
    wholes = [m["content"] for m in results]
    assert [m["content"] for m in json.loads(listed) if m["role"] == "tool"] == wholes
    found = json.loads(run("--json", "search", "read c0-0:").output)
    assert found and STUB not in json.dumps(found)
    shown = json.loads(run("--json", "ctx", "show", "--model", "offline").output)
    assert shown["cleared_tool_results"]["results"] == 4
    assert shown["cleared_tool_results"]["tokens_saved"] > 3000
    tool_zone = next(z for z in shown["zones"] if z["zone"] == "tool results")
    assert tool_zone["tokens"] < 1100
    text = run("ctx", "show", "--model", "offline").output
    saved = shown["cleared_tool_results"]["tokens_saved"]
    assert f"tool results cleared in the view: 4, {saved} tokens saved" in text
    # What the model sees, by the commands that show the view: the stubs.
    view = json.loads(run("--json", "slot", "show", "--view").output)["messages"]
    exported_view = json.loads(run("msg", "export", "--view").output)
    for sent in (view, exported_view):
        contents = [m["content"] for m in sent if m["role"] == "tool"]
        assert [c.startswith(STUB) for c in contents] == [True] * 4 + [False]


def test_the_html_page_shows_the_results_whole(run: Any, isolated_env: Path) -> None:
    """`session export --format html` exports the conversation: a result the slot clears
    in its view is on the page whole, in its text and in the page's data, never a stub."""
    from pagesparse import parse_page

    store = Store(isolated_env)
    turns = [[("read", 4000)] for _ in range(5)]
    wire = run_turns(store, turns, {"keep_last": 1, "trigger": 100, "min_tokens": 500})
    assert stubs(first_requests(wire)[-1])
    page = parse_page(run("session", "export", "s", "--format", "html").output)
    wholes = [m.text() for m in store.load_slot("s", None).messages if m.role == "tool"]
    assert len(wholes) == 5 and all(len(whole) == 4000 for whole in wholes)
    results = [m["text"] for m in page.data()["messages"] if m["role"] == "tool"]
    assert results == wholes
    shown = page.texts["user-text"]
    assert all(whole in shown for whole in wholes)
    assert not any(STUB in text for text in shown)


def test_a_slot_without_the_setting_sends_every_result_whole() -> None:
    """Off (the default), no result is cleared, and ctx show's count is null."""
    from agctl.context.budget import breakdown

    turns = [[("read", 4000)] for _ in range(5)]
    store = Store(backend=MemoryBackend())
    wire = run_turns(store, turns, None)
    assert not any(stubs(body) for body in wire.bodies)
    slot = store.load_slot("s", None)
    counted = breakdown(Session(id="s"), slot, model="offline", window=8192)
    assert counted.to_dict()["cleared_tool_results"] is None
    assert slot.config.model_dump(mode="json").get("clear_tool_results", "absent") == "absent"


def test_slot_set_refuses_an_unknown_field(run: Any, isolated_env: Path) -> None:
    """A typo in the setting is refused, not kept to do nothing."""
    Store(isolated_env).create_session("s")
    result = run("-s", "s", "slot", "set", "clear_tool_results", '{"keep": 2}')
    assert result.exit_code == 2 and "no field 'keep'" in result.output
    result = run("-s", "s", "--json", "slot", "set", "clear_tool_results", '{"keep_last": 1}')
    assert json.loads(result.output)["clear_tool_results"]["keep_last"] == 1


def test_messages_are_unchanged_by_the_view() -> None:
    """The view replaces results with copies; the slot's own messages stay its objects."""
    from agctl.context.clearing import clear_tool_results

    slot = Slot(id="x")
    slot.messages = [
        Message(role="user", content="go"),
        Message.model_validate({"role": "assistant", "tool_calls": [call("a", "read", 1)]}),
        Message(role="tool", tool_call_id="a", content="x" * 4000),
        Message(role="assistant", content="done"),
    ]
    before = [m.model_dump_json() for m in slot.messages]
    slot.config = slot.config.model_validate(
        {"clear_tool_results": {"keep_last": 0, "trigger": 1, "min_tokens": 1}}
    )
    clearing = clear_tool_results(slot, None)
    assert clearing is not None and clearing.positions == (2,)
    assert clearing.messages[2].text().startswith(STUB)
    assert [m.model_dump_json() for m in slot.messages] == before


def test_a_setting_written_wrong_by_hand_is_named_not_a_traceback(
    run: Any, isolated_env: Path
) -> None:
    """A stored setting no `slot set` wrote (a hand edit, another tool) is refused with
    the slot and the fix named; `none` turns clearing off again."""
    store = Store(isolated_env)
    store.create_session("s")

    def wrong(slot: Slot) -> None:
        slot.config.clear_tool_results = {"keep_last": -1}

    store.update_slot("s", None, wrong)
    result = run("-s", "s", "ctx", "show", "--model", "offline")
    assert result.exit_code == 5, result.output
    assert "slot 'default' has an invalid clear_tool_results" in result.output
    assert "keep_last" in result.output
    assert run("-s", "s", "slot", "set", "clear_tool_results", "none").exit_code == 0
    assert store.load_slot("s", None).config.clear_tool_results is None
    assert run("-s", "s", "ctx", "show", "--model", "offline").exit_code == 0
