"""Fencing two writers on one slot (`if_unchanged`), over each backend: a second writer
commits while the first turn waits on its provider, and the fenced turn is refused with
its reply kept in the draft; without the fence the same race commits after the other."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agctl.base.errors import SlotChanged, SlotMoved
from agctl.context.models import ToolCall
from agctl.providers.base import ChatRequest, Event, Finish, TextDelta
from agctl.providers.offline import OfflineProvider, ScriptedReply
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.drafts import resumable_draft
from agctl.turn.send import TurnOptions, send_turn
from agctl.turn.steps import CallRecord
from agctl.turn.transcripts import TranscriptTurn, replay

SID = "s"
PLAIN = TurnOptions(model="offline")
FENCED = TurnOptions(model="offline", if_unchanged=True)


class AnswersAfterAnotherWriter:
    """A provider that, while 'answering', lets another thread write to the slot (and
    waits for it to finish), then answers: the race of two writers on one slot. What
    the store holds right after the other writer is kept in `seen`."""

    name = "after-another-writer"

    def __init__(self, store: Store, write: Callable[[Store], Any]) -> None:
        self.store = store
        self.write = write
        self.seen: dict[str, Any] = {}
        self.errors: list[BaseException] = []

    def _other_writer(self) -> None:
        try:
            self.write(self.store)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.errors.append(exc)

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        other = threading.Thread(target=self._other_writer)
        other.start()
        other.join()
        assert self.errors == []
        self.seen = stored_state(self.store)
        yield TextDelta("the answer")
        yield Finish("stop")


def other_turn(store: Store) -> None:
    send_turn(store, SID, "other turn", OfflineProvider(), PLAIN)


def stored_state(store: Store) -> dict[str, Any]:
    """The session, its slots and its checkpoint ids as stored (revisions included)."""
    session = store.load_session(SID)
    return {
        "session": session.model_dump(mode="json"),
        "slots": {
            slot_id: store.load_slot(SID, slot_id).model_dump(mode="json")
            | {"rev": store.load_slot(SID, slot_id).rev}
            for slot_id in store.slot_ids(SID)
        },
        "checkpoints": Checkpointer(store).ids(SID),
    }


def texts(store: Store) -> list[str]:
    return [m.text() for m in store.load_slot(SID).messages]


@pytest.fixture
def session(store: Store) -> Store:
    store.create_session(SID)
    send_turn(store, SID, "first", OfflineProvider(), PLAIN)
    return store


def test_a_fenced_turn_is_refused_when_another_turn_commits_meanwhile(session: Store) -> None:
    provider = AnswersAfterAnotherWriter(session, other_turn)

    with pytest.raises(SlotMoved) as caught:
        send_turn(session, SID, "question", provider, FENCED)

    error = caught.value
    assert isinstance(error, SlotChanged) and error.exit_code == 4
    assert "2 messages were appended; --if-unchanged refuses any change" in str(error)
    notes = "\n".join(error.__notes__)
    assert "kept as a draft" in notes and "the answer" in notes
    draft = session.load_draft(SID, "default")
    assert (draft.prompt, draft.reply and draft.reply.text()) == ("question", "the answer")
    state = stored_state(session)
    assert state == provider.seen  # the refused turn wrote nothing, not even a checkpoint
    assert state["session"]["turn_count"] == 2
    assert "question" not in texts(session) and texts(session)[2] == "other turn"


def test_without_the_fence_the_same_race_commits_after_the_other_turn(session: Store) -> None:
    provider = AnswersAfterAnotherWriter(session, other_turn)

    result = send_turn(session, SID, "question", provider, PLAIN)

    assert result.reply.text() == "the answer" and result.turn == 2
    assert texts(session)[2] == "other turn"
    assert texts(session)[-2:] == ["question", "the answer"]
    assert session.load_session(SID).turn_count == 3
    assert session.draft_slots(SID) == []


def rewrite_unchanged(store: Store) -> None:
    store.update_slot(SID, None, lambda slot: slot)


def test_any_write_of_the_slot_moves_it_even_one_that_changes_no_message(
    session: Store,
) -> None:
    """The fence compares revisions, not contents: a slot written again has moved."""
    with pytest.raises(SlotMoved, match="it was written again"):
        send_turn(session, SID, "q", AnswersAfterAnotherWriter(session, rewrite_unchanged), FENCED)
    result = send_turn(
        session, SID, "q", AnswersAfterAnotherWriter(session, rewrite_unchanged), PLAIN
    )
    assert result.reply.text() == "the answer"


def test_a_change_refused_anyway_says_what_changed(session: Store) -> None:
    """An edit is refused with or without the fence: the error says so, not the fence."""

    def edit(store: Store) -> None:
        store.update_slot(SID, None, lambda slot: slot.edit(0, "changed by another"))

    with pytest.raises(SlotChanged, match="edited or replaced") as caught:
        send_turn(session, SID, "q", AnswersAfterAnotherWriter(session, edit), FENCED)
    assert not isinstance(caught.value, SlotMoved)


def test_a_write_to_another_slot_does_not_move_this_one(session: Store) -> None:
    session.create_slot(SID, "other")

    def turn_on_other_slot(store: Store) -> None:
        send_turn(store, SID, "elsewhere", OfflineProvider(), TurnOptions("offline", slot="other"))

    provider = AnswersAfterAnotherWriter(session, turn_on_other_slot)
    result = send_turn(session, SID, "question", provider, FENCED)
    assert result.reply.text() == "the answer"
    assert texts(session)[-2:] == ["question", "the answer"]


def test_fenced_turns_in_a_row_commit_when_no_one_else_writes(session: Store) -> None:
    """A turn's own commit, and the slot it hands the next turn (`reuse`), do not trip
    the fence of the next one."""
    first = send_turn(session, SID, "one", OfflineProvider(), FENCED)
    second = send_turn(session, SID, "two", OfflineProvider(), FENCED, reuse=first.slot)
    assert (first.turn, second.turn) == (2, 3)
    assert texts(session)[-4::2] == ["one", "two"]


def test_the_refused_turn_is_sent_again_from_its_draft_on_the_new_context(
    session: Store,
) -> None:
    with pytest.raises(SlotMoved):
        send_turn(session, SID, "question", AnswersAfterAnotherWriter(session, other_turn), FENCED)
    draft = resumable_draft(session.backend, SID)  # not stale: it records the slot as it is now

    result = send_turn(session, SID, draft.prompt, OfflineProvider(), FENCED)

    assert texts(session)[2] == "other turn" and texts(session)[-2] == "question"
    assert result.turn == 3 and session.draft_slots(SID) == []


class Echo:
    """A ToolBox with one tool, `echo`, answered in process: the loop is under test."""

    def definitions(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "echo", "parameters": {}}}]

    def begin_turn(self) -> None:
        pass

    def end_turn(self) -> None:
        pass

    def run(self, call: ToolCall) -> tuple[str, CallRecord]:
        record = CallRecord(call.id, call.function.name, call.function.arguments, exit=0)
        return call.function.arguments, record


def test_a_fenced_tool_loop_is_not_tripped_by_its_own_step_log(session: Store) -> None:
    """Each step's results are kept in the draft as they come: the slot does not move."""
    call = {"id": "c1", "name": "echo", "arguments": "{}"}
    script = [[ScriptedReply(tool_calls=[call]), ScriptedReply("done")]]
    options = TurnOptions(model="offline", tools=Echo(), if_unchanged=True)

    result = send_turn(session, SID, "use the tool", OfflineProvider(script), options)

    assert result.reply.text() == "done"
    assert [m.role for m in session.load_slot(SID).messages][-4:] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_a_fenced_replay_stops_at_the_turn_another_writer_raced(session: Store) -> None:
    """Replay keeps no draft (its transcript has the prompts): the turns before stay."""
    replies = iter([OfflineProvider(), AnswersAfterAnotherWriter(session, other_turn)])

    class SecondTurnRaced:
        name = "second-turn-raced"

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            return next(replies).stream(request)

    turns = [TranscriptTurn(input="r1"), TranscriptTurn(input="r2")]
    with pytest.raises(SlotMoved) as caught:
        replay(session, SID, turns, SecondTurnRaced(), FENCED)

    assert "the replay stopped at turn 2 of 2" in "\n".join(caught.value.__notes__)
    prompts = [m.text() for m in session.load_slot(SID).messages if m.role == "user"]
    assert prompts == ["first", "r1", "other turn"]
    assert session.draft_slots(SID) == []
