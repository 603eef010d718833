"""`agctl serve` on a PostgreSQL store (a real server, tests/pgserver.py), its client the
real `openai` SDK: turns whole and streamed on two sessions, kept in the database, where
the CLI reads them; and a warm process: the driver imported and the store's connection
opened before it says it is ready, that connection kept from turn to turn, and no
import of psycopg while it serves."""

from __future__ import annotations

import json
from pathlib import Path

import openai
from pgserver import PgServer, PgStore
from serving import HELLO, SYSTEM, agctl, base_env, serving, sessions


def backends(server: PgServer, database: str) -> set[int]:
    """The server processes of the clients connected to `database`, this one's aside."""
    import psycopg

    with psycopg.connect(server.url(database), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
            [database],
        ).fetchall()
    return {pid for (pid,) in rows}


def streamed(client: openai.OpenAI, messages: list[dict[str, str]]) -> str:
    stream = client.chat.completions.create(model="m", messages=messages, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_served_turns_are_kept_in_postgresql_by_a_warm_process(
    tmp_path: Path, pg_server: PgServer, pg_database: str, pg_store: PgStore
) -> None:
    env = base_env(tmp_path)
    env.update(AGCTL_STORE=pg_store.dsn, AGCTL_STORE_SCHEMA=pg_store.schema)
    assert agctl(env, "session", "new", "notes", "--system", "Keep notes.").returncode == 0
    # Every module the server imports, said on its stderr as it is imported.
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    started: list[str] = []
    logged: list[str] = []
    with serving(env, started=started, logged=logged) as (url, _):
        at_start = backends(pg_server, pg_database)
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        # A client resending its history: the session its fingerprint finds.
        first = client.chat.completions.with_raw_response.create(
            model="m", messages=[SYSTEM, HELLO]
        )
        session = first.headers["x-agctl-session"]
        said = first.parse().choices[0].message.content or ""
        history = [SYSTEM, HELLO, {"role": "assistant", "content": said}]
        again = {"role": "user", "content": "and then?"}
        second = client.chat.completions.create(model="m", messages=[*history, again])
        after_two = backends(pg_server, pg_database)
        history += [again, {"role": "assistant", "content": second.choices[0].message.content}]
        third = streamed(client, [*history, {"role": "user", "content": "streamed"}])
        # A client sending only its new message, the session named by path.
        notes = openai.OpenAI(
            base_url=f"{url.removesuffix('/v1')}/s/notes/v1", api_key="unused", max_retries=0
        )
        noted = notes.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "remember 42"}]
        )
        recalled = streamed(notes, [{"role": "user", "content": "recall"}])
        at_end = backends(pg_server, pg_database)

    # Connected before it said it was ready; no connection opened per turn after.
    assert at_start and at_start <= after_two == at_end
    imports = [line for line in started + logged if line.startswith("import time:")]
    psycopg_at_start = [line for line in started if line.endswith("| psycopg")]
    assert imports and psycopg_at_start, started[-5:]
    assert [line for line in logged if "psycopg" in line] == []

    assert 'turn 2 in slot "default"' in (second.choices[0].message.content or "")
    assert third.startswith('Offline reply to turn 3 in slot "default": you said "streamed"')
    assert "(2 messages in context)" in (noted.choices[0].message.content or "")
    assert recalled.startswith('Offline reply to turn 2 in slot "default": you said "recall"')

    # The command line reads both sessions, their messages and checkpoints, from the database.
    assert {s["id"]: s["turn_count"] for s in sessions(env)} == {session: 3, "notes": 2}
    kept = json.loads(agctl(env, "-s", session, "msg", "list", "--json").stdout)
    assert [m["content"] for m in kept] == [
        "hello there",
        said,
        "and then?",
        second.choices[0].message.content,
        "streamed",
        third,
    ]
    kept = json.loads(agctl(env, "-s", "notes", "msg", "list", "--json").stdout)
    assert [m["content"] for m in kept] == [
        "remember 42",
        noted.choices[0].message.content,
        "recall",
        recalled,
    ]
    for name, count in ((session, 3), ("notes", 2)):
        listed = json.loads(agctl(env, "-s", name, "ckpt", "list", "--json").stdout)
        # Newest first: each turn's, and the state before the first.
        expected = [f"after turn {n}" for n in range(count, 0, -1)] + ["before turn 1"]
        assert [c["label"] for c in listed] == expected
