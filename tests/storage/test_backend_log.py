"""Every backend's checkpoint log: offsets as returned, torn tails sealed, snapshots."""

from __future__ import annotations

import pytest
from backend_docs import SID, seed

from agctl.base.errors import NotFound
from agctl.context.models import Session, Slot
from agctl.storage.base import Backend


def line(offset: int, text: str) -> bytes:
    return f'{{"at": {offset}, "text": "{text}"}}\n'.encode()


def append(backend: Backend, *texts: str) -> list[int]:
    """Append one record per text in one transaction; their offsets."""
    with backend.transaction(SID) as tx:
        log = tx.checkpoint_log()
        return [log.append(lambda offset, text=text: line(offset, text)) for text in texts]


def test_a_session_without_history_has_an_empty_log(backend: Backend) -> None:
    seed(backend)
    log = backend.checkpoint_log(SID)
    assert log.size() == 0
    with pytest.raises(NotFound):
        log.open()
    assert backend.removed_checkpoints(SID) == set()
    assert backend.cache(SID, "heads") is None and backend.cache(SID, "index") is None


def test_records_read_back_at_the_offsets_returned(backend: Backend) -> None:
    seed(backend)
    offsets = append(backend, "one", "two") + append(backend, "three")
    expected = line(0, "one") + line(offsets[1], "two") + line(offsets[2], "three")
    assert offsets == [0, len(line(0, "one")), len(line(0, "one") + line(offsets[1], "two"))]
    log = backend.checkpoint_log(SID)
    assert log.size() == len(expected)
    with log.open() as reader:
        assert reader.read() == expected
        for offset, text in zip(offsets, ["one", "two", "three"], strict=True):
            reader.seek(offset)
            assert reader.readline() == line(offset, text)
        reader.seek(0)
        assert list(reader) == expected.splitlines(keepends=True)
    assert isinstance(log.name, str) and log.name


def test_an_append_seals_a_torn_last_line_first(backend: Backend) -> None:
    seed(backend)
    with backend.transaction(SID) as tx:
        tx.checkpoint_log().append(lambda offset: b'{"torn": tr')
    offset = append(backend, "after")[0]
    assert offset == len(b'{"torn": tr') + 1
    assert backend.checkpoint_log(SID).open().read() == b'{"torn": tr\n' + line(offset, "after")


def test_truncate_cuts_a_tail(backend: Backend) -> None:
    seed(backend)
    offsets = append(backend, "kept", "cut")
    with backend.transaction(SID) as tx:
        tx.checkpoint_log().truncate(offsets[1])
        assert tx.checkpoint_log().size() == offsets[1]
    assert backend.checkpoint_log(SID).open().read() == line(0, "kept")
    assert append(backend, "next") == [offsets[1]]


def test_appends_are_part_of_the_transaction(backend: Backend) -> None:
    seed(backend)
    append(backend, "committed")
    committed = backend.checkpoint_log(SID).open().read()
    with pytest.raises(RuntimeError), backend.transaction(SID) as tx:
        log = tx.checkpoint_log()
        offset = log.append(lambda offset: line(offset, "staged"))
        assert log.size() == len(committed) + len(line(offset, "staged"))
        assert log.open().read() == committed + line(offset, "staged")
        assert backend.checkpoint_log(SID).size() == len(committed)
        raise RuntimeError("rolled back")
    assert backend.checkpoint_log(SID).open().read() == committed


def test_an_open_reader_keeps_its_snapshot(backend: Backend) -> None:
    seed(backend)
    append(backend, "old")
    with backend.checkpoint_log(SID).open() as reader:
        append(backend, "new")
        with backend.transaction(SID) as tx:
            tx.checkpoint_log().truncate(0)
        assert reader.read() == line(0, "old")
    assert backend.checkpoint_log(SID).size() == 0


def test_history_given_at_creation_and_dropped_by_a_replace(backend: Backend) -> None:
    history = line(0, "imported")
    backend.create_session(
        Session(id=SID), [Slot(id="default")], checkpoint_log=history, removed=["00a"]
    )
    assert backend.checkpoint_log(SID).open().read() == history
    assert backend.removed_checkpoints(SID) == {"00a"}
    assert append(backend, "next") == [len(history)]

    backend.replace_session(Session(id=SID), [Slot(id="default")])
    assert backend.checkpoint_log(SID).size() == 0
    assert backend.removed_checkpoints(SID) == set()


def test_caches_are_replaced_and_dropped(backend: Backend) -> None:
    seed(backend)
    with backend.transaction(SID) as tx:
        tx.write_cache("heads", b"one\n")
        tx.write_cache("index", b"two\n")
    with backend.transaction(SID) as tx:
        tx.write_cache("heads", b"three\n")
        tx.write_cache("index", None)
    assert backend.cache(SID, "heads") == b"three\n"
    assert backend.cache(SID, "index") is None
    with backend.transaction(SID) as tx:
        tx.write_cache("index", b"three\n", append=True)  # onto none: a new cache
        tx.write_cache("index", b"four\n", append=True)
        tx.write_cache("heads", b"five\n", append=True)  # onto a stored one
        assert tx.cache(SID, "index") == b"three\nfour\n"
        assert tx.cache(SID, "heads") == b"three\nfive\n"
        tx.write_cache("heads", b"six\n")  # a replace drops what was appended
    assert backend.cache(SID, "index") == b"three\nfour\n"
    assert backend.cache(SID, "heads") == b"six\n"
    with backend.transaction(SID) as tx:
        tx.set_removed_checkpoints(["0a", "0b"])
    with backend.transaction(SID) as tx:
        tx.set_removed_checkpoints(["0c"])
    assert backend.removed_checkpoints(SID) == {"0c"}


def test_a_cache_is_written_outside_a_transaction(backend: Backend) -> None:
    """A reader that finds a cache behind repairs it without the session's lock."""
    seed(backend)
    append(backend, "first")  # the caches of the checkpoint code come with its log
    backend.write_cache(SID, "index", b"one\n", append=True)
    backend.write_cache(SID, "index", b"two\n", append=True)
    backend.write_cache(SID, "heads", b"three\n")
    assert backend.cache(SID, "index") == b"one\ntwo\n"
    assert backend.cache(SID, "heads") == b"three\n"
    backend.write_cache(SID, "heads", b"four\n")
    backend.write_cache(SID, "index", None, append=True)
    assert backend.cache(SID, "heads") == b"four\n"
    assert backend.cache(SID, "index") is None
    backend.destroy_session(SID)
    backend.write_cache(SID, "index", b"five\n", append=True)  # a session gone: nothing
    assert SID not in backend.session_ids()
