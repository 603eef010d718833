"""Store specs (agctl.storage.urls) and choosing the store (agctl.storage.factory)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agctl.base.errors import CorruptDocument, UsageError
from agctl.config.file import ConfigFile
from agctl.storage.factory import choose_store, open_backend
from agctl.storage.file.backend import FileBackend
from agctl.storage.urls import (
    check_schema,
    has_password,
    parse_store,
    passwords,
    redact,
    redact_text,
)
from agctl.store import Store

SECRET = "Tr0ub4dor&3"


# ---- parsing ---------------------------------------------------------------------------


def test_a_plain_path_and_a_file_url_name_the_same_file_store(tmp_path: Path) -> None:
    where = tmp_path / "data dir"
    assert parse_store(str(where)).path == where
    assert parse_store(where.as_uri()).path == where  # file:///…/data%20dir
    assert parse_store(f"file://localhost{where}").path == where
    assert parse_store("relative/dir").path == Path("relative/dir")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://agent@db.example:5432/agctl",
        "postgres://db.example/agctl",
        "postgresql:///agctl?service=team",
        "postgresql:///agctl?host=/run/postgresql",
        "postgresql://h1:5432,h2:5433/agctl?target_session_attrs=read-write",
        "POSTGRESQL://db/agctl",
    ],
)
def test_postgresql_urls_are_kept_as_given_for_libpq(url: str) -> None:
    spec = parse_store(url)
    assert (spec.kind, spec.dsn, spec.path) == ("postgres", url, None)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "no store given"),
        ("   ", "no store given"),
        ("mysql://u@h/db", "not a store agctl knows"),
        ("sqlite:///tmp/x.db", "not a store agctl knows"),
        ("postgresql:agctl", "needs 'postgresql://'"),
        ("file:relative", "needs 'file://'"),
        ("file://otherhost/data", "names another machine"),
        ("file:///data?x=1", "takes no query"),
        ("file://", "names no directory"),
        ("host=db dbname=agctl", "keyword/value DSN"),
        ("a\x00b", "NUL"),
    ],
)
def test_anything_else_is_a_usage_error_saying_what_is_accepted(text: str, says: str) -> None:
    with pytest.raises(UsageError, match=says) as caught:
        parse_store(text, origin="AGCTL_STORE")
    assert str(caught.value).startswith("AGCTL_STORE: ")


def test_a_file_where_a_directory_is_named_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="is not a directory"):
        parse_store(str(tmp_path / "f"))
    assert parse_store(f"./{'dbname=x'}").path == Path("dbname=x")  # the way to name one


# ---- passwords -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        (f"postgresql://agent:{SECRET}@db/agctl", "postgresql://agent:***@db/agctl"),
        (
            f"postgresql://agent:{SECRET}@h1,h2/agctl?sslmode=require",
            "postgresql://agent:***@h1,h2/agctl?sslmode=require",
        ),
        (
            "postgresql:///agctl?user=a&password=Tr0ub4dor%263&sslpassword=x",
            "postgresql:///agctl?user=a&password=***&sslpassword=***",
        ),
        (
            "postgresql:///agctl?PASS%57ORD=Tr0ub4dor%263",
            "postgresql:///agctl?PASS%57ORD=***",
        ),
        (f"postgresql://a:p@ss{SECRET}@db/x", "postgresql://a:***@db/x"),
        ("postgresql://agent@db/agctl?service=team", "postgresql://agent@db/agctl?service=team"),
        (f"host=db password={SECRET} dbname=x", "host=db password=*** dbname=x"),
        ("host=db password = 'a \\' secret' user=u", "host=db password = *** user=u"),
    ],
)
def test_redact_removes_every_password(dsn: str, shown: str) -> None:
    assert redact(dsn) == shown
    assert has_password(dsn) == (shown != dsn)


def test_redact_text_removes_the_password_in_any_form() -> None:
    dsn = f"postgresql://agent:{SECRET.replace('&', '%26')}@db/agctl"
    assert passwords(dsn) == {"Tr0ub4dor%263", SECRET}
    text = f"cannot connect to {dsn}: the password {SECRET!r} was refused"
    cleaned = redact_text(text, dsn)
    assert SECRET not in cleaned and "Tr0ub4dor%263" not in cleaned
    assert "postgresql://agent:***@db/agctl" in cleaned
    assert redact_text("no secret here", "postgresql://agent@db/x") == "no secret here"


@pytest.mark.parametrize("name", ["agctl", "team_a", "_x", "t2", "a" * 63])
def test_schema_names(name: str) -> None:
    assert check_schema(name) == name


@pytest.mark.parametrize("name", ["", "Team", "2a", "pg_catalog", "a-b", 'a"b', "a" * 64, "é"])
def test_bad_schema_names_are_refused(name: str) -> None:
    with pytest.raises(UsageError, match="not a schema name"):
        check_schema(name)


# ---- choosing --------------------------------------------------------------------------


@pytest.fixture
def config_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "config.json"
    monkeypatch.setenv("AGCTL_CONFIG", str(path))
    monkeypatch.delenv("AGCTL_STORE", raising=False)
    monkeypatch.delenv("AGCTL_STORE_SCHEMA", raising=False)
    return path


def test_the_order_is_option_environment_config_then_data_dir(
    config_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_env: Path
) -> None:
    assert choose_store().spec.path == isolated_env  # nothing set: the data dir
    assert choose_store().origin == "data dir"
    ConfigFile().set("store.url", "postgresql:///agctl?service=team")
    chosen = choose_store(data_dir=tmp_path / "local")
    assert chosen.spec.dsn == "postgresql:///agctl?service=team"
    assert chosen.origin == "config store.url"
    assert chosen.local_dir == tmp_path / "local"  # the pointer stays on this machine
    monkeypatch.setenv("AGCTL_STORE", str(tmp_path / "env"))
    assert choose_store().spec.path == tmp_path / "env"
    assert choose_store().origin == "AGCTL_STORE"
    chosen = choose_store(str(tmp_path / "flag"))
    assert (chosen.spec.path, chosen.local_dir, chosen.origin) == (
        tmp_path / "flag",
        tmp_path / "flag",  # --store DIR is --data-dir DIR
        "--store",
    )


def test_the_schema_comes_from_the_environment_then_the_config(
    config_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "postgresql://db/agctl"
    assert choose_store(url).schema == "agctl"
    ConfigFile().set("store.schema", "team_a")
    assert choose_store(url).schema == "team_a"
    monkeypatch.setenv("AGCTL_STORE_SCHEMA", "team_b")
    assert choose_store(url).schema == "team_b"
    assert choose_store(url, schema="team_c").schema == "team_c"
    monkeypatch.setenv("AGCTL_STORE_SCHEMA", "Bad Name")
    with pytest.raises(UsageError, match="AGCTL_STORE_SCHEMA: 'Bad Name' is not a schema"):
        choose_store(url)


@pytest.mark.parametrize(
    ("url", "dsn"),
    [
        ("postgresql:///agctl?shared_schema_owner=team", "postgresql:///agctl"),
        ("postgresql:///agctl?service=a&shared_schema_owner=team&sslmode=require",
         "postgresql:///agctl?service=a&sslmode=require"),
        ("postgresql:///agctl?shared_schema_owner=team#x", "postgresql:///agctl#x"),
    ],
)  # fmt: skip
def test_the_shared_schema_owner_is_taken_out_of_the_url_libpq_sees(url: str, dsn: str) -> None:
    spec = parse_store(url)
    assert (spec.dsn, spec.shared_owner) == (dsn, "team")
    assert parse_store("postgresql:///x?shared_schema_owner=Team%20A").shared_owner == "Team A"
    with pytest.raises(UsageError, match="given 2 times"):
        parse_store("postgresql:///x?shared_schema_owner=a&shared_schema_owner=b")
    with pytest.raises(UsageError, match="not a role's name"):
        parse_store("postgresql:///x?shared_schema_owner=")


def test_the_shared_schema_owner_comes_from_the_url_then_the_config(config_path: Path) -> None:
    url = "postgresql://db/agctl"
    assert choose_store(url).shared_owner is None
    ConfigFile().set("store.shared_schema_owner", "team_a")
    assert choose_store(url).shared_owner == "team_a"
    assert choose_store(f"{url}?shared_schema_owner=team_b").shared_owner == "team_b"
    with pytest.raises(UsageError, match="not a role's name"):
        ConfigFile().set("store.shared_schema_owner", "a\nb")


def test_a_password_is_never_written_to_the_config(config_path: Path) -> None:
    for url in (f"postgresql://agent:{SECRET}@db/agctl", f"postgresql:///x?password={SECRET}"):
        with pytest.raises(UsageError, match="never keeps in its config") as caught:
            ConfigFile().set("store.url", url)
        assert SECRET not in str(caught.value)
    assert not config_path.exists()
    ConfigFile().set("store.url", "postgresql://agent@db/agctl")
    assert json.loads(config_path.read_text())["store"] == {"url": "postgresql://agent@db/agctl"}


def test_a_password_written_into_the_config_by_hand_is_refused_unread(config_path: Path) -> None:
    config_path.write_text(json.dumps({"store": {"url": f"postgresql://a:{SECRET}@db/x"}}))
    with pytest.raises(UsageError, match="never keeps in its config") as refused:
        choose_store()
    assert SECRET not in str(refused.value)
    with pytest.raises(CorruptDocument, match="never keeps in its config") as invalid:
        ConfigFile().load()
    assert SECRET not in str(invalid.value)


def test_the_config_store_keys_are_checked(config_path: Path) -> None:
    known = r"store\.url, store\.schema, store\.shared_schema_owner, store\.connect_patience"
    with pytest.raises(UsageError, match=known):
        ConfigFile().set("store.host", "x")
    with pytest.raises(UsageError, match="not a store agctl knows"):
        ConfigFile().set("store.url", "mysql://db/x")
    ConfigFile().set("store.url", "null")
    assert "store" not in json.loads(config_path.read_text())  # unset: left out of the file


def test_a_config_that_is_not_json_is_an_error_naming_it(config_path: Path) -> None:
    config_path.write_text("{not json")
    with pytest.raises(CorruptDocument, match=r"config\.json"):
        choose_store()


def test_store_url_opens_the_chosen_store(tmp_path: Path, config_path: Path) -> None:
    """Store(root) stays the file store in root, whatever is configured; Store(url=...) and
    Store() choose."""
    ConfigFile().set("store.url", str(tmp_path / "configured"))
    assert Store(tmp_path / "root").root == tmp_path / "root"
    assert Store().root == tmp_path / "configured"
    by_url = Store(url=(tmp_path / "by url").as_uri())
    assert by_url.root == by_url.local_dir == tmp_path / "by url"
    assert isinstance(open_backend(choose_store(str(tmp_path / "x"))), FileBackend)


def test_a_path_no_file_system_can_hold_is_a_usage_error_quoted_short(tmp_path: Path) -> None:
    """Before: os.stat's OSError (name too long) was a traceback."""
    with pytest.raises(UsageError, match="too long") as caught:
        parse_store("x" * 100_000)
    assert "(100000 characters)" in str(caught.value) and len(str(caught.value)) < 300
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(UsageError, match="symbolic links"):
        parse_store(str(tmp_path / "loop" / "x"))


def test_the_connect_patience_comes_from_the_config_through_the_choice(
    config_path: Path, isolated_env: Path
) -> None:
    """The backend is given the config's store.connect_patience by the store's choice
    (it read the config itself before, only when a connect failed)."""
    from agctl.storage.postgres.backend import PostgresBackend

    url = "postgresql://db/agctl"
    assert choose_store(url).connect_patience is None  # the backend's default
    ConfigFile().set("store.connect_patience", "2.5")
    chosen = choose_store(url)
    assert chosen.connect_patience == 2.5
    for patient, waits in ((True, 2.5), (False, 0.0)):  # a TAB tries once
        backend = open_backend(chosen, patient=patient)  # connects only when used
        assert isinstance(backend, PostgresBackend)
        assert backend.connect_patience == waits
        backend.close()


@pytest.mark.parametrize("value", ["soon", -1, 3601, [5], "nan", {"s": 1}])
def test_a_broken_connect_patience_is_refused_as_the_other_store_keys_are(
    config_path: Path, value: object
) -> None:
    """Before: the backend fell back to 5 s without a word, while the rest of the store
    table was checked where the store is chosen."""
    config_path.write_text(json.dumps({"store": {"connect_patience": value}}))
    with pytest.raises(UsageError, match=r"config store\.connect_patience must be seconds"):
        choose_store("postgresql://db/agctl")
    with pytest.raises(CorruptDocument, match="connect_patience"):
        ConfigFile().load()  # what every other reader of the config says of it
