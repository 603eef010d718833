"""`turn send --schema` / `--schema-multi` and `turn replay --check-mode schema` from the
command line: a reply that does not follow is exit 11 with nothing written and the draft
kept, a list's schema, a cassette that replays a schema turn and
misses on a changed schema, and a replay check in CI that names the failing line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import as_json, fails, ok

from agctl.store import Store

Run = Callable[..., Result]
DOG = "name, age int, bio: a short bio"


def script(tmp_path: Path, *replies: Any) -> str:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps([json.dumps(r) if not isinstance(r, str) else r for r in replies]))
    return str(path)


def test_the_offline_model_answers_a_schema_with_an_instance_of_it(run: Run) -> None:
    ok(run("session", "new", "s"))
    result = as_json(run("--json", "turn", "send", "Invent a dog", "--schema", DOG))
    assert result["parsed"] == {"name": "name", "age": 0, "bio": "bio"}
    assert json.loads(result["reply"]) == result["parsed"]
    plain = as_json(run("--json", "turn", "send", "hello"))
    assert "parsed" not in plain  # a turn without a schema reports as it did


def test_schema_multi_asks_for_a_list_as_an_objects_items(run: Run, tmp_path: Path) -> None:
    ok(run("session", "new", "s"))
    dogs = {
        "items": [{"name": "Rex", "age": 3, "bio": "good"}, {"name": "Fido", "age": 1, "bio": ""}]
    }
    replies = script(tmp_path, dogs)
    result = as_json(
        run("--json", "turn", "send", "Two dogs", "--schema-multi", DOG, "--script", replies)
    )
    assert result["parsed"] == dogs
    bare = script(tmp_path, dogs["items"])  # the list itself is not what was asked for
    fails(
        run("turn", "send", "Two dogs", "--schema-multi", DOG, "--script", bare),
        11,
        "at $: [{",
        "is not of type 'object'",
    )
    fails(run("turn", "send", "x", "--schema", DOG, "--schema-multi", DOG), 2, "not both")


def test_a_reply_that_does_not_follow_is_exit_11_nothing_written_the_draft_kept(
    run: Run, store: Store, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    replies = script(tmp_path, {"name": "Rex", "age": "three", "bio": "good"})
    result = fails(
        run("turn", "send", "Invent a dog", "--schema", DOG, "--script", replies),
        11,
        "the reply does not follow the schema: at $.age: 'three' is not of type 'integer'",
        "your prompt was kept as a draft",
    )
    assert '"age": "three"' in result.stderr  # the reply is shown, not lost
    session = store.load_session("s")
    assert session.turn_count == 0 and store.load_slot("s", None).messages == []
    draft = as_json(run("--json", "draft", "show"))
    assert draft["prompt"] == "Invent a dog"
    assert json.loads(draft["reply"]) == {"name": "Rex", "age": "three", "bio": "good"}
    error = json.loads(
        run("--json", "turn", "send", "x", "--schema", DOG, "--script", replies).stderr
    )
    assert error["error"]["type"] == "ReplyInvalid" and error["error"]["exit"] == 11
    # Sent again with the schema, the draft's prompt gets a reply that follows it.
    good = script(tmp_path, {"name": "Rex", "age": 3, "bio": "good"})
    resumed = as_json(
        run("--json", "turn", "send", "--resume-draft", "--schema", DOG, "--script", good)
    )
    assert resumed["parsed"]["age"] == 3
    assert store.load_slot("s", None).messages[0].text() == "x"


def test_a_schema_that_cannot_be_used_is_exit_2_before_anything_is_sent(
    run: Run, store: Store, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    broken = tmp_path / "broken.json"
    broken.write_text("{nope")
    for given, said in (
        ("age integr", "has type 'integr'"),
        ('{"type": 7}', "is not a valid JSON Schema"),
        (str(broken), "broken.json is not valid JSON"),
        ("", "the schema is empty"),
        ('{"properties": {"a": {"$ref": "#/nope"}}}', "has a $ref '#/nope' that does not"),
    ):
        fails(run("turn", "send", "hi", "--schema", given), 2, said)
    assert store.load_session("s").turn_count == 0
    fails(run("draft", "show"), 3)  # refused before the turn: no draft either


def test_a_schema_turn_recorded_replays_and_a_changed_schema_is_a_miss(
    run: Run, wired: FakeOpenAI, tmp_path: Path, monkeypatch: Any
) -> None:
    cassette = tmp_path / "dog.cassette"
    ok(run("session", "new", "s"))
    wired.reply(json.dumps({"name": "Rex", "age": 3, "bio": "good"}))
    recorded = as_json(
        run("--json", "turn", "send", "A dog", "--schema", DOG, "--record", str(cassette))
    )
    assert wired.requests[-1].body["response_format"]["json_schema"]["strict"] is True
    for variable in ("AGCTL_PROVIDER", "AGCTL_BASE_URL", "AGCTL_API_KEY"):
        monkeypatch.delenv(variable)
    ok(run("session", "new", "again"))
    replayed = as_json(
        run("--json", "turn", "send", "A dog", "--schema", DOG, "--cassette", str(cassette))
    )
    assert replayed["parsed"] == recorded["parsed"] == {"name": "Rex", "age": 3, "bio": "good"}
    changed = "name, age float, bio: a short bio"
    fails(run("turn", "send", "A dog", "--schema", changed, "--cassette", str(cassette)), 6)
    fails(run("turn", "send", "A dog", "--cassette", str(cassette)), 6)  # nor without one
    assert len(wired.requests) == 1


def transcript(tmp_path: Path, *lines: dict[str, Any]) -> str:
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return str(path)


def test_replay_check_mode_schema_passes_when_every_reply_follows(run: Run, tmp_path: Path) -> None:
    chat = transcript(
        tmp_path,
        {"input": "A dog", "expect_schema": "name, age int"},
        {"input": "A cat", "expect_schema": {"type": "object", "required": ["lives"]}},
        {"input": "Say hi", "expect": "anything: not checked in this mode"},
    )
    replies = script(tmp_path, {"name": "Rex", "age": 3}, {"lives": 9}, "hi")
    args = ("turn", "replay", chat, "--script", replies, "--check", "--check-mode", "schema")
    result = ok(run(*args, "--new-session"))
    assert "3 turns replayed" in result.stdout and "2 checked, 2 matched" in result.stdout
    lines = [
        json.loads(line) for line in ok(run("--json", *args, "--new-session")).stdout.splitlines()
    ]
    assert [line.get("matched") for line in lines[:3]] == [True, True, None]
    assert lines[0]["expected_schema"]["required"] == ["name", "age"]


def test_replay_check_mode_schema_fails_with_exit_8_naming_the_line(
    run: Run, tmp_path: Path
) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text(
        json.dumps({"input": "A dog", "expect_schema": "name, age int"})
        + "\n\n"
        + json.dumps({"input": "Another dog", "expect_schema": "name, age int"})
        + "\n"
    )
    replies = script(tmp_path, {"name": "Rex", "age": 3}, "Sorry, I only do prose now.")
    args = ("turn", "replay", str(path), "--script", replies, "--check", "--check-mode", "schema")
    result = run(*args, "--new-session")
    assert result.exit_code == 8, result.stderr
    assert 'turn 2 (line 3): "Another dog"' in result.stderr
    assert "the reply does not follow expect_schema: the reply is not JSON" in result.stderr
    assert "1 of 2 replies differ (schema); turns: 2" in result.stderr
    summary = json.loads(run("--json", *args, "--new-session").stdout.splitlines()[-1])
    assert summary["mismatched"] == [2]


def test_an_expect_schema_that_is_not_a_schema_stops_the_replay_before_any_turn(
    run: Run, store: Store, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    chat = transcript(tmp_path, {"input": "a"}, {"input": "b", "expect_schema": {"type": "nope"}})
    fails(
        run("turn", "replay", chat, "--check", "--check-mode", "schema"), 5, "line 2: expect_schema"
    )
    assert store.load_session("s").turn_count == 0


def test_a_remote_ref_is_exit_2_never_fetched_in_a_turn_nor_a_replay_check(
    run: Run, store: Store, tmp_path: Path
) -> None:
    ok(run("session", "new", "s"))
    with FakeOpenAI() as server:
        schema = {"type": "object", "properties": {"a": {"$ref": f"{server.base_url}/a.json"}}}
        said = f"has a $ref '{server.base_url}/a.json' that does not resolve within it"
        fails(run("turn", "send", "precious", "--schema", json.dumps(schema)), 2, said)
        fails(run("draft", "show"), 3)  # refused before the turn, so nothing to keep
        chat = transcript(tmp_path, {"input": "a", "expect_schema": schema})
        check = ("--check", "--check-mode", "schema")
        fails(run("turn", "replay", chat, *check), 5, "line 1: expect_schema", said)
        assert server.requests == []
    assert store.load_session("s").turn_count == 0


def test_check_mode_given_alone_checks_as_with_check(run: Run, tmp_path: Path) -> None:
    chat = transcript(
        tmp_path, {"input": "A dog", "expect_schema": "name, age int", "expect": "woof"}
    )
    replies = script(tmp_path, "Sorry, I only do prose now.")
    for mode, said in (("schema", "the reply is not JSON"), ("contains", "woof")):
        result = run(
            "turn", "replay", chat, "--script", replies, "--check-mode", mode, "--new-session"
        )
        assert result.exit_code == 8, result.stderr
        assert said in result.stderr and f"1 of 1 replies differ ({mode})" in result.stderr
    unchecked = run("turn", "replay", chat, "--script", replies, "--new-session")
    ok(unchecked)  # no --check, no --check-mode: nothing is checked, as before
