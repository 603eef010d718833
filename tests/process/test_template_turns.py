"""A templated turn, run as real `agctl` processes against the fake OpenAI-compatible server
on loopback, sends exactly the bytes of the same turn typed out by hand (system prompt,
model, options, prompt), and a session made from a template sends what one made by hand
does."""

from __future__ import annotations

import json
from pathlib import Path

from fake_openai import FakeOpenAI
from helpers import agctl_process, served_env


def agctl(environ: dict[str, str], *args: str) -> str:
    done = agctl_process(environ, *args, input="")
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stdout


def test_a_templated_turn_sends_the_bytes_of_the_turn_typed_by_hand(
    env: dict[str, str], tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("Ship on Friday. Ünïcode stays.")
    with FakeOpenAI() as server:
        environ = {**env, **served_env(server.base_url), "AGCTL_API_KEY": "sk-template-test"}
        environ["AGCTL_DATA_DIR"] = env["AGCTL_DATA_DIR"]
        agctl(environ, "template", "add", "digest",
              "--system", "You write {{ style }} digests for {{ team }}.",
              "--prompt", "Digest for {{ team }}:\n{{ input }}\nEnd.",
              "--model", "digest-model", "--default", "style", "short",
              "-o", "top_p", "0.5", "-o", "stop", '["END"]', "-o", "seed", "42")  # fmt: skip

        agctl(environ, "session", "new", "templated")
        agctl(environ, "turn", "send", "-t", "digest", "-p", "team", "core", "-f", str(notes),
              "--no-stream", "Read these:")  # fmt: skip
        agctl(environ, "session", "new", "by-hand")
        prompt = f"Digest for core:\nRead these:\n\n--- {notes} ---\n{notes.read_text()}\nEnd."
        agctl(environ, "turn", "send", prompt, "--no-stream", "--model", "digest-model",
              "--system", "You write short digests for core.",
              "-o", "seed", "42", "-o", "top_p", "0.5", "-o", "stop", '["END"]')  # fmt: skip

        agctl(environ, "session", "new", "from-template", "-t", "digest", "-p", "team", "ops")
        agctl(environ, "turn", "send", "hello", "--no-stream")
        agctl(environ, "session", "new", "made-by-hand", "--system",
              "You write short digests for ops.", "--model", "digest-model")  # fmt: skip
        agctl(environ, "turn", "send", "hello", "--no-stream")
        assert server.errors == []
    templated, by_hand, from_template, made_by_hand = (r.raw for r in server.requests)
    assert templated == by_hand
    assert b'"seed":42,"stop":["END"],"top_p":0.5' in templated
    assert b"Digest for core:\\nRead these:" in templated
    assert from_template == made_by_hand


def test_turns_with_the_same_template_send_the_same_bytes_before_the_new_prompt(
    env: dict[str, str],
) -> None:
    """The provider's prompt cache needs each turn's request to begin with the bytes of the
    one before: the same system prompt, tools and options, turn after turn."""
    with FakeOpenAI() as server:
        environ = {**env, **served_env(server.base_url), "AGCTL_API_KEY": "sk-template-test"}
        agctl(environ, "template", "add", "review", "--system", "You review {{ lang }} code.",
              "--prompt", "Review {{ input }}", "--model", "m-1", "--tool", "wc",
              "-o", "seed", "7", "-o", "top_p", "0.5")  # fmt: skip
        agctl(environ, "tool", "add", "wc", "--description", "Count bytes", "--", "wc", "-c")
        agctl(environ, "session", "new", "bare")
        for code in ("a.py", "b.py"):
            agctl(environ, "turn", "send", "-t", "review", "-p", "lang", "Go", "--no-stream", code)
        agctl(environ, "session", "new", "made", "-t", "review", "-p", "lang", "Go")
        for code in ("a.py", "b.py"):  # the session's own system prompt: lang not needed
            agctl(environ, "turn", "send", "-t", "review", "--no-stream", code)
        assert server.errors == []
    first, second, made_first, made_second = (r.raw for r in server.requests)
    for one, two in ((first, second), (made_first, made_second)):
        before, after = json.loads(one), json.loads(two)
        assert after["messages"][: len(before["messages"])] == before["messages"]
        assert len(after["messages"]) == len(before["messages"]) + 2
        rest = {key: value for key, value in before.items() if key != "messages"}
        assert {key: value for key, value in after.items() if key != "messages"} == rest
        # Byte for byte: turn 2's messages go on after turn 1's, then the same tools and
        # options (the messages here hold no '}],"tools":').
        head, tail = one.split(b'}],"tools":')
        assert two.startswith(head + b"},") and two.endswith(b'}],"tools":' + tail)
    assert first == made_first and second == made_second
    assert b'"role":"system","content":"You review Go code."' in second
    assert b'"seed":7' in second and b'"top_p":0.5' in second and b'"name":"wc"' in second
