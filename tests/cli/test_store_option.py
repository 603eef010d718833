"""Choosing the store on the command line: --store, AGCTL_STORE, the config's store.url; a
PostgreSQL store (the real one of tests/pgserver.py; tests/helpers.FakePostgres records
what the factory opens, for the wiring) with its password never shown; the commands that
name the data dir on a store that has none."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from helpers import FakePostgres, install_fake_postgres
from pgserver import PASSWORD
from test_json_everywhere import INVOCATIONS, world  # noqa: F401 - the fixture, reused

from agctl.base.errors import StoreError
from agctl.store import Store

Run = Callable[..., Result]
SECRET = "s3cr3t-Pa55word"
URL = f"postgresql://agent:{SECRET}@127.0.0.1:9/team?sslmode=disable"
SHOWN = "postgresql://agent:***@127.0.0.1:9/team?sslmode=disable"


@pytest.fixture
def fake_postgres(monkeypatch: pytest.MonkeyPatch) -> FakePostgres:
    return install_fake_postgres(monkeypatch)


@pytest.fixture
def on_postgres(fake_postgres: FakePostgres, monkeypatch: pytest.MonkeyPatch) -> FakePostgres:
    """AGCTL_STORE names a PostgreSQL store whose URL holds a password."""
    monkeypatch.setenv("AGCTL_STORE", URL)
    return fake_postgres


def output(result: Result) -> str:
    return result.stdout + result.stderr


# ---- a file store by --store, AGCTL_STORE or the config -------------------------------


def test_store_dir_is_the_same_as_data_dir_dir(run: Run, tmp_path: Path) -> None:
    where = tmp_path / "elsewhere"
    assert run("--store", str(where), "session", "new", "s").exit_code == 0
    listed = run("--data-dir", str(where), "session", "list", "--json")
    assert [row["id"] for row in json.loads(listed.stdout)] == ["s"]
    assert run("--store", where.as_uri(), "session", "show", "--json").exit_code == 0  # current
    assert json.loads(run("session", "list", "--json").stdout) == []  # not the data dir


def test_the_option_beats_the_environment_which_beats_the_config(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("config", "set", "store.url", str(tmp_path / "configured")).exit_code == 0
    assert run("session", "new", "c").exit_code == 0
    monkeypatch.setenv("AGCTL_STORE", str(tmp_path / "env"))
    assert run("session", "new", "e").exit_code == 0
    assert run("session", "new", "o", "--store", str(tmp_path / "option")).exit_code == 0
    for name, sid in (("configured", "c"), ("env", "e"), ("option", "o")):
        assert Store(tmp_path / name).session_ids() == [sid]


def test_a_store_agctl_does_not_know_is_a_usage_error(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run("--store", f"mysql://agent:{SECRET}@db/x", "session", "list")
    assert result.exit_code == 2
    assert "agctl: error: --store: 'mysql://agent:***@db/x' is not a store agctl knows" in (
        result.stderr
    )
    monkeypatch.setenv("AGCTL_STORE", "sqlite:///x.db")
    result = run("session", "list", "--json")
    assert result.exit_code == 2
    assert json.loads(result.stderr)["error"]["message"].startswith("AGCTL_STORE: 'sqlite:")


# ---- PostgreSQL: the backend opened with the chosen DSN, schema and local dir ----------


def test_a_postgresql_url_opens_the_postgres_backend(
    run: Run, on_postgres: FakePostgres, isolated_env: Path, tmp_path: Path
) -> None:
    assert run("session", "new", "s").exit_code == 0
    assert on_postgres.opened == [{"dsn": URL, "schema": "agctl", "local_dir": isolated_env}]
    assert Store(isolated_env).session_ids() == []  # nothing of it in the data dir
    mine = tmp_path / "machine-b"
    result = run("--data-dir", str(mine), "--store", URL, "session", "list", "--json")
    assert [row["id"] for row in json.loads(result.stdout)] == ["s"]
    assert on_postgres.opened[-1]["local_dir"] == mine  # --data-dir: this machine's dir


def test_each_command_closes_the_store_it_opened(run: Run, on_postgres: FakePostgres) -> None:
    """Its connections are released when the command ends, in-process too (before, the
    PostgreSQL server ran out of connections after a few hundred CliRunner commands)."""
    for args in (["session", "new", "s"], ["turn", "send", "hi"], ["session", "list"]):
        assert run(*args).exit_code == 0
    assert on_postgres.closed == len(on_postgres.opened) == 3


def test_the_config_names_the_store_and_its_schema(
    run: Run, fake_postgres: FakePostgres, isolated_env: Path
) -> None:
    assert run("config", "set", "store.url", "postgresql:///agctl?service=team").exit_code == 0
    assert run("config", "set", "store.schema", "team_a").exit_code == 0
    assert run("session", "new", "s").exit_code == 0
    assert fake_postgres.opened == [
        {"dsn": "postgresql:///agctl?service=team", "schema": "team_a", "local_dir": isolated_env}
    ]


def test_a_password_in_the_url_is_never_kept_in_the_config(run: Run) -> None:
    result = run("config", "set", "store.url", URL)
    assert result.exit_code == 2
    assert "never keeps in its config" in result.stderr
    assert SECRET not in output(result)
    assert json.loads(run("config", "show", "--json").stdout).get("store") is None


@pytest.mark.parametrize("args", [["-v"], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize("name", sorted(INVOCATIONS))
def test_no_command_shows_the_password(
    name: str,
    args: list[str],
    run: Run,
    pg_env: str,
    isolated_env: Path,
    world: dict[str, str],  # noqa: F811 - the fixture imported above
) -> None:
    """Every command, run on a real PostgreSQL store whose URL holds a password, with -v
    and with --json: it works, and its output, logs and errors never hold the password."""
    result = run(*args, *[arg.format(**world) for arg in INVOCATIONS[name]])
    assert result.exit_code == 0, output(result)
    assert PASSWORD not in output(result)
    assert Store(isolated_env).session_ids() == []  # the sessions are in the database


@pytest.fixture
def store(pg_env: str) -> Iterator[Store]:
    """The `world` of test_json_everywhere, built on the real PostgreSQL store."""
    built = Store(url=pg_env)
    yield built
    built.close()


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
def test_an_error_that_quotes_the_url_is_shown_without_its_password(
    run: Run, on_postgres: FakePostgres, json_flag: list[str]
) -> None:
    on_postgres.refuse = StoreError(f"cannot connect to {URL}: password {SECRET} refused")
    result = run(*json_flag, "session", "list")
    assert result.exit_code == 1
    assert SECRET not in output(result)
    assert SHOWN in result.stderr


def test_doctor_names_the_store_and_checks_this_machines_data_dir(
    run: Run, on_postgres: FakePostgres, isolated_env: Path
) -> None:
    result = run("doctor", "--json")
    assert result.exit_code == 0, output(result)
    report = json.loads(result.stdout)
    assert (report["store"], report["data_dir"], report["ok"]) == (SHOWN, str(isolated_env), True)
    text = run("doctor").stdout
    assert f"the sessions are in {SHOWN}: this checks this machine's data dir" in text
    assert f"{isolated_env}: nothing to report" in text


@pytest.mark.parametrize("postgres", [True, False], ids=["postgres", "store-dir"])
def test_a_tool_never_runs_in_the_machine_local_dir(
    postgres: bool, run: Run, fake_postgres: FakePostgres, tmp_path: Path
) -> None:
    """Before: `tool test` protected --data-dir (or AGCTL_DATA_DIR), not the dir --store
    named; a PostgreSQL store's local dir is protected too."""
    local = tmp_path / "local"
    local.mkdir()
    added = run("tool", "add", "here", "--description", "d", "--cwd", str(local), "--", "true")
    assert added.exit_code == 0, output(added)
    store = ["--data-dir", str(local), "--store", URL] if postgres else ["--store", str(local)]
    result = run(*store, "tool", "test", "here")
    assert result.exit_code == 2, output(result)
    assert "inside agctl's data dir" in result.stderr
    assert run("tool", "test", "here").exit_code == 0  # elsewhere, it runs


def test_the_demo_never_runs_in_a_shared_store(run: Run, on_postgres: FakePostgres) -> None:
    result = run("demo", "--json")
    assert result.exit_code == 0, output(result)
    assert on_postgres.opened == []


def test_the_demo_runs_in_the_file_store_store_names(run: Run, tmp_path: Path) -> None:
    where = tmp_path / "tour"
    assert run("--store", str(where), "demo", "--json").exit_code == 0
    assert "legal-aid" in Store(where).session_ids()
