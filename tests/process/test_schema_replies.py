"""`turn send --schema` in a real process: a reply that does not follow is exit 11, with
agctl's one error on stderr, nothing on stdout, and the draft kept for the next command."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result
from helpers import agctl_in, ok

Run = Callable[..., Result]
DOG = "name, age int, bio: a short bio"


def test_exit_11_in_a_real_process_keeps_the_draft(
    env: dict[str, str], run: Run, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["Sure! Here is your dog: Rex, 3."]))
    done = agctl_in(env, "turn", "send", "A dog", "--schema", DOG, "--script", str(replies))
    assert done.returncode == 11, done.stderr
    assert done.stderr.startswith(
        "agctl: error: the reply does not follow the schema: the reply is not JSON"
    )
    assert "Traceback" not in done.stderr and done.stdout == ""
    shown = json.loads(agctl_in(env, "--json", "draft", "show").stdout)
    assert (shown["prompt"], shown["reply"]) == ("A dog", "Sure! Here is your dog: Rex, 3.")


def test_a_ref_to_nowhere_is_exit_2_in_a_real_process_before_anything_is_sent(
    env: dict[str, str], run: Run
) -> None:
    ok(run("session", "new", "s"))
    schema = '{"type":"object","properties":{"a":{"$ref":"#/nope"}},"required":["a"]}'
    done = agctl_in(env, "turn", "send", "--schema", schema, "precious")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("agctl: error: the schema has a $ref '#/nope' that does not")
    assert "Traceback" not in done.stderr and done.stdout == ""
