"""CI replays that run twice: `turn replay --new-session`, `session new --replace`, a
cassette miss that names the turn, and a diff for every mismatch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from agctl.base import fsio
from agctl.base.errors import InvalidInput, ReplayMiss
from agctl.store import Store
from agctl.turn.send import TurnOptions
from agctl.turn.transcripts import TranscriptTurn, fresh_session, replay

Run = Callable[..., Result]
ROOT = Path(__file__).resolve().parents[2]
EXIT_CONFLICT, EXIT_PROVIDER, EXIT_CHECK_FAILED = 4, 6, 8


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def readme_ci_snippet() -> list[str]:
    """The commands of the README's "Replay in CI" block, comments dropped."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## Replay in CI", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


# ---- --new-session ---------------------------------------------------------------------


def test_the_readme_ci_snippet_runs_twice_on_one_machine(tmp_path: Path) -> None:
    commands = readme_ci_snippet()
    assert len(commands) == 2 and all("--new-session" in c for c in commands)
    work = tmp_path / "ci"
    work.mkdir()
    transcript = [{"input": "Hello"}, {"input": "And then?"}]
    write_jsonl(work / "chat.jsonl", transcript)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "agctl").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m agctl "$@"\n')
    (bin_dir / "agctl").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    for attempt in range(2):
        for command in commands:
            done = subprocess.run(
                command, shell=True, cwd=work, env=env, capture_output=True, text=True
            )
            assert done.returncode == 0, (attempt, command, done.stdout, done.stderr)
            assert "2 turns replayed into session " in done.stdout
    store = Store(os.environ["AGCTL_DATA_DIR"])
    sessions = store.session_ids()
    assert len(sessions) == 4  # a fresh session for each of the four runs
    assert (
        store.current_session_id()
        == sorted(sessions, key=lambda s: store.load_session(s).created_at)[-1]
    )
    assert all(store.load_session(s).turn_count == 2 for s in sessions)


def test_new_session_with_an_id_and_json_names_it(run: Run, store: Store, tmp_path: Path) -> None:
    transcript = write_jsonl(tmp_path / "t.jsonl", [{"input": "one"}])
    result = ok(run("turn", "replay", str(transcript), "--new-session", "ci-1", "--json"))
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["type"] == "summary" and summary["session"] == "ci-1"
    assert store.current_session_id() == "ci-1"
    assert store.load_session("ci-1").turn_count == 1
    again = run("turn", "replay", str(transcript), "--new-session", "ci-1")
    assert again.exit_code == EXIT_CONFLICT
    assert "already exists" in again.stderr
    assert store.load_session("ci-1").turn_count == 1


def test_new_session_without_an_id_generates_one_and_no_use_keeps_the_selection(
    run: Run, store: Store, tmp_path: Path
) -> None:
    ok(run("session", "new", "mine"))
    transcript = write_jsonl(tmp_path / "t.jsonl", [{"input": "one"}, {"input": "two"}])
    first = ok(run("turn", "replay", str(transcript), "--new-session", "--no-use"))
    second = ok(run("turn", "replay", str(transcript), "--new-session", "--no-use", "--json"))
    made = re.search(r"into session (\S+) in", first.stdout)
    assert made is not None
    generated = {made.group(1), json.loads(second.stdout.splitlines()[-1])["session"]}
    assert len(generated) == 2 and "mine" not in generated
    assert set(store.session_ids()) == {"mine", *generated}
    assert store.current_session_id() == "mine"
    assert store.load_session("mine").turn_count == 0


def test_a_replay_that_cannot_start_leaves_no_new_session(
    run: Run, store: Store, tmp_path: Path
) -> None:
    transcript = write_jsonl(tmp_path / "t.jsonl", [{"input": "one"}])
    missing = tmp_path / "missing.cassette"
    result = run("turn", "replay", str(transcript), "--cassette", str(missing), "--new-session")
    assert result.exit_code == 3, (result.stdout, result.stderr)
    assert "cassette not found" in result.stderr
    assert store.session_ids() == []
    assert store.current_session_id() is None


def test_a_replay_that_fails_before_any_turn_leaves_no_session_and_the_selection(
    run: Run, store: Store, tmp_path: Path
) -> None:
    """Before: a miss on the first turn left an empty new session behind, selected."""
    assert run("session", "new", "home").exit_code == 0
    transcript = write_jsonl(tmp_path / "t.jsonl", [{"input": "one"}, {"input": "two"}])
    empty = tmp_path / "empty.cassette"
    empty.write_text("")
    args = ["turn", "replay", str(transcript), "--cassette", str(empty), "--new-session"]
    result = run(*args)
    assert result.exit_code == 6, (result.stdout, result.stderr)
    assert store.session_ids() == ["home"]
    assert store.current_session_id() == "home"
    # One that got a turn in is kept, to look at, and selected.
    recorded = tmp_path / "one.cassette"
    head = write_jsonl(tmp_path / "head.jsonl", [{"input": "one"}])
    made = run("turn", "replay", str(head), "--record", str(recorded), "--new-session", "r1")
    assert made.exit_code == 0, made.stderr
    assert (
        run(
            "turn", "replay", str(transcript), "--cassette", str(recorded), "--new-session", "r2"
        ).exit_code
        == 6
    )
    assert "r2" in store.session_ids()
    assert store.load_session("r2").turn_count == 1
    assert store.current_session_id() == "r2"


def test_fresh_session_is_destroyed_when_its_block_fails(store: Store) -> None:
    with pytest.raises(RuntimeError), fresh_session(store, "tmp") as sid:
        assert store.session_ids() == [sid] == ["tmp"]
        raise RuntimeError("set-up failed")
    assert store.session_ids() == []
    with fresh_session(store) as kept:
        pass
    assert store.session_ids() == [kept]


# ---- a cassette miss -------------------------------------------------------------------


def test_a_cassette_miss_names_the_cassette_and_the_turn_not_resume_draft(
    run: Run, store: Store, tmp_path: Path
) -> None:
    cassette = tmp_path / "chat.cassette"
    recorded = write_jsonl(tmp_path / "rec.jsonl", [{"input": "one"}, {"input": "two"}])
    ok(run("turn", "replay", str(recorded), "--record", str(cassette), "--new-session"))
    changed = write_jsonl(
        tmp_path / "changed.jsonl",
        [{"input": "one"}, {"input": "a   changed\nprompt " + "x" * 80}, {"input": "three"}],
    )
    result = run("turn", "replay", str(changed), "--cassette", str(cassette), "--new-session")
    assert result.exit_code == EXIT_PROVIDER, (result.stdout, result.stderr)
    first_line = result.stderr.splitlines()[0]
    assert first_line.startswith(
        f'agctl: error: turn 2 of 3 in {changed} ("a changed prompt xxx'
    ), first_line
    assert f"is not in the cassette: {cassette}: no recorded response" in first_line
    assert "…" in first_line  # the prompt's head only
    assert "resume-draft" not in result.stderr
    assert all(store.draft_slots(s) == [] for s in store.session_ids())


def test_the_library_raises_a_replay_miss_naming_the_turn(store: Store) -> None:
    class Missing:
        name = "replay"

        def stream(self, request: object) -> Any:
            raise ReplayMiss("c.cassette: no recorded response for request 0123")

    store.create_session("s")
    turns = [TranscriptTurn(input="hello there")]
    with pytest.raises(ReplayMiss) as raised:
        replay(store, "s", turns, Missing(), TurnOptions(model="offline"), source="t.jsonl")
    assert str(raised.value) == (
        'turn 1 of 1 in t.jsonl ("hello there") is not in the cassette: '
        "c.cassette: no recorded response for request 0123"
    )
    assert not getattr(raised.value, "__notes__", None)
    assert store.draft_slots("s") == []


# ---- a diff for every mismatch ---------------------------------------------------------


def mismatching(tmp_path: Path, count: int) -> tuple[Path, Path]:
    transcript = write_jsonl(
        tmp_path / "t.jsonl", [{"input": f"q{n}", "expect": f"want {n}"} for n in range(count)]
    )
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([f"got {n}" for n in range(count)]))
    return transcript, replies


def test_every_mismatch_gets_a_diff_then_the_summary(run: Run, tmp_path: Path) -> None:
    transcript, replies = mismatching(tmp_path, 3)
    ok(run("session", "new", "s"))
    result = run("turn", "replay", str(transcript), "--script", str(replies), "--check")
    assert result.exit_code == EXIT_CHECK_FAILED
    for n in range(3):
        assert f'turn {n + 1}: "q{n}"\n--- expected\n+++ received\n' in result.stderr
        assert f"-want {n}\n+got {n}\n" in result.stderr
    assert "more" not in result.stderr
    assert result.stdout.strip().endswith("3 checked, 0 matched, 3 differ")
    assert result.stderr.rstrip().splitlines()[-1] == (
        "agctl: error: 3 of 3 replies differ (exact); turns: 1, 2, 3"
    )


@pytest.mark.parametrize(
    ("args", "shown", "more"),
    [
        ((), 5, "2 more replies differ (turns 6, 7); --max-diffs N shows more"),
        (("--max-diffs", "6"), 6, "1 more reply differs (turns 7); --max-diffs N shows more"),
        (("--max-diffs", "0"), 0, "7 more replies differ (turns 1, 2, 3, 4, 5, 6, 7)"),
        (("--max-diffs", "7"), 7, None),
    ],
)
def test_max_diffs_caps_the_diffs_and_says_how_many_more(
    run: Run, tmp_path: Path, args: tuple[str, ...], shown: int, more: str | None
) -> None:
    transcript, replies = mismatching(tmp_path, 7)
    ok(run("session", "new", "s"))
    result = run("turn", "replay", str(transcript), "--script", str(replies), "--check", *args)
    assert result.exit_code == EXIT_CHECK_FAILED
    assert result.stderr.count("--- expected\n+++ received\n") == shown
    assert [f'turn {n + 1}: "q{n}"' in result.stderr for n in range(7)] == [
        n < shown for n in range(7)
    ]
    if more is None:
        assert "more repl" not in result.stderr
    else:
        assert more in result.stderr
        assert result.stderr.index(more) < result.stderr.index("agctl: error:")


def test_a_negative_max_diffs_is_a_usage_error(run: Run, tmp_path: Path) -> None:
    transcript, _ = mismatching(tmp_path, 1)
    result = run("turn", "replay", str(transcript), "--check", "--max-diffs", "-1")
    assert result.exit_code == 2


# ---- session new --replace -------------------------------------------------------------


def test_replace_without_an_existing_session_creates_it(run: Run, store: Store) -> None:
    result = ok(run("session", "new", "ci", "--replace", "--no-use", "--json"))
    payload = json.loads(result.stdout)
    assert (payload["id"], payload["replaced"], payload["destroyed"]) == ("ci", False, [])
    assert store.session_ids() == ["ci"]
    assert store.current_session_id() is None


def test_replace_keeps_the_selection_on_the_id_with_no_use(run: Run, store: Store) -> None:
    ok(run("session", "new", "ci"))
    ok(run("session", "new", "ci", "--replace", "--no-use"))
    assert store.current_session_id() == "ci"
    ok(run("session", "new", "other"))
    ok(run("session", "new", "ci", "--replace", "--no-use"))
    assert store.current_session_id() == "other"


def test_replace_refuses_a_session_with_children(run: Run, store: Store) -> None:
    ok(run("session", "new", "ci"))
    ok(run("msg", "append", "user", "keep me"))
    ok(run("session", "new", "kid", "--parent", "ci", "--no-use"))
    result = run("session", "new", "ci", "--replace")
    assert result.exit_code == EXIT_CONFLICT
    assert "has children: kid" in result.stderr and "--recursive" in result.stderr
    assert [m.text() for m in store.load_slot("ci").messages] == ["keep me"]
    assert store.load_session("kid").parent_id == "ci"


def test_replace_recursive_destroys_the_descendants(run: Run, store: Store) -> None:
    ok(run("session", "new", "ci"))
    ok(run("session", "new", "kid", "--parent", "ci"))
    ok(run("session", "new", "grandkid", "--parent", "kid"))
    result = ok(run("session", "new", "ci", "--replace", "-r", "--no-use", "--json"))
    payload = json.loads(result.stdout)
    assert payload["replaced"] is True
    assert sorted(payload["destroyed"]) == ["grandkid", "kid"]
    assert result.stderr == ""  # with --json, said in the payload only
    ok(run("session", "new", "kid", "--parent", "ci"))
    people = ok(run("session", "new", "ci", "--replace", "-r", "--no-use"))
    assert "agctl: destroyed kid" in people.stderr
    assert store.session_ids() == ["ci"]
    assert store.current_session_id() is None  # the current session (grandkid) is gone


def test_replace_orphan_detaches_the_children(run: Run, store: Store) -> None:
    ok(run("session", "new", "ci"))
    ok(run("session", "new", "kid", "--parent", "ci", "--no-use"))
    result = ok(run("session", "new", "ci", "--replace", "--orphan", "--json"))
    assert json.loads(result.stdout)["detached"] == ["kid"]
    assert store.load_session("kid").parent_id is None
    assert store.children("ci") == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("session", "new", "ci", "-r"), "--recursive and --orphan go with --replace"),
        (("session", "new", "--replace"), "--replace needs the ID"),
    ],
)
def test_replace_options_that_make_no_sense_are_usage_errors(
    run: Run, args: tuple[str, ...], message: str
) -> None:
    result = run(*args)
    assert result.exit_code == 2 and message in result.stderr


def test_replace_refuses_a_parent_below_the_session_it_replaces(store: Store) -> None:
    store.create_session("ci")
    store.create_session("kid", parent_id="ci")
    with pytest.raises(InvalidInput, match="loop"):
        store.replace_session("ci", orphan=True, parent_id="kid")
    assert store.load_session("kid").parent_id == "ci"


def message(text: str) -> Any:
    from agctl.context.models import Message

    return Message(role="user", content=text)


def test_exchange_paths_swaps_two_directories(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "from-a").touch()
    (second / "from-b").touch()
    if not fsio.exchange_paths(first, second):
        pytest.skip("optional: this file system cannot exchange two paths atomically")
    assert [p.name for p in first.iterdir()] == ["from-b"]
    assert [p.name for p in second.iterdir()] == ["from-a"]


def test_a_replay_into_a_replaced_session(run: Run, store: Store, tmp_path: Path) -> None:
    transcript = write_jsonl(tmp_path / "t.jsonl", [{"input": "one"}])
    for _ in range(2):
        ok(run("session", "new", "ci", "--replace"))
        ok(run("turn", "replay", str(transcript)))
    assert store.load_session("ci").turn_count == 1
    assert store.load_slot("ci").messages[0].text() == "one"


def test_the_offline_provider_is_deterministic_across_sessions(store: Store) -> None:
    """What makes a cassette recorded in one session replay in another."""
    from agctl.turn.send import prepare_turn

    store.create_session("a")
    store.create_session("b")
    options = TurnOptions(model="offline")
    fingerprints = {prepare_turn(store, s, "hi", options).request.fingerprint() for s in "ab"}
    assert len(fingerprints) == 1
