"""The PostgreSQL store through real agctl processes: eight writers on one session lose
no turn, a server restart between two commands loses nothing, `store status`/`migrate`
see a fresh schema made, and `store copy` moves sessions file -> PostgreSQL -> file with
their checkpoint history."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pgserver import PgServer, PgStore

SID = "team"
WRITERS, TURNS = 8, 50


def agctl(
    env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agctl", *args],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def env(isolated_env: Path, pg_store: PgStore) -> dict[str, str]:
    """The offline model, this test's data dir, and AGCTL_STORE on a fresh schema."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AGCTL_", "OPENAI_"))}
    environ.update(
        AGCTL_DATA_DIR=str(isolated_env),
        AGCTL_STORE=pg_store.dsn,
        AGCTL_STORE_SCHEMA=pg_store.schema,
        PYTHONIOENCODING="utf-8",
    )
    return environ


def test_eight_writers_on_one_session_lose_no_turn(env: dict[str, str], tmp_path: Path) -> None:
    # Counting turns: no compression, which refuses (exit 4) when another writer changed
    # the slot while it summarised (its own behaviour, tested on its own).
    ok(agctl(env, "config", "set", "auto_compress", "false"))
    ok(agctl(env, "config", "set", "context_windows.offline", "100000000"))
    ok(agctl(env, "session", "new", SID))
    children = []
    for writer in range(WRITERS):
        transcript = tmp_path / f"writer{writer}.jsonl"
        transcript.write_text(
            "".join(json.dumps({"input": f"w{writer} t{n}"}) + "\n" for n in range(TURNS))
        )
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "agctl", "-s", SID, "turn", "replay", str(transcript)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for child in children:
        _, errors = child.communicate(timeout=600)
        assert child.returncode == 0, errors
    session = json.loads(ok(agctl(env, "-s", SID, "session", "show", "--json")))
    assert session["turn_count"] == WRITERS * TURNS
    listed = json.loads(ok(agctl(env, "-s", SID, "msg", "list", "--json")))
    prompts = [m["content"] for m in listed if m["role"] == "user"]
    assert len(prompts) == WRITERS * TURNS
    for writer in range(WRITERS):
        mine = [p for p in prompts if p.startswith(f"w{writer} ")]
        assert mine == [f"w{writer} t{n}" for n in range(TURNS)]
    assert ok(agctl(env, "-s", SID, "ckpt", "verify"))


def test_a_server_restart_between_two_commands_loses_nothing(
    env: dict[str, str], pg_server: PgServer
) -> None:
    ok(agctl(env, "session", "new", SID))
    ok(agctl(env, "-s", SID, "turn", "send", "before the restart"))
    pg_server.restart()
    ok(agctl(env, "-s", SID, "turn", "send", "after the restart"))
    listed = json.loads(ok(agctl(env, "-s", SID, "msg", "list", "--json")))
    assert [m["content"] for m in listed if m["role"] == "user"] == [
        "before the restart",
        "after the restart",
    ]


def test_status_and_migrate_of_a_fresh_schema(env: dict[str, str]) -> None:
    from agctl.storage.postgres.schema import VERSION

    before = json.loads(ok(agctl(env, "store", "status", "--json")))
    assert (before["kind"], before["version"], before["state"]) == ("postgresql", 0, "behind")
    assert "behind" in ok(agctl(env, "store", "status"))
    migrated = json.loads(ok(agctl(env, "store", "migrate", "--json")))
    assert migrated["migrated"] == list(range(1, VERSION + 1))
    assert json.loads(ok(agctl(env, "store", "migrate", "--json")))["migrated"] == []
    after = json.loads(ok(agctl(env, "store", "status", "--json")))
    assert (after["version"], after["state"], after["sessions"]) == (VERSION, "ok", 0)


def test_a_schema_from_a_newer_agctl_is_refused_with_both_versions(
    env: dict[str, str], pg_server: PgServer, pg_database: str, pg_store: PgStore
) -> None:
    from agctl.storage.postgres.schema import VERSION

    ok(agctl(env, "store", "migrate"))
    pg_server.execute(
        f"UPDATE \"{pg_store.schema}\".meta SET value = '{VERSION + 1}' WHERE key = 'version'",
        pg_database,
    )
    for args in (["store", "status"], ["session", "list"]):
        done = agctl(env, *args)
        assert done.returncode == 5, done.stderr
        assert f"version {VERSION + 1}" in done.stderr and f"up to {VERSION}" in done.stderr


def test_store_copy_file_to_postgres_to_file_keeps_the_history(
    env: dict[str, str], tmp_path: Path
) -> None:
    files = {k: v for k, v in env.items() if k not in ("AGCTL_STORE", "AGCTL_STORE_SCHEMA")}
    source, back = tmp_path / "source", tmp_path / "back"
    on_source = {**files, "AGCTL_STORE": str(source)}
    ok(agctl(on_source, "session", "new", SID))
    for text in ("one", "two", "three"):
        ok(agctl(on_source, "-s", SID, "turn", "send", text))
    listed = json.loads(ok(agctl(on_source, "-s", SID, "ckpt", "list", "--json")))
    oldest, first_turn = listed[-1]["id"], listed[-2]["id"]
    ok(agctl(on_source, "-s", SID, "msg", "edit", "0", "ONE"))
    ok(agctl(on_source, "-s", SID, "ckpt", "rollback", first_turn))
    ok(agctl(on_source, "-s", SID, "turn", "send", "after the rollback"))
    ok(agctl(on_source, "-s", SID, "ckpt", "fork", oldest, "--id", "fork"))
    shared = env["AGCTL_STORE"]
    copied = json.loads(ok(agctl(env, "store", "copy", str(source), shared, "--json")))
    assert [(s["id"], s["outcome"]) for s in copied["sessions"]] == [
        (SID, "copied"),  # the parent before its fork
        ("fork", "copied"),
    ]
    history = copied["sessions"][0]["checkpoints"]
    assert oldest in history and len(history) >= 3
    again = json.loads(ok(agctl(env, "store", "copy", str(source), shared, "--json")))
    assert [s["outcome"] for s in again["sessions"]] == ["skipped", "skipped"]
    ok(agctl(env, "store", "copy", shared, str(back)))

    def export(where: dict[str, str], sid: str) -> str:
        return ok(agctl(where, "-s", sid, "session", "export", "--checkpoints"))

    # Byte for byte: an export says nothing of the store it was read from.
    on_back = {**files, "AGCTL_STORE": str(back)}
    for sid in (SID, "fork"):
        assert export(env, sid) == export(on_source, sid)
        assert export(on_back, sid) == export(on_source, sid)
    exported = tmp_path / "exported.json"
    exported.write_text(export(env, SID))
    on_again = {**files, "AGCTL_STORE": str(tmp_path / "again")}
    ok(agctl(on_again, "session", "import", str(exported)))
    assert export(on_again, SID) == exported.read_text()
    same = agctl(env, "store", "copy", shared, shared)
    assert same.returncode == 2 and "same store" in same.stderr


def test_store_copy_of_a_damaged_session_copies_the_others_and_exits_5(
    env: dict[str, str], tmp_path: Path
) -> None:
    files = {k: v for k, v in env.items() if k not in ("AGCTL_STORE", "AGCTL_STORE_SCHEMA")}
    source = tmp_path / "source"
    on_source = {**files, "AGCTL_STORE": str(source)}
    for sid in ("before", "broken", "later"):
        ok(agctl(on_source, "session", "new", sid))
        ok(agctl(on_source, "-s", sid, "turn", "send", "hello"))
    slot = source / "sessions" / "broken" / "slots" / "default.json"
    slot.write_bytes(slot.read_bytes()[:20])  # a slot file cut short
    shared = env["AGCTL_STORE"]
    done = agctl(env, "store", "copy", str(source), shared, "--json")
    assert done.returncode == 5, done.stderr
    outcomes = json.loads(done.stdout)["sessions"]
    assert [(s["id"], s["outcome"]) for s in outcomes] == [
        ("before", "copied"),
        ("broken", "failed"),
        ("later", "copied"),
    ]
    assert outcomes[1]["error"]["exit"] == 5 and str(slot) in outcomes[1]["error"]["message"]
    error = json.loads(done.stderr)["error"]
    assert (error["exit"], error["type"]) == (5, "DataError") and "(broken)" in error["message"]
    assert error["notes"] == [f"session 'broken': {slot}: not valid JSON"]
    listed = json.loads(ok(agctl(env, "session", "list", "--json")))
    assert sorted(s["id"] for s in listed) == ["before", "later"]
    back = tmp_path / "back"
    plain = agctl(env, "store", "copy", str(source), str(back))
    assert plain.returncode == 5
    assert "copied   before" in plain.stdout and "failed   broken" in plain.stdout
    assert f"agctl: session 'broken': {slot}: not valid JSON" in plain.stderr
    on_back = {**files, "AGCTL_STORE": str(back)}
    listed = json.loads(ok(agctl(on_back, "session", "list", "--json")))
    assert sorted(s["id"] for s in listed) == ["before", "later"]
    for where in (env, on_back):
        for sid in ("before", "later"):
            exported = ok(agctl(where, "-s", sid, "session", "export", "--checkpoints"))
            original = ok(agctl(on_source, "-s", sid, "session", "export", "--checkpoints"))
            assert exported == original
            ok(agctl(where, "-s", sid, "ckpt", "verify"))
