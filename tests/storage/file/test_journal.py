"""The file backend's redo journal against planted files: a journal someone else could have
written is not applied, one naming a file outside its session is refused, and a rollback cut
after its commit point is finished before a turn reads the slot.

Each test failed before its fix (its docstring says what happened then).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from helpers import dying_after_one_change

from agctl.context.models import Message
from agctl.providers.base import ChatRequest, Event, Finish, TextDelta
from agctl.reports.checkup import diagnose
from agctl.storage.encoding import encode_record
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn

Run = Callable[..., Result]


SID = "s"


# ---- journals planted by someone else --------------------------------------------------------


def _fake_rollback_journal(store: Store, isolated_env: Path) -> tuple[Path, str]:
    keeper = Checkpointer(store)
    oldest = keeper.ids(SID)[-1]
    journal = isolated_env / "sessions" / SID / "checkpoints" / "restoring.json"
    journal.write_text(json.dumps({"checkpoint": oldest}))
    return journal, oldest


def _planted_redo_journal(isolated_env: Path) -> Path:
    """A redo journal whose one pending record would empty the default slot."""
    from agctl.storage.file import journal as redo

    journal = isolated_env / "sessions" / SID / "journal"
    slot = {"id": "default", "messages": []}
    record = {"ops": [["put", "slots/default.json", redo.pack_data(json.dumps(slot).encode())]]}
    journal.write_bytes(redo._header(redo._header_size(), redo._BOOT) + encode_record(record))
    return journal


@pytest.mark.parametrize("kind", ["redo", "legacy"])
@pytest.mark.parametrize("how", ["group-writable", "world-writable", "other-owner"])
def test_a_planted_journal_is_not_applied(
    run: Run, store: Store, isolated_env: Path, session: str, how: str, kind: str
) -> None:
    """Before: any restoring.json found was replayed, rolling the session back."""
    assert run("-s", SID, "msg", "append", "user", "kept").exit_code == 0
    if kind == "redo":
        journal = _planted_redo_journal(isolated_env)
    else:
        journal, _ = _fake_rollback_journal(store, isolated_env)
    if how == "group-writable":
        os.chmod(journal, 0o620)
    elif how == "world-writable":
        os.chmod(journal, 0o666)
    else:
        if os.geteuid() != 0:
            pytest.skip("optional: changing a file's owner needs root")
        os.chmod(journal, 0o600)
        os.chown(journal, 65534, 65534)
    before = [m.text() for m in store.load_slot(SID).messages]
    result = run("-s", SID, "msg", "append", "user", "x")
    assert result.exit_code == 5
    assert str(journal) in result.stderr and "not applied" in result.stderr
    assert [m.text() for m in store.load_slot(SID).messages] == before
    findings = diagnose(store, fix=True)
    assert [f.kind for f in findings if f.kind == "journal"] == ["journal"]
    assert not journal.exists()
    assert run("-s", SID, "msg", "append", "user", "x").exit_code == 0


def test_a_trusted_journal_naming_a_file_outside_the_session_is_refused(
    run: Run, store: Store, isolated_env: Path, session: str
) -> None:
    from agctl.storage.file import journal as redo

    journal = isolated_env / "sessions" / SID / "journal"
    target = isolated_env / "planted"
    record = {"ops": [["put", "../../planted", redo.pack_data(b"owned")]]}
    journal.write_bytes(redo._header(redo._header_size(), redo._BOOT) + encode_record(record))
    os.chmod(journal, 0o600)
    result = run("-s", SID, "msg", "append", "user", "x")
    assert result.exit_code == 5, result.output
    assert "may not change" in result.stderr
    assert not target.exists()


def test_a_rollback_cut_after_its_commit_point_is_finished_before_a_turn_builds_its_view(
    store: Store, isolated_env: Path, session: str
) -> None:
    """Before: a turn read the half-restored slot without the lock and sent it."""
    store.update_slot(SID, None, lambda s: s.messages.append(Message(role="user", content="X")))
    keeper = Checkpointer(store)
    with dying_after_one_change():
        keeper.rollback(SID, keeper.ids(SID)[-1])
    assert store.pending_recovery(SID)
    seen: list[list[str]] = []

    class Spy:
        name = "spy"

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            seen.append([str(m.get("content")) for m in request.messages])
            yield TextDelta("ok")
            yield Finish("stop")

    send_turn(store, SID, "after", Spy(), TurnOptions(model="m"))
    assert not store.pending_recovery(SID)
    assert "X" not in seen[0] and "hello" not in seen[0]  # the baseline had neither
    assert seen[0][-1] == "after"
