"""agctl.context.cache: the request view keeps a provider's prefix cache warm by construction.

Providers cache the longest unchanged prefix of a request's bytes. These properties run
random sequences of commands through the library (real store, offline provider) and
compare the bodies agctl's OpenAI wire would send (agctl.providers.openai.request_body):
appends keep the prefix, focused mode moves in strides, a memory change keeps the
history, forks and derived slots start with their parent's bytes.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from helpers import WARM_SETTINGS
from helpers import utf8_texts as texts
from hypothesis import given
from hypothesis import strategies as st

from agctl.context.cache import cache_outlook
from agctl.context.models import Message, ToolCall, ToolCallFunction
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.providers.openai import request_body
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn

SYSTEM = "You are terse. Today's rules: answer in one line."
OPTIONS = TurnOptions(model="offline", checkpoint=False)


class Wire:
    """The offline provider, keeping the body the OpenAI wire would send for each request."""

    name = "offline"

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.provider = OfflineProvider()

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.bodies.append(request_body(request, cache_key=True))
        return self.provider.stream(request)


def messages_bytes(body: bytes, count: int | None = None) -> bytes:
    """The body from its start through its first `count` messages (all when None): what
    a provider's prefix cache compares, checked to be the body's own bytes."""
    payload = orjson.loads(body)
    start = b'{"model":' + orjson.dumps(payload["model"]) + b',"messages":['
    assert body.startswith(start)
    items = [orjson.dumps(m) for m in payload["messages"]]
    listed = b",".join(items)
    assert body[len(start) : len(start) + len(listed) + 1] == listed + b"]"
    kept = items if count is None else items[:count]
    return start + b",".join(kept)


@contextmanager
def fresh_store() -> Iterator[Store]:
    root = tempfile.mkdtemp(prefix="agctl-warm-")
    try:
        yield Store(Path(root) / "data")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def tool_round(number: int) -> list[Message]:
    """An assistant message calling a tool and the tool's result."""
    call = ToolCall(
        id=f"call_{number}", function=ToolCallFunction(name="ls", arguments='{"path": "."}')
    )
    return [
        Message(role="assistant", content=None, tool_calls=[call]),
        Message(role="tool", tool_call_id=f"call_{number}", content=f"a.py b{number}.py"),
    ]


# A command between turns: a turn, a tool round appended, a memory change.
commands = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), texts),
        st.tuples(st.just("tools"), st.integers(0, 99)),
        st.tuples(st.just("memory"), texts),
    ),
    min_size=2,
    max_size=12,
)


def run_commands(store: Store, wire: Wire, steps: list[tuple[str, Any]]) -> list[int]:
    """Run `steps` on session "s"; the index in wire.bodies of each turn's request."""
    sent = []
    for kind, value in steps:
        if kind == "turn":
            send_turn(store, "s", value, wire, OPTIONS)
            sent.append(len(wire.bodies) - 1)
        elif kind == "tools":
            store.update_slot("s", None, lambda s, v=value: s.messages.extend(tool_round(v)))
        else:
            store.memory_set("s", "note", value)
    return sent


@WARM_SETTINGS
@given(steps=commands, memory_in_context=st.booleans(), immutable=st.booleans())
def test_full_mode_requests_only_grow_at_their_end(
    steps: list[tuple[str, Any]], memory_in_context: bool, immutable: bool
) -> None:
    """Each turn's request, up to where memory enters it, is a byte prefix of the next
    turn's: whatever happened between them (appended tool rounds, memory changes); with
    no memory in context the whole request, its new input included, is."""
    with fresh_store() as store:
        store.create_session("s", system_prompt=SYSTEM)
        store.memory_set("s", "user", "Ada")
        store.update_session("s", lambda s: setattr(s, "memory_in_context", memory_in_context))
        if immutable:
            store.update_slot(
                "s", None, lambda s: s.immutable.append(Message(role="system", content="Rules."))
            )
        wire = Wire()
        sent = run_commands(store, wire, [("turn", "first"), *steps, ("turn", "last")])
        for before, after in itertools.pairwise(sent):
            count = len(orjson.loads(wire.bodies[before])["messages"])
            kept = count - 2 if memory_in_context else count  # memory and the new input
            assert messages_bytes(wire.bodies[after]).startswith(
                messages_bytes(wire.bodies[before], kept)
            )


def test_a_memory_change_keeps_the_history_bytes() -> None:
    """`memory set` between turns: the next request begins with every byte of the last
    one's history (system prompt, immutable zone, messages); only memory and the new
    input follow them."""
    with fresh_store() as store:
        store.create_session("s", system_prompt=SYSTEM)
        store.update_session("s", lambda s: setattr(s, "memory_in_context", True))
        store.memory_set("s", "user", "Ada")
        wire = Wire()
        run_commands(store, wire, [("turn", "one"), ("turn", "two")])
        store.memory_set("s", "user", "Grace")
        run_commands(store, wire, [("turn", "three")])
        before, after = (orjson.loads(body)["messages"] for body in wire.bodies[1:])
        history = len(before) - 2
        assert after[:history] == before[:history]
        assert messages_bytes(wire.bodies[2]).startswith(messages_bytes(wire.bodies[1], history))
        assert "Ada" in before[-2]["content"] and before[-1]["content"] == "two"
        assert "Grace" in after[-2]["content"] and after[-1]["content"] == "three"
        assert [m["role"] for m in after[history:-2]] == ["user", "assistant"]


@WARM_SETTINGS
@given(
    recent=st.integers(1, 12),
    stride=st.integers(1, 16),
    keep_system=st.booleans(),
    summary=st.one_of(st.none(), texts),
    rounds=st.lists(st.booleans(), min_size=4, max_size=30),
)
def test_focused_mode_moves_in_strides(
    recent: int, stride: int, keep_system: bool, summary: str | None, rounds: list[bool]
) -> None:
    """The focused window keeps at least `recent` messages and at most `stride` - 1 more
    (one more to keep a tool call with its result); it drops old messages `stride` at a
    time, so a request's bytes stay a prefix of the next one's except when it moves, at
    most once per `stride` messages added; the system prompt, the kept system message
    and the summary lead every request."""
    with fresh_store() as store:
        store.create_session("s", system_prompt=SYSTEM)
        rules = Message(role="system", content="Kept rules.")
        store.update_slot("s", None, lambda s: s.messages.append(rules))
        focus = {"recent_messages": recent, "stride": stride, "keep_system": keep_system}
        store.set_mode("s", None, "focused", focus={**focus, "summary_override": summary})
        head = 1 + keep_system + (summary is not None)
        wire = Wire()
        added = 0
        for number, with_tools in enumerate(rounds):
            if with_tools:
                store.update_slot("s", None, lambda s, n=number: s.messages.extend(tool_round(n)))
                added += 2
            droppable = len(store.load_slot("s").messages) - keep_system
            send_turn(store, "s", f"question {number}", wire, OPTIONS)
            added += 2
            shown = len(orjson.loads(wire.bodies[-1])["messages"]) - head - 1
            assert min(recent, droppable) <= shown <= recent + stride
            assert messages_bytes(wire.bodies[-1]).startswith(messages_bytes(wire.bodies[0], head))
        moves = sum(
            not messages_bytes(after).startswith(messages_bytes(before))
            for before, after in itertools.pairwise(wire.bodies)
        )
        assert moves <= added // stride + 1


def cache_key_of(body: bytes) -> str:
    key = orjson.loads(body)["prompt_cache_key"]
    assert isinstance(key, str) and key.startswith("agctl-")
    return key


@WARM_SETTINGS
@given(prompts=st.lists(texts, min_size=2, max_size=6), data=st.data())
def test_a_fork_starts_with_its_parents_bytes_and_key(prompts: list[str], data: Any) -> None:
    """`ckpt fork` at turn j: the fork's first request begins with every byte of the
    parent's request at turn j (and equals, up to the new input, the request the parent
    sent after it), under the parent's prompt_cache_key; so does a fork of the fork."""
    with fresh_store() as store:
        store.create_session("s", system_prompt=SYSTEM)
        store.update_slot(
            "s", None, lambda s: s.immutable.append(Message(role="system", content="Rules."))
        )
        wire = Wire()
        options = TurnOptions(model="offline")  # checkpointed after each turn
        for prompt in prompts:
            send_turn(store, "s", prompt, wire, options)
        keys = {cache_key_of(body) for body in wire.bodies}
        assert len(keys) == 1
        turn = data.draw(st.integers(1, len(prompts) - 1), label="fork at turn")
        checkpointer = Checkpointer(store)
        fork = checkpointer.fork("s", checkpointer.checkpoint_at_turn("s", turn).id, "f")
        send_turn(store, fork.id, prompts[turn], wire, options)
        first = wire.bodies[-1]
        assert messages_bytes(first).startswith(messages_bytes(wire.bodies[turn - 1]))
        assert messages_bytes(first) == messages_bytes(wire.bodies[turn])
        assert cache_key_of(first) in keys
        again = checkpointer.fork(fork.id, checkpointer.checkpoint_at_turn(fork.id, turn).id)
        send_turn(store, again.id, "and again", wire, options)
        assert messages_bytes(wire.bodies[-1]).startswith(messages_bytes(wire.bodies[turn - 1]))
        assert cache_key_of(wire.bodies[-1]) in keys


@WARM_SETTINGS
@given(prompts=st.lists(texts, min_size=1, max_size=5), tools=st.booleans())
def test_a_full_derived_slot_starts_with_its_parents_bytes_and_key(
    prompts: list[str], tools: bool
) -> None:
    """`slot derive` (full): the new slot's first request begins with every byte of the
    parent's last request, under the parent's prompt_cache_key; a slot derived from it
    too. Another slot, not derived, has a key of its own."""
    with fresh_store() as store:
        store.create_session("s", system_prompt=SYSTEM)
        wire = Wire()
        for number, prompt in enumerate(prompts):
            if tools:
                store.update_slot("s", None, lambda s, n=number: s.messages.extend(tool_round(n)))
            send_turn(store, "s", prompt, wire, OPTIONS)
        parent = wire.bodies[-1]
        store.derive_slot("s", "b")
        store.derive_slot("s", "c", source="b")
        outlook = cache_outlook(store.load_session("s"), store.load_slot("s", "b"), model="offline")
        assert outlook.cached_messages == outlook.last_sent == len(orjson.loads(parent)["messages"])
        for slot in ("b", "c"):
            send_turn(store, "s", "on the branch", wire, TurnOptions(model="offline", slot=slot))
            assert messages_bytes(wire.bodies[-1]).startswith(messages_bytes(parent))
            assert cache_key_of(wire.bodies[-1]) == cache_key_of(parent)
        store.create_slot("s", "other")
        send_turn(store, "s", "elsewhere", wire, TurnOptions(model="offline", slot="other"))
        assert cache_key_of(wire.bodies[-1]) != cache_key_of(parent)


def common_messages(before: bytes, after: bytes) -> int:
    """How many leading messages two bodies share, byte for byte (model and tools equal)."""
    old, new = orjson.loads(before), orjson.loads(after)
    if (old["model"], old.get("tools")) != (new["model"], new.get("tools")):
        return 0
    shared = 0
    for a, b in zip(old["messages"], new["messages"], strict=False):
        if orjson.dumps(a) != orjson.dumps(b):
            break
        shared += 1
    return shared


edits = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), texts),
        st.tuples(st.just("tools"), st.integers(0, 99)),
        st.tuples(st.just("memory"), texts),
        st.tuples(st.just("edit"), st.integers(0, 40)),
    ),
    min_size=1,
    max_size=14,
)


@WARM_SETTINGS
@given(steps=edits, memory_in_context=st.booleans())
def test_the_cache_outlook_finds_the_prefix_the_last_request_shares(
    steps: list[tuple[str, Any]], memory_in_context: bool
) -> None:
    """What `ctx show --cache` expects from the cache is never more than the next
    request's bytes share with the last one sent on the slot, more than half of it, and
    all of it when the next request only appends (a slot keeps a few marks of the last
    request, not a hash per message)."""
    from agctl.turn.send import prepare_turn

    with fresh_store() as store:
        store.create_session("s", system_prompt=SYSTEM)
        store.update_session("s", lambda s: setattr(s, "memory_in_context", memory_in_context))
        store.memory_set("s", "user", "Ada")
        wire = Wire()
        run_commands(store, wire, [("turn", f"turn {n}") for n in range(6)])
        for kind, value in steps:
            if kind == "edit":
                slot = store.load_slot("s")
                index = value % len(slot.messages)
                if slot.messages[index].content is not None:
                    store.update_slot("s", None, lambda s, i=index: s.edit(i, "edited"))
            else:
                run_commands(store, wire, [(kind, value)])
        next_body = request_body(prepare_turn(store, "s", "next", OPTIONS).request)
        shared = common_messages(wire.bodies[-1], next_body)
        outlook = cache_outlook(
            store.load_session("s"),
            store.load_slot("s"),
            model="offline",
            user_input=Message(role="user", content="next"),
        )
        sent = len(orjson.loads(wire.bodies[-1])["messages"])
        assert outlook.last_sent == sent
        assert outlook.cached_messages <= shared
        if shared:
            assert outlook.cached_messages > shared // 2
        if shared == sent:
            assert outlook.cached_messages == sent
        if outlook.cached_messages == 0:
            assert outlook.cached_tokens == 0


@WARM_SETTINGS
@given(
    turns=st.integers(1, 10),
    keep_recent=st.integers(0, 8),
    strategy=st.sampled_from(["summarize", "truncate"]),
    leading_system=st.booleans(),
    immutable=st.booleans(),
)
def test_a_compression_changes_the_request_only_from_the_compressed_zone_on(
    turns: int, keep_recent: int, strategy: str, leading_system: bool, immutable: bool
) -> None:
    """A compression keeps the bytes of the request before the compressed zone (a
    truncation: before its first folded message), and its preview says exactly how many
    tokens stay cached and how many it invalidates."""
    from agctl.turn.compress import compress, preview_compression
    from agctl.turn.send import prepare_turn

    with fresh_store() as store:
        store.create_session("s", system_prompt=SYSTEM)
        if immutable:
            store.update_slot(
                "s", None, lambda s: s.immutable.append(Message(role="system", content="Rules."))
            )
        if leading_system:
            first = Message(role="system", content="Kept rules.")
            store.update_slot("s", None, lambda s: s.messages.append(first))
        wire = Wire()
        run_commands(store, wire, [("turn", f"question {n}") for n in range(turns)])

        def next_request() -> tuple[bytes, list[Message]]:
            prepared = prepare_turn(store, "s", "next", OPTIONS)
            return request_body(prepared.request), prepared.view

        before, messages = next_request()
        preview = preview_compression(
            store,
            "s",
            None,
            strategy=strategy,
            keep_recent=keep_recent,  # type: ignore[arg-type]
        )
        done = compress(
            store,
            "s",
            None,
            strategy=strategy,  # type: ignore[arg-type]
            keep_recent=keep_recent,
            provider=wire,
            checkpoint=False,
        )
        assert done.folded == preview.folded
        after, _ = next_request()
        shared = min(common_messages(before, after), len(messages) - 1)  # the input aside
        history = sum(m.token_count() for m in messages[:-1])
        assert preview.cached_kept == sum(m.token_count() for m in messages[:shared])
        assert preview.cached_kept + preview.invalidated == history
        if done.folded:
            assert shared < len(messages) - 1


class Echo:
    """A ToolBox with one tool, answered in process: the result names the arguments."""

    def definitions(self) -> list[dict[str, Any]]:
        schema = {"type": "object", "properties": {"x": {"type": "number"}}}
        return [{"type": "function", "function": {"name": "echo", "parameters": schema}}]

    def begin_turn(self) -> None:
        pass

    def end_turn(self) -> None:
        pass

    def run(self, call: ToolCall) -> tuple[str, Any]:
        from agctl.turn.steps import CallRecord

        record = CallRecord(call.id, call.function.name, call.function.arguments)
        return f"echo {call.function.arguments}", record


replies = st.lists(
    st.tuples(
        st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=2),
        st.one_of(st.none(), texts),  # reasoning
        st.one_of(st.none(), texts),  # text beside the calls
    ),
    min_size=1,
    max_size=3,
)


@WARM_SETTINGS
@given(turns=st.lists(replies, min_size=2, max_size=4))
def test_tool_loops_only_grow_the_request_at_its_end(turns: list[list[Any]]) -> None:
    """Every request a tool loop sends, and the next turn's first, begins with every byte
    of the request before it: a reply and its tool results read back from the store
    serialise as they were sent (reasoning left out, numbers and key order kept)."""
    from agctl.providers.offline import ScriptedReply

    script: list[Any] = []
    for number, steps in enumerate(turns):
        turn = []
        for step, (numbers, reasoning, text) in enumerate(steps):
            tool_calls = [
                {
                    "id": f"c{number}-{step}-{n}",
                    "name": "echo",
                    "arguments": orjson.dumps({"x": x}).decode(),
                }
                for n, x in enumerate(numbers)
            ]
            turn.append(ScriptedReply(content=text, reasoning=reasoning, tool_calls=tool_calls))
        turn.append(ScriptedReply(content=f"answer {number}", reasoning="thought"))
        script.append(turn)
    with fresh_store() as store:
        store.create_session("s", system_prompt=SYSTEM)
        wire = Wire()
        wire.provider = OfflineProvider(script)
        options = TurnOptions(model="offline", checkpoint=False, tools=Echo())
        for number in range(len(turns)):
            send_turn(store, "s", f"question {number}", wire, options)
        for before, after in itertools.pairwise(wire.bodies):
            assert messages_bytes(after).startswith(messages_bytes(before))
