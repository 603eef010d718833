"""The journal of a turn that older agctl left in the session dir, a turn cut after its
commit point, which the redo journal finishes, a turn whose slot another process changed
while the model answered (refused, its reply kept in the draft), and a recording through a
linked cassette."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from helpers import agctl_process, dying_after_one_change

from agctl.base.errors import SlotChanged
from agctl.context.models import Message
from agctl.providers.base import ChatRequest, Event, Finish, TextDelta
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn

OPTIONS = TurnOptions(model="offline")


@pytest.fixture
def sid(store: Store) -> str:
    session = store.create_session("s", system_prompt="Be brief.")
    store.update_slot(session.id, None, lambda s: s.append(Message(role="user", content="hi")))
    return session.id


def test_a_turn_journal_of_an_older_agctl_is_dropped(store: Store, sid: str) -> None:
    """An older agctl's turn.json (its turns were journalled apart): not replayed, but
    removed, with a warning, by the first writer of a later process."""
    journal = store.session_dir(sid) / "turn.json"
    journal.write_text(
        json.dumps(
            {
                "slot": "default",
                "message_count": 3,
                "last_hash": "0" * 32,
                "turn_before": 0,
                "model": "offline",
            }
        )
    )
    later = Store(store.root)
    later.memory_set(sid, "k", "v")
    assert not journal.exists()
    assert later.load_session(sid).turn_count == 0


def test_a_turn_cut_after_its_commit_point_is_completed_by_the_next_writer(
    store: Store, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with dying_after_one_change():  # the slot's new messages are written, nothing else
        send_turn(store, sid, "cut short", OfflineProvider(), OPTIONS)
    fresh = Store(store.root)
    assert fresh.pending_recovery(sid)
    fresh.memory_set(sid, "next", "writer")  # any writer finishes the commit first
    session = fresh.load_session(sid)
    assert session.turn_count == 1 and session.cost.by_model["offline"].requests == 1
    assert fresh.load_slot(sid).messages[-2].text() == "cut short"
    assert len(fresh.load_slot(sid).messages) == 3, "the messages are appended once only"
    assert not fresh.pending_recovery(sid)
    fresh.memory_set(sid, "again", "once")
    assert fresh.load_session(sid).turn_count == 1, "accounted once only"


Run = Callable[..., Result]


SID = "s"


# ---- a turn whose slot changed under it -----------------------------------------------------


class Meddler:
    """A provider that, while 'answering', runs another agctl process against the slot."""

    name = "meddler"

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.env = env
        self.args = args

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        done = agctl_process(self.env, "-s", SID, *self.args)
        assert done.returncode == 0, done.stderr
        yield TextDelta("the answer")
        yield Finish("stop")


@pytest.mark.parametrize(
    "args",
    [
        ("msg", "clear"),
        ("msg", "edit", "0", "changed"),
        ("msg", "pop"),
        ("slot", "mode", "focused"),
        ("ckpt", "rollback", "{first}"),
    ],
    ids=["clear", "edit", "pop", "mode", "rollback"],
)
def test_a_turn_is_refused_when_its_slot_changed_while_the_model_answered(
    store: Store, env: dict[str, str], session: str, args: tuple[str, ...]
) -> None:
    """Before: the reply, computed from the old context, landed on the new state (exit 0)."""
    first = Checkpointer(store).ids(SID)[-1]
    args = tuple(first if a == "{first}" else a for a in args)
    with pytest.raises(SlotChanged) as caught:
        send_turn(store, SID, "question", Meddler(env, *args), TurnOptions(model="m"))
    assert caught.value.exit_code == 4
    texts = [m.text() for m in store.load_slot(SID).messages]
    assert "the answer" not in texts and "question" not in texts
    draft = store.load_draft(SID, "default")
    assert draft.prompt == "question"
    assert draft.reply is not None and draft.reply.text() == "the answer"


def test_a_turn_appended_by_another_process_meanwhile_is_kept_in_order(
    store: Store, env: dict[str, str], session: str
) -> None:
    result = send_turn(
        store,
        SID,
        "question",
        Meddler(env, "turn", "send", "other turn"),
        TurnOptions(model="m"),
    )
    texts = [m.text() for m in store.load_slot(SID).messages]
    assert texts[-4] == "other turn" and texts[-2:] == ["question", "the answer"]
    assert result.turn == 2 and store.load_session(SID).turn_count == 3


def test_a_refused_turn_exits_4_on_the_command_line(
    run: Run, env: dict[str, str], isolated_env: Path, session: str, tmp_path: Path
) -> None:
    """Through the CLI: a `msg clear` (another process) while the model answers."""
    from fake_openai import FakeOpenAI

    cleared: list[subprocess.CompletedProcess[str]] = []
    agctl = [sys.executable, "-m", "agctl", "-s", SID]
    with FakeOpenAI() as server:
        server.before_reply(
            lambda: cleared.append(
                subprocess.run([*agctl, "msg", "clear"], env=env, capture_output=True, text=True)
            )
        )
        child_env = {**env, "AGCTL_BASE_URL": server.base_url, "AGCTL_PROVIDER": "openai"}
        child_env["AGCTL_MODEL"] = "m"
        turn = subprocess.Popen(
            [*agctl, "turn", "send", "question"],
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _out, err = turn.communicate(timeout=60)
    assert server.errors == [] and [c.returncode for c in cleared] == [0], cleared
    assert turn.returncode == 4, err
    assert "changed while the model was answering" in err
    draft = json.loads((isolated_env / "sessions" / SID / "drafts" / "default.json").read_text())
    assert draft["prompt"] == "question" and draft["reply"]["content"]
    assert draft["reply"]["content"] in err  # shown, and kept in the draft
    assert json.loads(run("-s", SID, "msg", "list", "--json").stdout) == []


def test_record_appends_through_a_linked_cassette(run: Run, session: str, tmp_path: Path) -> None:
    """The cassette is the user's own file: a link into a fixtures folder still works
    (a review caught the store's no-link rule applied to it)."""
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    real = fixtures / "chat.cassette"
    real.write_text("")
    link = tmp_path / "chat.cassette"
    link.symlink_to(real)
    result = run("-s", SID, "turn", "send", "recorded", "--record", str(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and b"recorded" in real.read_bytes()
