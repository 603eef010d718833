"""`turn send` with the gemini provider, against the fake Gemini server on loopback: what a
reply leaves on its message for Gemini alone comes back to it on the next request, and a
growing conversation's prompt is found in Gemini's implicit cache."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from fake_gemini import FakeGemini, prompt_chars
from helpers import as_json, ok

from agctl.store import Store

Run = Callable[..., Result]
KEY = "AIza-cli-test-key"
MODEL = "gemini-3-flash"
LOG = "Keep a ship's log, one line a day. " * 30
# A tool that multiplies its two arguments.
TOOL = "import json, sys; args = json.load(sys.stdin); print(args['a'] * args['b'])"
SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
)


@pytest.fixture
def gemini(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGemini]:
    """The fake, with agctl pointed at it through the environment; a test fails if it saw
    a bad request."""
    with FakeGemini(api_key=KEY, cache_min_tokens=8) as fake:
        monkeypatch.setenv("AGCTL_PROVIDER", "gemini")
        monkeypatch.setenv("AGCTL_BASE_URL", fake.base_url)
        monkeypatch.setenv("AGCTL_MODEL", MODEL)
        monkeypatch.setenv("AGCTL_API_KEY", KEY)
        yield fake
    assert fake.errors == []


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_a_signature_comes_back_and_the_next_turn_is_cached(
    run: Run, store: Store, gemini: FakeGemini, stream: str
) -> None:
    store.create_session("s1", system_prompt=LOG)
    store.set_current_session("s1")
    gemini.reply("Calm seas.", signature="bG9nLTE=")
    first = as_json(ok(run("turn", "send", "Day one?", stream, "--json")))
    assert first["usage"]["cached_tokens"] is None
    assert store.load_slot("s1", None).messages[-1].wire_parts == {
        "gemini": [{"text": True, "thoughtSignature": "bG9nLTE="}]
    }
    second = as_json(ok(run("turn", "send", "Day two?", stream, "--json")))
    assert gemini.requests[1].body["contents"][:2] == [
        {"role": "user", "parts": [{"text": "Day one?"}]},
        {"role": "model", "parts": [{"text": "Calm seas.", "thoughtSignature": "bG9nLTE="}]},
    ]
    # The whole first request was found: its system instruction and its contents.
    assert second["usage"]["cached_tokens"] == prompt_chars(gemini.requests[0].body) // 4


def test_a_tool_loop_sends_each_signed_call_back(
    run: Run, gemini: FakeGemini, tmp_path: Path
) -> None:
    """A model that signs its calls (Gemini 3) refuses a loop's next step without them."""
    gemini.require_signatures = True
    program = tmp_path / "mul.py"
    program.write_text(TOOL)
    ok(run("tool", "add", "mul", "--description", "Multiply", "--parameters", SCHEMA,
           "--", sys.executable, str(program)))  # fmt: skip
    ok(run("session", "new", "s"))
    gemini.reply(function_calls=[{"name": "mul", "args": {"a": 6, "b": 7}, "id": "fc-1"}])
    gemini.reply("It is 42.")
    data = as_json(ok(run("--json", "turn", "send", "6*7?", "-T", "mul", "--approve", "auto")))
    assert data["reply"] == "It is 42."
    step = gemini.requests[1].body
    assert step["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "mul",
                    "description": "Multiply",
                    "parametersJsonSchema": json.loads(SCHEMA),
                }
            ]
        }
    ]
    model_turn, answer = step["contents"][1:]
    assert model_turn["parts"][0]["functionCall"] == {
        "id": "fc-1",
        "name": "mul",
        "args": {"a": 6, "b": 7},
    }
    assert model_turn["parts"][0]["thoughtSignature"]
    assert answer["parts"] == [
        {"functionResponse": {"id": "fc-1", "name": "mul", "response": {"result": "42\n"}}}
    ]
