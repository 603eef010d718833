"""`turn send` on the three wires from the command line, against their fakes on loopback:
one session moved across wires mid-conversation (a Claude tool loop continued on Gemini
and OpenAI, then on Claude again), a cassette recorded and replayed on each wire, and
`--dry-run` printing each wire's own body and URL without the key."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from click.testing import Result
from fake_anthropic import FakeAnthropic
from fake_gemini import FakeGemini
from fake_openai import FakeOpenAI
from helpers import as_json, ok

from agctl.store import Store

Run = Callable[..., Result]
KEYS = {
    "claude": "sk-ant-wires-0123456789",
    "gem": "AIza-wires-0123456789",
    "oai": "sk-oai-wires-0123456789",
}
MULTIPLY = "import json, sys; args = json.load(sys.stdin); print(args['a'] * args['b'])"
SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
)


class Fakes(NamedTuple):
    claude: FakeAnthropic
    gem: FakeGemini
    oai: FakeOpenAI


@pytest.fixture
def fakes(run: Run, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fakes]:
    """A fake of each wire, a profile for each (its key from its own variable), and a
    session; a test fails if a fake saw a request its real service would refuse."""
    with (
        FakeAnthropic(api_key=KEYS["claude"], min_cache_tokens=16) as claude,
        FakeGemini(api_key=KEYS["gem"]) as gem,
        FakeOpenAI() as oai,
    ):
        for name, kind, fake, model in (
            ("claude", "anthropic", claude, "claude-sonnet-4-5"),
            ("gem", "gemini", gem, "gemini-2.5-flash"),
            ("oai", "openai", oai, "gpt-4o"),
        ):
            variable = f"{name.upper()}_KEY"
            monkeypatch.setenv(variable, KEYS[name])
            ok(run("profile", "add", name, "--kind", kind, "--base-url", fake.base_url,
                   "--model", model, "--api-key-env", variable))  # fmt: skip
        ok(run("session", "new", "s", "--system", "You multiply. " * 400))
        yield Fakes(claude, gem, oai)
        errors = [*claude.errors, *gem.errors, *oai.errors]
    assert errors == []


def sent(fake: FakeAnthropic | FakeGemini | FakeOpenAI) -> dict[str, Any]:
    body = fake.requests[-1].body
    assert isinstance(body, dict)
    return body


def raw(fake: FakeAnthropic | FakeGemini | FakeOpenAI) -> bytes:
    return fake.requests[-1].raw


def test_a_claude_tool_loop_goes_on_on_gemini_and_openai_and_comes_back_to_claude(
    run: Run, store: Store, fakes: Fakes, tmp_path: Path
) -> None:
    program = tmp_path / "mul.py"
    program.write_text(MULTIPLY)
    ok(run("tool", "add", "mul", "--description", "Multiply", "--parameters", SCHEMA,
           "--", sys.executable, str(program)))  # fmt: skip
    fakes.claude.reply(
        thinking="Six sevens.", tool_uses=[{"name": "mul", "input": {"a": 6, "b": 7}}]
    )
    fakes.claude.reply("42.")
    data = as_json(ok(run("--json", "turn", "send", "6*7?", "-T", "mul", "--approve", "auto",
                          "--profile", "claude")))  # fmt: skip
    assert data["reply"] == "42."
    call, result = store.load_slot("s", None).messages[1:3]
    (thinking,) = call.wire_parts["anthropic"]  # type: ignore[index]
    assert thinking["thinking"] == "Six sevens." and thinking["signature"]
    call_id = call.tool_calls[0].id  # type: ignore[index]

    # Gemini: the call and its result as its own parts, named; nothing of Claude's.
    fakes.gem.reply("Forty-two.")
    ok(run("turn", "send", "Again?", "--profile", "gem", "--no-stream"))
    contents = sent(fakes.gem)["contents"]
    assert {"functionCall": {"name": "mul", "args": {"a": 6, "b": 7}}} in contents[1]["parts"]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "mul", "response": {"result": result.content}}}
    ]
    assert b"Six sevens" not in raw(fakes.gem) and thinking["signature"].encode() not in raw(
        fakes.gem
    )

    # OpenAI: the call and result as chat completions has them, by the same id.
    fakes.oai.reply("42, thrice.")
    ok(run("turn", "send", "Once more?", "--profile", "oai", "--no-stream"))
    messages = sent(fakes.oai)["messages"]
    assert messages[2]["tool_calls"][0]["id"] == call_id
    assert messages[3] == {"role": "tool", "content": result.content, "tool_call_id": call_id}
    assert b"Six sevens" not in raw(fakes.oai) and b"wire_parts" not in raw(fakes.oai)

    # Back on Claude: the thinking goes back with the call it came with, and only there.
    fakes.claude.reply("Still 42.")
    ok(run("turn", "send", "Sure?", "--profile", "claude", "--no-stream"))
    turns = sent(fakes.claude)["messages"]
    first = turns[1]["content"]
    assert first[0] == {"type": "thinking", **{k: thinking[k] for k in ("thinking", "signature")}}
    assert [block["type"] for block in first[1:]] == ["tool_use"]
    assert sum(b"Six sevens" in json.dumps(turn).encode() for turn in turns) == 1
    shown = as_json(ok(run("--json", "ctx", "show")))
    assert shown["wire_parts"] == {"anthropic": 1}


@pytest.mark.parametrize("wire", ["claude", "gem", "oai"])
def test_a_cassette_recorded_on_each_wire_replays_offline_with_its_parts(
    run: Run, store: Store, fakes: Fakes, tmp_path: Path, wire: str
) -> None:
    cassette = tmp_path / f"{wire}.cassette"
    replies: dict[str, Callable[[str], None]] = {
        "claude": lambda text: fakes.claude.reply(text, thinking=f"about {text}"),
        "gem": lambda text: fakes.gem.reply(text, signature="c2lnbmVk"),
        "oai": lambda text: fakes.oai.reply(text, reasoning=f"about {text}"),
    }
    for text in ("One.", "Two."):
        replies[wire](text)
        ok(run("turn", "send", f"say {text}", "--profile", wire, "--record", str(cassette)))
    lines = [json.loads(line) for line in cassette.read_text().splitlines()]
    names = {"claude": "anthropic", "gem": "gemini", "oai": "openai"}
    assert {line["wire"] for line in lines} == {names[wire]}
    assert not any(KEYS[wire] in line for line in cassette.read_text().splitlines())
    recorded = store.load_slot("s", None).messages

    ok(run("session", "new", "again", "--system", "You multiply. " * 400))
    for text in ("One.", "Two."):
        ok(run("turn", "send", f"say {text}", "--profile", wire, "--cassette", str(cassette)))
    replayed = store.load_slot("again", None).messages
    assert [(m.text(), m.wire_parts) for m in replayed] == [
        (m.text(), m.wire_parts) for m in recorded
    ]
    assert (recorded[1].wire_parts is not None) == (wire != "oai")


@pytest.mark.parametrize(
    ("wire", "path", "field"),
    [
        ("claude", "/v1/messages", "messages"),
        ("gem", "/v1beta/models/gemini-2.5-flash:generateContent", "contents"),
        ("oai", "/chat/completions", "messages"),
    ],
)
def test_a_dry_run_prints_the_wires_own_body_and_url_and_never_the_key(
    run: Run, fakes: Fakes, wire: str, path: str, field: str
) -> None:
    result = ok(run("turn", "send", "hi", "--profile", wire, "--dry-run", "--no-stream"))
    shown = as_json(result)
    assert shown["url"].endswith(path)
    assert field in shown["request"]
    assert KEYS[wire] not in result.output
    if wire == "claude":  # the system prompt is a stable prefix: marked for the cache
        assert shown["request"]["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert all(fake.requests == [] for fake in fakes)
