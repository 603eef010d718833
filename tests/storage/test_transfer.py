"""`store copy` in the library: sessions moved between any two backends with their whole
checkpoint history, each one whole, idempotently, a damaged one failing alone."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from pgserver import PgServer, PgStore
from test_domain import SID, at, checkpointed_turns, turn

from agctl.base.errors import Conflict, DataError, NotFound, UsageError
from agctl.interchange.formats import export_session
from agctl.interchange.transfer import copy_between, copy_sessions
from agctl.storage.factory import file_choice
from agctl.storage.memory import MemoryBackend
from agctl.storage.postgres.backend import PostgresBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import CheckpointSummary


def exported(store: Store, sid: str = SID) -> bytes:
    return (
        export_session(store, sid, checkpoints=True)
        .model_dump_json(exclude={"agctl_version"})
        .encode()
    )


@pytest.fixture
def stores(tmp_path: Path, pg_store: PgStore) -> dict[str, Store]:
    return {
        "file": Store(tmp_path / "files"),
        "postgres": Store(
            backend=PostgresBackend(pg_store.dsn, schema=pg_store.schema, local_dir=tmp_path)
        ),
        "memory": Store(backend=MemoryBackend()),
        "file again": Store(tmp_path / "back"),
    }


def test_file_to_postgres_to_file_keeps_every_checkpoint(stores: dict[str, Store]) -> None:
    source = stores["file"]
    source.create_session(SID)
    seen = checkpointed_turns(source, 4)
    child = Checkpointer(source).fork(SID, next(iter(seen)), "child").id
    Checkpointer(source).prune(SID, 3)
    hops = [source, stores["postgres"], stores["file again"]]
    for here, there in itertools.pairwise(hops):
        results = copy_sessions(here, there)
        assert [(r.session_id, r.outcome) for r in results] == [(SID, "copied"), (child, "copied")]
        assert results[0].checkpoints == {c: c for c in results[0].checkpoints}
        assert sorted(results[0].checkpoints) == sorted(
            s.id for s in Checkpointer(here).summaries(SID)
        )
        assert exported(there) == exported(source)
        assert exported(there, child) == exported(source, child)
    last = hops[-1]
    for identifier, state in seen.items():
        if identifier in results[0].checkpoints:
            assert at(last, identifier) == state
    turn(last, "after the trip")  # the copy takes turns like the original
    assert last.load_session(SID).turn_count == source.load_session(SID).turn_count + 1


def test_a_second_copy_skips_what_is_there_and_a_different_one_conflicts(
    stores: dict[str, Store],
) -> None:
    source, target = stores["memory"], stores["postgres"]
    source.create_session(SID)
    checkpointed_turns(source, 2)
    assert [r.outcome for r in copy_sessions(source, target)] == ["copied"]
    assert [r.outcome for r in copy_sessions(source, target)] == ["skipped"]
    turn(source, "only in the source")
    before = exported(target)
    with pytest.raises(Conflict, match="differs"):
        copy_sessions(source, target)
    assert exported(target) == before


def test_only_the_sessions_named_and_a_missing_one_is_not_found(
    stores: dict[str, Store],
) -> None:
    source, target = stores["postgres"], stores["file"]
    for sid in ("a", "b"):
        source.create_session(sid)
        turn(source, "hello", sid)
    assert [r.session_id for r in copy_sessions(source, target, ["b"])] == ["b"]
    assert target.session_ids() == ["b"]
    with pytest.raises(NotFound):
        copy_sessions(source, target, ["nope"])
    assert target.session_ids() == ["b"]


def _truncated_slot(session: Path) -> Path:
    path = session / "slots" / "default.json"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _session_not_json(session: Path) -> Path:
    path = session / "session.json"
    path.write_bytes(b'{"id": ')
    return path


def _log_failing_its_checksum(session: Path) -> Path:
    path = session / "checkpoints" / "log"
    data = path.read_bytes()
    assert data.count(b'"first"') == 1
    path.write_bytes(data.replace(b'"first"', b'"First"'))
    return path


# Damage done to a real file store's session, by what it damages.
DAMAGES: dict[str, Callable[[Path], Path]] = {
    "slot": _truncated_slot,
    "session": _session_not_json,
    "log": _log_failing_its_checksum,
}


@pytest.mark.parametrize("target_name", ["file again", "postgres"])
def test_a_damaged_session_fails_alone_and_the_others_arrive_whole(
    stores: dict[str, Store], tmp_path: Path, target_name: str
) -> None:
    source, target = stores["file"], stores[target_name]
    healthy = ["healthy-a", "healthy-z"]
    damaged = [f"broken-{what}" for what in DAMAGES]
    for sid in healthy + damaged:
        source.create_session(sid)
        turn(source, "first", sid)
        turn(source, "second", sid)
    expected = {sid: exported(source, sid) for sid in healthy}
    paths = {
        f"broken-{what}": str(damage(tmp_path / "files" / "sessions" / f"broken-{what}"))
        for what, damage in DAMAGES.items()
    }
    results = copy_sessions(source, target)
    assert [(r.session_id, r.outcome) for r in results] == sorted(
        [(sid, "copied") for sid in healthy] + [(sid, "failed") for sid in damaged]
    )
    for result in results:
        if result.session_id in damaged:
            assert isinstance(result.error, DataError)
            assert paths[result.session_id] in str(result.error)
            assert result.checkpoints == {}
        else:
            assert result.error is None
            assert result.checkpoints == {c: c for c in Checkpointer(source).ids(result.session_id)}
            assert len(result.checkpoints) == 3  # the new session's, and one a turn
    assert target.session_ids() == healthy  # nothing of a damaged one
    for sid in healthy:
        assert exported(target, sid) == expected[sid]
        assert Checkpointer(target).verify(sid).ok
    again = copy_sessions(source, target)
    assert [r.outcome for r in again if r.session_id in healthy] == ["skipped", "skipped"]


def test_a_copy_between_two_chosen_stores_names_them_and_ends_with_the_damaged(
    tmp_path: Path,
) -> None:
    source = Store(tmp_path / "files")
    for sid in ("broken-slot", "healthy"):
        source.create_session(sid)
        turn(source, "first", sid)
    _truncated_slot(tmp_path / "files" / "sessions" / "broken-slot")
    source.close()
    transfer = copy_between(file_choice(tmp_path / "files"), file_choice(tmp_path / "back"))
    assert (transfer.source, transfer.target) == (str(tmp_path / "files"), str(tmp_path / "back"))
    assert [(c.session_id, c.outcome) for c in transfer.sessions] == [
        ("broken-slot", "failed"),
        ("healthy", "copied"),
    ]
    failure = transfer.failure()
    assert isinstance(failure, DataError)
    assert str(failure) == "1 of 2 session(s) not copied, damaged (broken-slot); the others were"
    assert failure.__notes__ == [f"session 'broken-slot': {transfer.sessions[0].error}"]
    assert Store(tmp_path / "back").session_ids() == ["healthy"]
    again = copy_between(
        file_choice(tmp_path / "files"), file_choice(tmp_path / "back"), ["healthy"]
    )
    assert [c.outcome for c in again.sessions] == ["skipped"] and again.failure() is None


def test_a_copy_from_a_store_to_itself_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="SRC and DST are the same store"):
        copy_between(file_choice(tmp_path / "files"), file_choice(tmp_path / "files"))
    assert not (tmp_path / "files").exists()


def test_a_damaged_target_copy_fails_alone_and_a_conflict_names_the_failed(
    stores: dict[str, Store], tmp_path: Path
) -> None:
    source, target = stores["memory"], stores["file again"]
    for sid in ("a", "b", "c"):
        source.create_session(sid)
        turn(source, "first", sid)
    copy_sessions(source, target)
    path = _truncated_slot(tmp_path / "back" / "sessions" / "a")
    results = copy_sessions(source, target)
    assert [(r.session_id, r.outcome) for r in results] == [
        ("a", "failed"),
        ("b", "skipped"),
        ("c", "skipped"),
    ]
    assert str(path) in str(results[0].error)
    turn(source, "only in the source", "c")
    with pytest.raises(Conflict, match="'c'") as raised:
        copy_sessions(source, target)
    assert any("'a'" in note and str(path) in note for note in raised.value.__notes__)


def test_a_target_from_a_newer_agctl_stops_the_copy_before_any_session(
    stores: dict[str, Store],
    tmp_path: Path,
    pg_server: PgServer,
    pg_database: str,
    pg_store: PgStore,
) -> None:
    from agctl.storage.postgres.schema import VERSION

    source, target = stores["file"], stores["postgres"]
    for sid in ("a", "b"):
        source.create_session(sid)
    target.session_ids()  # made and migrated
    pg_server.execute(
        f"UPDATE \"{pg_store.schema}\".meta SET value = '{VERSION + 1}' WHERE key = 'version'",
        pg_database,
    )
    fresh = Store(backend=PostgresBackend(pg_store.dsn, schema=pg_store.schema, local_dir=tmp_path))
    with pytest.raises(DataError, match=f"schema version {VERSION + 1}"):
        copy_sessions(source, fresh)


def test_a_copy_whose_checkpoints_do_not_read_back_is_taken_out_again(
    stores: dict[str, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = stores["file"], stores["postgres"]
    for sid in ("a", "b"):
        source.create_session(sid)
        turn(source, "first", sid)
    read_back = Checkpointer.summaries

    def one_short(self: Checkpointer, session_id: str) -> list[CheckpointSummary]:
        found = read_back(self, session_id)
        return found[1:] if self.store is target and session_id == "a" else found

    monkeypatch.setattr(Checkpointer, "summaries", one_short)  # a fault no store shows
    results = copy_sessions(source, target)
    assert [(r.session_id, r.outcome) for r in results] == [("a", "failed"), ("b", "copied")]
    assert "2 checkpoints in the source but 1 in the target" in str(results[0].error)
    assert target.session_ids() == ["b"]


def test_status_says_how_far_behind_and_migrate_brings_it_up(
    tmp_path: Path, pg_store: PgStore
) -> None:
    from agctl.storage import admin
    from agctl.storage.postgres import schema

    def fresh() -> PostgresBackend:
        return PostgresBackend(
            pg_store.dsn, schema=pg_store.schema, local_dir=tmp_path, auto_migrate=False
        )

    before = admin.status(fresh())
    assert (before.kind, before.version, before.latest, before.state) == (
        "postgresql",
        0,
        schema.VERSION,
        "behind",
    )
    assert before.sessions is None and pg_store.schema in before.where
    assert admin.migrate(fresh()) == list(range(1, schema.VERSION + 1))
    assert admin.migrate(fresh()) == []
    after = admin.status(fresh())
    assert (after.version, after.state, after.sessions) == (schema.VERSION, "ok", 0)
    files = admin.status(Store(tmp_path / "files").backend)
    assert (files.kind, files.version, files.state, files.sessions) == ("file", None, "ok", 0)
