"""agctl.store.work: the unit of work the Store opens and hands down. A turn's path to the
storage transaction goes through the facade once and never climbs back up into it;
destructive edits are checkpointed first, from the work (Store.undoable); turn undo and
prune still follow the turns' checkpoints; input a rule refuses is refused before the work
opens its transaction."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from click.testing import Result
from helpers import documents, file_only

from agctl.base.errors import (
    InvalidId,
    NotFound,
    ProtectedSlot,
    ReadonlySlot,
    UsageError,
)
from agctl.context.models import Message
from agctl.providers.offline import OfflineProvider
from agctl.storage.memory import MemoryBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.work import Work, work_on
from agctl.turn.send import TurnOptions, send_turn

Run = Callable[..., Result]
SID = "s"


def turn(store: Store, prompt: str) -> str:
    result = send_turn(store, SID, prompt, OfflineProvider(), TurnOptions(model="offline"))
    assert result.checkpoint is not None
    return result.checkpoint


def clear(store: Store) -> None:
    with store.undoable(SID, "msg clear"):
        store.update_slot(SID, None, lambda slot: slot.clear())


# ---- the mechanism ---------------------------------------------------------------------


def test_an_undoable_edit_is_checkpointed_before_it_writes(store: Store) -> None:
    store.create_session(SID)
    turn(store, "one")
    before = documents(store)
    clear(store)
    assert store.load_slot(SID).messages == []
    keeper = Checkpointer(store)
    newest = keeper.load(SID, keeper.ids(SID)[0])
    assert (newest.label, newest.edit, newest.auto) == ("before msg clear", "msg clear", True)
    assert newest.turn_index == 1
    keeper.rollback(SID, newest.id)
    assert documents(store) == before


def test_an_edit_refused_before_writing_leaves_no_checkpoint(store: Store) -> None:
    store.create_session(SID)
    turn(store, "one")
    keeper = Checkpointer(store)
    ids = keeper.ids(SID)
    with pytest.raises(NotFound), store.undoable(SID, "msg rm"):
        store.update_slot(SID, None, lambda slot: slot.remove(99))
    assert keeper.ids(SID) == ids
    store.set_mode(SID, None, "readonly")
    with pytest.raises(ReadonlySlot), store.undoable(SID, "msg clear"):
        store.update_slot(SID, None, lambda slot: slot.clear())
    assert keeper.ids(SID) == ids


def test_only_the_first_write_of_the_block_is_checkpointed(store: Store) -> None:
    store.create_session(SID)
    store.create_slot(SID, "side", make_current=True)
    keeper = Checkpointer(store)
    with store.undoable(SID, "slot rm"):
        store.delete_slot(SID, "side")  # writes the session (falls back), removes the slot
        store.memory_set(SID, "after", "the edit")  # a later write in the block
    assert [s.label for s in keeper.summaries(SID)] == ["before slot rm"]
    assert store.load_session(SID).memory == {"after": "the edit"}
    # Outside a block, writes take no checkpoint.
    store.memory_set(SID, "k", "v")
    assert len(keeper.ids(SID)) == 1


# ---- turn undo follows the turns' checkpoints ------------------------------------------


def test_turn_undo_passes_over_edit_checkpoints(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    turn(store, "one")
    after_one = documents(store)
    turn(store, "two")
    with store.undoable(SID, "msg edit"):
        store.update_slot(SID, None, lambda slot: slot.edit(0, "edited"))
    restored, _ = keeper.undo(SID)
    assert restored.edit is None and restored.turn_index == 1
    assert documents(store) == after_one


def test_a_turn_after_an_edit_undoes_to_the_edited_state(store: Store) -> None:
    """The state the turn starts from is checkpointed when the latest checkpoint holds
    what an edit replaced: undo brings back the edited state, not the one before it."""
    store.create_session(SID)
    keeper = Checkpointer(store)
    turn(store, "one")
    clear(store)
    edited = documents(store)
    turn(store, "two")
    labels = [s.label for s in keeper.summaries(SID)]
    assert labels[:3] == ["after turn 2", "before turn 2", "before msg clear"]
    keeper.undo(SID)
    assert documents(store) == edited
    # A turn with no edit before it takes no extra checkpoint.
    turn(store, "two again")
    assert keeper.summaries(SID)[0].label == "after turn 2"
    assert keeper.summaries(SID)[1].label.startswith("before rollback")


def test_an_edit_before_the_first_turn_keeps_turn_zero_undoable(store: Store) -> None:
    store.create_session(SID)
    store.update_slot(SID, None, lambda slot: slot.append(Message(role="user", content="x")))
    clear(store)
    start = documents(store)
    turn(store, "one")
    Checkpointer(store).undo(SID)
    assert documents(store) == start


# ---- prune keeps what undo needs -------------------------------------------------------


def test_prune_keeps_what_undo_needs_for_the_last_n_turns(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    after = {1: turn(store, "one"), 2: turn(store, "two"), 3: turn(store, "three")}
    for index in range(3):
        with store.undoable(SID, "msg edit"):
            store.update_slot(SID, None, lambda slot, i=index: slot.edit(i, f"edit {i}"))
    edits = keeper.ids(SID)[:3]

    pruned = keeper.prune(SID, 2)

    # The newest two are edit checkpoints; turn undo 1 and 2 need turns 2 and 1.
    assert pruned.kept == edits[:2]
    assert pruned.kept_for_undo == [after[2], after[1]]
    assert set(keeper.ids(SID)) == {*edits[:2], after[2], after[1]}
    assert keeper.undo_targets(SID, 2) == {
        2: keeper.load(SID, after[2]),
        1: keeper.load(SID, after[1]),
    }
    keeper.undo(SID, 2)
    assert store.load_session(SID).turn_count == 1


def test_prune_all_ignores_what_undo_needs(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    for prompt in ("one", "two", "three"):
        turn(store, prompt)
    clear(store)
    pruned = keeper.prune(SID, 1, everything=True)
    assert pruned.kept_for_undo == [] and len(keeper.ids(SID)) == 1
    with pytest.raises(NotFound, match="turn 2"):
        keeper.undo(SID)


# ---- the eight commands, through the CLI -----------------------------------------------


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


EDITS: list[tuple[str, list[str]]] = [
    ("msg clear", ["msg", "clear"]),
    ("msg retain", ["msg", "retain", "user"]),
    ("msg rm", ["msg", "rm", "0"]),
    ("msg pop", ["msg", "pop"]),
    ("msg edit", ["msg", "edit", "1", "changed"]),
    ("msg pin", ["msg", "pin", "0", "-1"]),
    ("msg import --replace", ["msg", "import", "{messages}", "--replace"]),
    ("slot rm", ["slot", "rm", "side"]),
    ("slot merge", ["slot", "merge", "side"]),
]


@file_only
def test_every_destructive_edit_rolls_back_exactly(run: Run, store: Store, tmp_path: Path) -> None:
    messages = tmp_path / "messages.json"
    messages.write_text(json.dumps([{"role": "user", "content": "imported"}]))
    ok(run("session", "new", SID, "--system", "sys"))
    ok(run("turn", "send", "one"))
    ok(run("turn", "send", "two"))
    ok(run("slot", "derive", "side", "--use"))
    ok(run("turn", "send", "on the side"))
    ok(run("slot", "use", "default"))
    ok(run("memory", "set", "k", "v"))
    keeper = Checkpointer(store)
    for command, args in EDITS:
        before = documents(store)
        ok(run(*[arg.format(messages=messages) for arg in args]))
        assert documents(store) != before, command
        newest = keeper.summaries(SID)[0]
        assert (newest.label, newest.edit) == (f"before {command}", command)
        listed = json.loads(ok(run("ckpt", "list", "--json")).stdout)[0]
        assert listed["label"] == f"before {command}"
        ok(run("ckpt", "rollback", newest.id))
        assert documents(store) == before, command


@file_only
def test_prune_says_what_it_kept(run: Run, store: Store) -> None:
    ok(run("session", "new", SID))
    for prompt in ("one", "two", "three"):
        ok(run("turn", "send", prompt))
    ok(run("msg", "edit", "0", "x"))
    ok(run("msg", "edit", "0", "y"))
    keeper = Checkpointer(store)
    needed = keeper.checkpoint_at_turn(SID, 2).id
    text = ok(run("ckpt", "prune", "--keep", "1")).stdout.strip()
    assert text == (
        f"removed 4 checkpoint(s); kept the newest 1 and 1 that 'turn undo' needs for the "
        f"last 1 turns: {needed}"
    )
    result = json.loads(ok(run("ckpt", "prune", "--keep", "1", "--all", "--json")).stdout)
    assert result["removed"] == [needed] and result["kept_for_undo"] == []


def traced_turn(store: Store) -> list[tuple[str, str, str]]:
    """Every call and return in agctl's modules during one checkpointed offline turn:
    (event, module, function)."""
    events: list[tuple[str, str, str]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if event in ("call", "return") and module.startswith("agctl"):
            events.append((event, module, frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        send_turn(store, "s", "hello", OfflineProvider(), TurnOptions(model="offline"))
    finally:
        sys.setprofile(None)
    return events


def test_a_turn_reaches_its_transaction_through_the_facade_once() -> None:
    store = Store(backend=MemoryBackend())
    store.create_session("s")
    stack: list[tuple[str, str]] = []
    path: list[str] = []
    facade = set()  # what the turn's commit asks of the facade
    calls_down = []  # what the turn's commit calls below the facade, in order
    for event, module, name in traced_turn(store):
        if event == "return":
            stack.pop()
            continue
        if module == "agctl.storage.memory" and name == "transaction" and not path:
            path = [f"{m}:{n}" for m, n in stack]
        if stack and stack[-1] == ("agctl.turn.send", "_commit") and name != "<module>":
            if module == "agctl.store.facade":
                facade.add(name)
            elif module.startswith("agctl.store.") and module != "agctl.store.work":
                calls_down.append(f"{module}:{name}")
        stack.append((module, name))
    assert facade == {"work"}
    # The lock is taken by the work the facade opened, before the commit holds interrupts.
    assert path == [
        "agctl.turn.send:send_turn",
        "agctl.turn.send:_send",
        "agctl.turn.send:_commit",
        "agctl.store.work:locked",
        "agctl.store.work:tx",
        "agctl.store.work:_open",
    ]
    # Each a return to the turn between two steps of its one unit of work.
    assert calls_down == [
        "agctl.store.checkpoints.restore:baseline",
        "agctl.store.slots:append_turn",
        "agctl.store.slots:update_session",
        "agctl.store.drafts:clear_draft",
        "agctl.store.checkpoints.planner:create",
    ]


def test_what_precedes_the_first_change_runs_once_and_only_before_a_change() -> None:
    backend = MemoryBackend()
    backend_store = Store(backend=backend)
    backend_store.create_session("s")
    ran: list[str] = []
    with work_on(backend, "s", lambda work: ran.append(work.session_id)) as work:
        work.load_slot()
        assert ran == []  # a read is no change
        work.changing()
        work.changing()
    assert ran == ["s"]


def test_a_work_reads_its_own_writes_and_resolves_the_current_slot() -> None:
    store = Store(backend=MemoryBackend())
    store.create_session("s")
    with store.work("s") as work:
        assert isinstance(work, Work)
        session = work.load_session()
        session.title = "inside"
        work.changing().put_session(session)
        assert work.load_session().title == "inside"
        assert work.load_slot().id == work.slot_id(None) == "default"
    assert store.load_session("s").title == "inside"


def test_a_work_that_raises_writes_nothing() -> None:
    store = Store(backend=MemoryBackend())
    store.create_session("s")
    with pytest.raises(RuntimeError), store.work("s") as work:
        session = work.load_session()
        session.title = "lost"
        work.changing().put_session(session)
        raise RuntimeError("stop")
    assert store.load_session("s").title is None


@pytest.mark.parametrize(
    ("call", "refused"),
    [
        (lambda store: store.create_slot("gone", "bad id!"), InvalidId),
        (lambda store: store.create_slot("gone", "x", mode="zz"), UsageError),
        (lambda store: store.derive_slot("gone", "x", strategy="zz"), UsageError),
        (lambda store: store.delete_slot("gone", "default"), ProtectedSlot),
        (lambda store: store.configure_slot("gone", None, {"zz": 1}), UsageError),
        (lambda store: store.configure_session("gone", {"zz": 1}), UsageError),
    ],
)
def test_input_a_rule_refuses_is_refused_before_the_session_is_opened(
    call: Any, refused: type[Exception]
) -> None:
    """As before the unit of work: the same error for the same input whatever the
    session, and no lock waited for (the work opens its transaction on first use)."""
    store = Store(backend=MemoryBackend())
    with pytest.raises(refused) as caught:
        call(store)
    assert not isinstance(caught.value, NotFound)
