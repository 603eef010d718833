"""The session graph scenario of issue 15, built through the library, offline: three
sessions, a fork, two derivations, a merge and a rollback. The golden files of every
renderer (tests/golden/graph/) and the HTML page's browser test draw it."""

from __future__ import annotations

from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.merge import merge_slots
from agctl.turn.send import TurnOptions, send_turn

CONSULT = "consult"
WHAT_IF = "what-if"
NOTES = "notes"


def _turn(store: Store, session_id: str, prompt: str, slot: str | None = None) -> str:
    """A turn with its automatic checkpoint; the checkpoint's id."""
    options = TurnOptions(model="offline", slot=slot)
    result = send_turn(store, session_id, prompt, OfflineProvider(), options)
    assert result.checkpoint is not None
    return result.checkpoint


def build_scenario(store: Store) -> dict[str, str]:
    """Build the scenario in `store`; the ids it made, by role.

    consult (current, slot `default` current): two turns, rolled back to the first;
    `draft` derived in full and `brief` derived focused from `default`; a turn in
    `draft`, merged back into `default`. what-if: forked from consult's first turn.
    notes: a child of consult made with `session new --parent`.
    """
    keeper = Checkpointer(store)
    store.create_session(CONSULT, title="Consultation", system_prompt="You are a careful advisor.")
    first = _turn(store, CONSULT, "Should we migrate the billing service?")
    _turn(store, CONSULT, "What if we wait a quarter?")
    _, before_rollback = keeper.rollback(CONSULT, first)
    store.derive_slot(CONSULT, "draft", source="default", strategy="full")
    store.derive_slot(
        CONSULT, "brief", source="default", strategy="focused", focus={"recent_messages": 2}
    )
    _turn(store, CONSULT, "Draft the migration plan.", slot="draft")
    merge_slots(store, CONSULT, "draft", "default", strategy="append")
    labelled = keeper.create(CONSULT, label="plan merged")
    keeper.fork(CONSULT, first, WHAT_IF)
    _turn(store, WHAT_IF, "Cost of staying on the old system?")
    store.create_session(NOTES, parent_id=CONSULT, title="Notes")
    store.set_current_session(CONSULT)
    store.use_slot(CONSULT, "default")
    return {
        "consult": CONSULT,
        "what_if": WHAT_IF,
        "notes": NOTES,
        "first_checkpoint": first,
        "before_rollback": before_rollback.id,
        "labelled_checkpoint": labelled.id,
    }
