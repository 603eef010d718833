"""The PostgreSQL store through real agctl processes: eight writers on one session lose
no turn, a server restart between two commands loses nothing, `store status`/`migrate`
see a fresh schema made, and `store copy` moves sessions file -> PostgreSQL -> file with
their checkpoint history."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import time
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


# ---- a schema another role owns -------------------------------------------------------


def as_role(url: str, role: str, **params: str) -> str:
    """`url` (the test server's, as its superuser) connecting as `role` instead."""
    from pgserver import ROLE

    url = url.replace(f"postgresql://{ROLE}@", f"postgresql://{role}@", 1)
    return url + "".join(f"&{key}={value}" for key, value in params.items())


@pytest.fixture
def squatted(
    env: dict[str, str], pg_server: PgServer, pg_database: str, pg_store: PgStore
) -> tuple[str, str]:
    """An attacker role that made the store's schema first (with `agctl store migrate`,
    as itself) and granted the victim role all it needs to use it, as a squatter would:
    (attacker, victim). Neither is a superuser; both may create schemas."""
    attacker, victim = f"mallory_{pg_store.schema}", f"victim_{pg_store.schema}"
    pg_server.execute(
        f"CREATE ROLE {attacker} LOGIN; CREATE ROLE {victim} LOGIN; "
        f"GRANT CREATE ON DATABASE {pg_database} TO {attacker}, {victim}",
        pg_database,
    )
    ok(agctl({**env, "AGCTL_STORE": as_role(pg_store.dsn, attacker)}, "store", "migrate"))
    pg_server.execute(
        f"SET ROLE {attacker}; "
        f"GRANT USAGE ON SCHEMA {pg_store.schema} TO {victim}; "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {pg_store.schema} "
        f"TO {victim}; "
        f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {pg_store.schema} TO {victim}; "
        f"GRANT USAGE ON SCHEMA {pg_store.schema} TO PUBLIC",
        pg_database,
    )
    return attacker, victim


def test_a_schema_another_role_made_first_is_refused_naming_its_owner(
    env: dict[str, str], squatted: tuple[str, str], pg_store: PgStore
) -> None:
    attacker, victim = squatted
    mine = {**env, "AGCTL_STORE": as_role(pg_store.dsn, victim)}
    for args in (["session", "new", SID], ["session", "list"], ["store", "migrate"]):
        done = agctl(mine, *args)
        assert done.returncode == 5, (args, done.stderr)
        assert f"owned by role '{attacker}'" in done.stderr
        assert "shared_schema_owner" in done.stderr


def test_a_shared_schema_is_used_when_its_owner_is_named_in_the_url_or_the_config(
    env: dict[str, str], squatted: tuple[str, str], pg_store: PgStore
) -> None:
    attacker, victim = squatted
    named = {**env, "AGCTL_STORE": as_role(pg_store.dsn, victim, shared_schema_owner=attacker)}
    ok(agctl(named, "session", "new", SID))
    ok(agctl(named, "-s", SID, "turn", "send", "into the shared schema"))
    configured = {**env, "AGCTL_STORE": as_role(pg_store.dsn, victim)}
    ok(agctl(configured, "config", "set", "store.shared_schema_owner", attacker))
    listed = json.loads(ok(agctl(configured, "-s", SID, "msg", "list", "--json")))
    assert [m["content"] for m in listed if m["role"] == "user"] == ["into the shared schema"]
    other = agctl({**named, "AGCTL_STORE": as_role(pg_store.dsn, victim, shared_schema_owner="x")},
                  "session", "list")  # fmt: skip
    assert other.returncode == 5 and f"owned by role '{attacker}'" in other.stderr


def test_status_shows_the_owner_and_who_else_may_read(
    env: dict[str, str], squatted: tuple[str, str], pg_store: PgStore
) -> None:
    attacker, victim = squatted
    mine = {**env, "AGCTL_STORE": as_role(pg_store.dsn, victim)}
    refused = agctl(mine, "store", "status")
    assert refused.returncode == 5, refused.stderr
    assert f"owner: {attacker} (not {victim} or a role of it: refused)" in refused.stdout
    assert f"owned by role '{attacker}'" in refused.stderr
    others = refused.stdout.split("others who may read: ", 1)[1]
    assert "PUBLIC (USAGE on the schema)" in others
    assert f"{victim} (USAGE on the schema, SELECT on 7 table(s))" in others
    shared = {**mine, "AGCTL_STORE": as_role(pg_store.dsn, victim, shared_schema_owner=attacker)}
    data = json.loads(ok(agctl(shared, "store", "status", "--json")))
    access = data["access"]
    assert (access["user"], access["owner"], access["access"]) == (victim, attacker, "shared")
    readers = {r["role"]: r for r in access["readers"]}
    assert set(readers) == {"PUBLIC", victim}
    assert readers["PUBLIC"] == {"role": "PUBLIC", "schema_usage": True, "tables": []}
    assert readers[victim]["schema_usage"] and "sessions" in readers[victim]["tables"]
    assert data["sessions"] == 0


def test_ones_own_schema_is_used_and_private(
    env: dict[str, str], squatted: tuple[str, str], pg_store: PgStore
) -> None:
    _attacker, victim = squatted
    mine = {**env, "AGCTL_STORE": as_role(pg_store.dsn, victim),
            "AGCTL_STORE_SCHEMA": f"{pg_store.schema}_own"}  # fmt: skip
    before = json.loads(ok(agctl(mine, "store", "status", "--json")))["access"]
    assert (before["owner"], before["access"]) == (None, "none")
    ok(agctl(mine, "session", "new", SID))
    ok(agctl(mine, "-s", SID, "turn", "send", "mine"))
    status = agctl(mine, "store", "status")
    assert status.returncode == 0, status.stderr
    assert f"owner: {victim} (you)" in status.stdout
    assert "others who may read: none" in status.stdout
    access = json.loads(ok(agctl(mine, "store", "status", "--json")))["access"]
    assert (access["owner"], access["access"], access["readers"]) == (victim, "own", [])


def test_the_readmes_team_layout_is_shared_by_the_members_of_the_team_role(
    env: dict[str, str], pg_server: PgServer, pg_database: str, pg_store: PgStore
) -> None:
    """The README's SQL for a team: a NOLOGIN role owns the schema, its members connect
    as that role (options=-c role=...), so every table is the team's and each member
    sees the others' sessions; a non-member is refused."""
    team, alice, bob, eve = (
        f"{name}_{pg_store.schema}" for name in ("team", "alice", "bob", "eve")
    )
    pg_server.execute(
        f"CREATE ROLE {team} NOLOGIN; CREATE ROLE {alice} LOGIN; CREATE ROLE {bob} LOGIN; "
        f"CREATE ROLE {eve} LOGIN; GRANT {team} TO {alice}, {bob}; "
        f"CREATE SCHEMA {pg_store.schema} AUTHORIZATION {team}",
        pg_database,
    )
    as_team = f"-c%20role%3D{team}"
    members = [{**env, "AGCTL_STORE": as_role(pg_store.dsn, who, options=as_team)}
               for who in (alice, bob)]  # fmt: skip
    ok(agctl(members[0], "session", "new", SID))
    ok(agctl(members[0], "-s", SID, "turn", "send", "from alice"))
    ok(agctl(members[1], "-s", SID, "turn", "send", "from bob"))
    listed = json.loads(ok(agctl(members[1], "-s", SID, "msg", "list", "--json")))
    assert [m["content"] for m in listed if m["role"] == "user"] == ["from alice", "from bob"]
    access = json.loads(ok(agctl(members[0], "store", "status", "--json")))["access"]
    assert (access["owner"], access["access"], access["foreign_tables"]) == (team, "own", [])
    assert access["owner_members"] == sorted([alice, bob])
    outsider = agctl({**env, "AGCTL_STORE": as_role(pg_store.dsn, eve)}, "session", "list")
    assert outsider.returncode == 5 and f"owned by role '{team}'" in outsider.stderr


def test_a_role_that_may_not_make_the_schema_is_told_so_without_a_traceback(
    env: dict[str, str], pg_server: PgServer, pg_database: str, pg_store: PgStore
) -> None:
    newcomer = f"newcomer_{pg_store.schema}"
    pg_server.execute(f"CREATE ROLE {newcomer} LOGIN", pg_database)
    done = agctl({**env, "AGCTL_STORE": as_role(pg_store.dsn, newcomer)}, "session", "new", SID)
    assert done.returncode == 1, done.stderr
    assert "could not be brought up to date: permission denied for database" in done.stderr
    assert "Traceback" not in done.stderr


# ---- the server gone while a turn runs ------------------------------------------------

# A tool that says it started, waits until the test has stopped the server, counts its
# run and answers.
GATED_TOOL = """
import os, sys, time
here = sys.argv[1]
open(os.path.join(here, "started"), "w").close()
while not os.path.exists(os.path.join(here, "go")):
    time.sleep(0.02)
with open(os.path.join(here, "runs"), "a") as runs:
    runs.write("ran\\n")
print("the tool's answer")
"""


def wait_for(path: Path, child: subprocess.Popen[str]) -> None:
    """Until `path` exists (60 s at most), or the child ended first."""
    for _ in range(3000):
        if path.exists() or child.poll() is not None:
            break
        time.sleep(0.02)
    assert path.exists(), child.communicate(timeout=60)


def test_a_server_stopped_while_a_tool_runs_keeps_the_draft_here_and_resume_runs_no_tool_again(
    env: dict[str, str], pg_server: PgServer, isolated_env: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    program = tmp_path / "tool.py"
    program.write_text(GATED_TOOL)
    ok(agctl(env, "tool", "add", "gated", "--description", "Waits", "--approve", "auto",
             "--", sys.executable, str(program), str(gate)))  # fmt: skip
    ok(agctl(env, "config", "set", "store.connect_patience", "1"))
    ok(agctl(env, "session", "new", SID))
    script = tmp_path / "script.json"
    script.write_text(json.dumps([[{"tool_calls": [{"id": "g1", "name": "gated"}]}, "Done."]]))
    argv = [sys.executable, "-m", "agctl", "-s", SID, "turn", "send", "go", "-T", "gated",
            "--script", str(script)]  # fmt: skip
    turn = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_for(gate / "started", turn)
        pg_server.stop("immediate")
        (gate / "go").touch()
        _, stderr = turn.communicate(timeout=120)
    finally:
        if turn.poll() is None:
            turn.kill()
        with contextlib.suppress(Exception):
            pg_server.start()
    assert turn.returncode == 1, stderr
    assert "does not answer" in stderr and "trying again for up to 1s" in stderr
    kept = list((isolated_env / "stores").glob(f"*/drafts/{SID}/default.json"))
    assert len(kept) == 1, stderr
    draft = kept[0]
    assert stat.S_IMODE(draft.stat().st_mode) == 0o600
    for folder in (draft.parent, draft.parent.parent, draft.parent.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    honest = (
        "kept as a draft, with the 1 tool result(s) it got (not run again), on this "
        f"machine ({draft}: the store could not take it)"
    )
    assert honest in " ".join(stderr.split()), stderr
    assert "could not be kept" not in stderr
    assert (gate / "runs").read_text() == "ran\n"

    shown = json.loads(ok(agctl(env, "-s", SID, "draft", "show", "--json")))
    assert (shown["prompt"], shown["stale"]) == ("go", None)
    ok(agctl(env, "-s", SID, "turn", "send", "--resume-draft", "-T", "gated",
             "--script", str(script)))  # fmt: skip
    assert (gate / "runs").read_text() == "ran\n", "the finished tool was not run again"
    assert not draft.exists()
    listed = json.loads(ok(agctl(env, "-s", SID, "msg", "list", "--json")))
    assert [m["role"] for m in listed] == ["user", "assistant", "tool", "assistant"]
    assert listed[2]["content"].strip() == "the tool's answer"
    assert agctl(env, "-s", SID, "draft", "show").returncode == 3
