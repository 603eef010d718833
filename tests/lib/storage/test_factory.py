"""Choosing the store (agctl.storage.factory): the option, the environment, the config, then
the data dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import SECRET

from agctl.base.errors import CorruptDocument, UsageError
from agctl.config.file import ConfigFile
from agctl.storage.factory import choose_store, open_backend
from agctl.storage.file.backend import FileBackend
from agctl.storage.urls import parse_store
from agctl.store import Store

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
