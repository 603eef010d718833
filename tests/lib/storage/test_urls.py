"""Store specs (agctl.storage.urls): paths, file and PostgreSQL URLs, passwords, schema names."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import SECRET

from agctl.base.errors import UsageError
from agctl.storage.urls import (
    check_schema,
    has_password,
    parse_store,
    passwords,
    redact,
    redact_text,
)

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
