"""A templated turn, run as real `agctl` processes against the fake OpenAI-compatible server
on loopback, sends exactly the bytes of the same turn typed out by hand (system prompt,
model, options, prompt), and a session made from a template sends what one made by hand
does."""

from __future__ import annotations

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
