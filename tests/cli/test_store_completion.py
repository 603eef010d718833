"""TAB completion on a store that is not a file store: session ids, slots and drafts come
from its tables (agctl.storage.postgres.listing), checkpoints through its backend (the
real PostgreSQL server of tests/pgserver.py; tests/helpers.FakePostgres stands in for one
that cannot be opened); a file store named by --store or AGCTL_STORE is read as files."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from helpers import FakePostgres, install_fake_postgres
from pgserver import PASSWORD, PgServer, PgStore

from agctl.base.errors import StoreError
from agctl.cli import cli
from agctl.context.models import Draft
from agctl.store import Store

Run = Callable[..., Result]
SECRET = "s3cr3t-Pa55word"
URL = f"postgresql://agent:{SECRET}@127.0.0.1:9/team?sslmode=disable"


@pytest.fixture
def on_postgres(monkeypatch: pytest.MonkeyPatch) -> FakePostgres:
    """AGCTL_STORE names a PostgreSQL store."""
    monkeypatch.setenv("AGCTL_STORE", URL)
    return install_fake_postgres(monkeypatch)


def output(result: Result) -> str:
    return result.stdout + result.stderr


def complete(line: str, env: dict[str, str] | None = None) -> list[str]:
    """The values bash completion offers for `line` (in-process, as the script asks)."""
    asked = {"_AGCTL_COMPLETE": "bash_complete", "COMP_WORDS": line}
    asked["COMP_CWORD"] = str(len(line.split(" ")) - 1)
    result = CliRunner().invoke(
        cli, [], prog_name="agctl", env={**asked, **(env or {})}, catch_exceptions=False
    )
    assert result.exit_code == 0, output(result)
    assert "Traceback" not in output(result)
    return [row.split(",", 1)[1] for row in result.stdout.splitlines() if row]


@pytest.fixture
def two_sessions(run: Run, pg_env: str) -> list[str]:
    """ "main" (current, slots default and b, a draft on b, checkpoints) and "other" (slot
    x), on the real PostgreSQL store; the checkpoint ids of main, newest first."""
    for args in (
        ["session", "new", "other"],
        ["slot", "new", "x"],
        ["session", "new", "main"],
        ["turn", "send", "one"],
        ["turn", "send", "two"],
        ["slot", "new", "b"],
    ):
        assert run(*args).exit_code == 0
    library = Store(url=pg_env)
    library.save_draft("main", Draft(prompt="p", slot="b"))
    library.close()
    return [row["id"] for row in json.loads(run("ckpt", "list", "--json").stdout)]


def test_completion_goes_through_the_backend(two_sessions: list[str], isolated_env: Path) -> None:
    assert complete("agctl session use ") == ["main", "other"]
    assert complete("agctl slot use ") == ["b", "default"]
    assert complete("agctl -s other slot use ") == ["default", "x"]
    assert complete("agctl -s oth slot use ") == ["default", "x"]  # a prefix
    assert complete("agctl draft show --slot ") == ["b"]
    assert complete("agctl ckpt rollback ") == two_sessions
    assert Store(isolated_env).session_ids() == []  # none in the data dir


def test_completion_follows_store_on_the_line_and_the_config(
    two_sessions: list[str], pg_env: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AGCTL_STORE")
    assert complete("agctl session use ") == []  # the data dir: empty
    assert complete(f"agctl --store {pg_env} session use ") == ["main", "other"]
    assert complete(f"agctl slot --store {pg_env} use ") == ["b", "default"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"store": {"url": pg_env.replace(f":{PASSWORD}", "")}}))
    monkeypatch.setenv("AGCTL_CONFIG", str(config))
    monkeypatch.setenv("AGCTL_STORE_SCHEMA", "another")
    assert complete(f"agctl --store {pg_env} session use ") == []  # another schema: none
    monkeypatch.delenv("AGCTL_STORE_SCHEMA")
    assert complete("agctl session use ") == []  # the config's, schema agctl: none


def test_completion_offers_nothing_when_the_store_cannot_be_opened(
    on_postgres: FakePostgres, run: Run
) -> None:
    on_postgres.refuse = StoreError("the server is down")
    assert complete("agctl session use ") == []
    assert complete("agctl slot use ") == []
    assert complete("agctl --store mysql://x session use ") == []


def test_completion_of_a_file_store_named_by_store(run: Run, tmp_path: Path) -> None:
    where = tmp_path / "files"
    assert run("--store", str(where), "session", "new", "tabs").exit_code == 0
    assert complete(f"agctl --store {where} session use ") == ["tabs"]
    assert complete("agctl slot use ", {"AGCTL_STORE": where.as_uri()}) == ["default"]
    assert os.environ.get("AGCTL_STORE") is None


def test_a_tab_on_a_server_that_is_down_tries_once(
    two_sessions: list[str], pg_server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TAB must not hang: with the server down it offers nothing after one attempt,
    where a command waits the server out (CONNECT_PATIENCE)."""
    from agctl.storage.postgres import backend as pg_backend

    attempts: list[object] = []
    connect = pg_backend.psycopg.connect

    def counted(*args: object, **kwargs: object) -> object:
        attempts.append(args)
        return connect(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pg_backend.psycopg, "connect", counted)
    pg_server.stop()
    try:
        assert complete("agctl session use ") == []
        assert len(attempts) == 1
    finally:
        pg_server.start()
    assert complete("agctl session use ") == ["main", "other"]


def test_a_session_whose_document_does_not_parse_is_offered_without_a_description(
    two_sessions: list[str], pg_env: str, pg_store: PgStore, isolated_env: Path
) -> None:
    """A damaged session document (not JSON, or JSON but not an object) leaves the TAB
    its id, with no title to show, and the other sessions as they were."""
    import psycopg
    from psycopg import sql

    from agctl.storage.postgres.listing import Listing

    with psycopg.connect(pg_store.dsn, autocommit=True) as conn:
        for sid, doc in (("other", b"{not json"), ("main", b"[1, 2]")):
            conn.execute(
                sql.SQL("UPDATE {}.sessions SET doc = %s WHERE id = %s").format(
                    sql.Identifier(pg_store.schema)
                ),
                [doc, sid],
            )
    listing = Listing(pg_env, pg_store.schema, isolated_env)  # the URL the commands used
    try:
        assert listing.sessions() == [("main", {}), ("other", {})]
        assert listing.current_session_id() == "main"
    finally:
        listing.close()
    assert complete("agctl session use ") == ["main", "other"]
