"""Hooks at their events: a turn's start and end, its failure, each tool call before and
after, compression before and after. Every hook here is a real process (a small Python
program) that logs the payload it read and answers as the test says."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import Adder, Watching, calls

from agctl.base.errors import Blocked
from agctl.config.file import Config
from agctl.config.specs import HookSpec, ToolSpec
from agctl.context.models import Message
from agctl.providers.base import ChatRequest, Event
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.compress import compress
from agctl.turn.hooks import Hooks
from agctl.turn.send import TurnOptions, send_turn
from agctl.turn.tools import LiveTools

HOOK = """
import json, sys
payload = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps(payload) + "\\n")
code, answer = int(sys.argv[2]), sys.argv[3]
if code == 2:
    sys.stderr.write(answer)
elif answer:
    print(answer)
sys.exit(code)
"""


class Hooked:
    """Hooks built from (event, exit code, stdout) triples, each logging its payloads."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.program = tmp_path / "hook.py"
        self.program.write_text(HOOK)
        self.specs: list[HookSpec] = []

    def add(self, event: str, answer: Any = "", code: int = 0) -> Path:
        log = self.tmp_path / f"{event}-{len(self.specs)}.log"
        text = answer if isinstance(answer, str) else json.dumps(answer)
        command = [sys.executable, str(self.program), str(log), str(code), text]
        self.specs.append(HookSpec(name=f"h{len(self.specs)}", event=event, command=command))
        return log

    def hooks(self) -> Hooks:
        return Hooks(Config(hooks=self.specs), None, self.tmp_path)


def payloads(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def sid(store: Store) -> str:
    return store.create_session("s").id


@pytest.fixture
def hooked(tmp_path: Path) -> Hooked:
    return Hooked(tmp_path)


def test_turn_start_rewrites_the_prompt_and_adds_scratch_and_turn_end_sees_it(
    store: Store, sid: str, hooked: Hooked
) -> None:
    start = hooked.add("TurnStart", {"prompt": "rewritten", "scratch": ["from the hook"]})
    end = hooked.add("TurnEnd")
    provider = Watching([["Fine."]])
    result = send_turn(
        store, sid, "original", provider, TurnOptions(model="offline", hooks=hooked.hooks())
    )
    assert [m.text() for m in store.load_slot(sid).messages] == ["rewritten", "Fine."]
    sent = [m["content"] for m in provider.requests[0].messages]
    assert "from the hook" in sent and sent[-1] == "rewritten"
    (seen,) = payloads(start)
    assert seen["hook_event"] == "TurnStart" and seen["prompt"] == "original"
    assert (seen["session"], seen["slot"], seen["turn"]) == (sid, "default", 1)
    (ended,) = payloads(end)
    assert ended["reply"] == "Fine." and ended["checkpoint"] == result.checkpoint
    assert [run["event"] for run in result.to_dict()["hooks"]] == ["TurnStart", "TurnEnd"]


def test_a_turn_start_hook_that_blocks_stops_the_turn_keeping_the_prompt(
    store: Store, sid: str, hooked: Hooked
) -> None:
    hooked.add("TurnStart", "no turns on Fridays", code=2)
    failed = hooked.add("TurnError")
    with pytest.raises(Blocked) as raised:
        send_turn(
            store,
            sid,
            "hello",
            OfflineProvider(),
            TurnOptions(model="offline", hooks=hooked.hooks()),
        )
    assert raised.value.exit_code == 9 and "no turns on Fridays" in str(raised.value)
    assert store.load_slot(sid).messages == []
    assert store.load_draft(sid, "default").prompt == "hello"
    assert "no turns on Fridays" in payloads(failed)[0]["error"]


def tools_with(hooked: Hooked, tmp_path: Path, approve: str = "auto") -> tuple[Adder, LiveTools]:
    adder = Adder(tmp_path)
    command = [sys.executable, str(adder.program), str(adder.runs)]
    schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
    spec = ToolSpec(name="add", parameters=schema, command=command, approve=approve)
    return adder, LiveTools({"add": spec}, hooks=hooked.hooks())


def test_pre_tool_use_denies_a_call_and_the_model_is_told_why(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    seen = hooked.add("PreToolUse", {"decision": "deny", "reason": "not on weekends"})
    adder, tools = tools_with(hooked, tmp_path)
    send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"a": 1, "b": 2}), "ok"]]),
        TurnOptions(model="offline", tools=tools),
    )
    assert adder.ran() == []
    results = [m.text() for m in store.load_slot(sid).messages if m.role == "tool"]
    assert results == ["error: denied by a hook: not on weekends"]
    assert payloads(seen)[0]["arguments"] == {"a": 1, "b": 2}


def test_pre_tool_use_rewrites_arguments_which_are_checked_again(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    hooked.add("PreToolUse", {"arguments": {"a": 10, "b": 20}})
    adder, tools = tools_with(hooked, tmp_path)
    send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"a": 1, "b": 2}), "ok"]]),
        TurnOptions(model="offline", tools=tools),
    )
    assert adder.ran() == [{"a": 10, "b": 20}]
    (tmp_path / "bad").mkdir()
    bad = Hooked(tmp_path / "bad")
    bad.add("PreToolUse", {"arguments": {"a": "ten"}})
    adder2, tools2 = tools_with(bad, tmp_path / "bad")
    send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"a": 1, "b": 2}, prefix="z"), "ok"]] * 2),
        TurnOptions(model="offline", tools=tools2),
    )
    assert adder2.ran() == []
    last_result = [m.text() for m in store.load_slot(sid).messages if m.role == "tool"][-1]
    assert last_result.startswith("error: the arguments a hook gave are invalid")


def test_pre_tool_use_allow_runs_a_tool_set_to_ask_with_no_terminal(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    hooked.add("PreToolUse", {"decision": "allow"})
    adder, tools = tools_with(hooked, tmp_path, approve="ask")
    send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"a": 2, "b": 2}), "ok"]]),
        TurnOptions(model="offline", tools=tools),
    )
    assert adder.ran() == [{"a": 2, "b": 2}]


def test_post_tool_use_redacts_what_the_model_gets_and_what_is_kept(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    seen = hooked.add("PostToolUse", {"output": "[redacted]"})
    _, tools = tools_with(hooked, tmp_path)
    provider = Watching([[calls({"a": 40, "b": 2}), "ok"]])
    send_turn(store, sid, "add", provider, TurnOptions(model="offline", tools=tools))
    assert payloads(seen)[0]["output"].strip() == "42"
    (result,) = [m for m in store.load_slot(sid).messages if m.role == "tool"]
    assert result.text() == "[redacted]" and result.output is None
    assert provider.requests[1].messages[-1]["content"] == "[redacted]"


def long_slot(store: Store, sid: str) -> None:
    store.update_slot(
        sid,
        None,
        lambda slot: slot.extend(
            [
                Message(role="user" if n % 2 == 0 else "assistant", content=f"m{n}")
                for n in range(12)
            ]
        ),
    )


class Counting(OfflineProvider):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.asked += 1
        return super().stream(request)


def test_pre_compress_cancels_or_gives_the_summary(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    long_slot(store, sid)
    hooked.add("PreCompress", {"cancel": True})
    provider = Counting()
    done = compress(store, sid, None, keep_recent=4, provider=provider, hooks=hooked.hooks())
    assert done.cancelled and done.folded == 0 and provider.asked == 0
    assert len(store.load_slot(sid).messages) == 12
    (tmp_path / "given").mkdir()
    given = Hooked(tmp_path / "given")
    given.add("PreCompress", {"summary": "They counted to twelve."})
    done = compress(store, sid, None, keep_recent=4, provider=provider, hooks=given.hooks())
    assert provider.asked == 0 and done.folded == 8
    assert [m.text() for m in store.load_slot(sid).compressed] == ["They counted to twelve."]


def test_post_compress_rewrites_the_summary_and_keeps_fewer(
    store: Store, sid: str, hooked: Hooked
) -> None:
    long_slot(store, sid)
    seen = hooked.add("PostCompress", {"summary": "Rewritten.", "keep_recent": 2})
    done = compress(
        store, sid, None, keep_recent=4, provider=OfflineProvider(), hooks=hooked.hooks()
    )
    slot = store.load_slot(sid)
    assert [m.text() for m in slot.compressed] == ["Rewritten."]
    assert len(slot.messages) == 2 and done.kept == 2
    assert payloads(seen)[0]["summary"].startswith("Summary of")


def test_pre_tool_use_ask_asks_even_about_a_tool_set_to_auto(
    store: Store, sid: str, hooked: Hooked, tmp_path: Path
) -> None:
    """With no one to ask (no terminal), an ask fails closed: exit 9, nothing runs."""
    hooked.add("PreToolUse", {"decision": "ask"})
    adder, tools = tools_with(hooked, tmp_path, approve="auto")
    provider = Watching([[calls({"a": 1, "b": 1}), "ok"]])
    with pytest.raises(Blocked, match="needs approval"):
        send_turn(store, sid, "add", provider, TurnOptions(model="offline", tools=tools))
    assert adder.ran() == []
    asked: list[str] = []
    adder2, tools2 = tools_with(hooked, tmp_path, approve="auto")
    tools2.ask = lambda spec, arguments, argv: asked.append(spec.name) or False
    send_turn(
        store,
        sid,
        "add",
        Watching([[calls({"a": 1, "b": 1}), "ok"]]),
        TurnOptions(model="offline", tools=tools2),
    )
    assert asked == ["add"] and adder2.ran() == []
    assert [m.text() for m in store.load_slot(sid).messages if m.role == "tool"] == [
        "error: denied by the user's approval policy"
    ]
