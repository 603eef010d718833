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


PLAN = "plan"


def build_five_slots(store: Store) -> dict[str, str]:
    """A session of five slots (`default`, `ideas` and `risks` derived from it, `costs`
    from `risks`, `summary` from `default`), a rollback, turns on each as the current
    slot, a merge and a manual checkpoint with a long label: the session the graph page must
    show whole in a 1400x800 window. The ids it made, by role."""
    keeper = Checkpointer(store)
    store.create_session(PLAN, title="Migration plan", system_prompt="You plan migrations.")
    first = _turn(store, PLAN, "List the services to move.")
    _turn(store, PLAN, "Which one first?")
    keeper.rollback(PLAN, first)
    _turn(store, PLAN, "Which one is the riskiest?")
    for name, source in (("ideas", "default"), ("risks", "default"), ("costs", "risks")):
        store.derive_slot(PLAN, name, source=source, strategy="full")
        store.use_slot(PLAN, name)
        _turn(store, PLAN, f"Go on with the {name}.")
    store.use_slot(PLAN, "risks")
    _turn(store, PLAN, "And the worst case?")
    merge_slots(store, PLAN, "costs", "risks", strategy="append")
    store.use_slot(PLAN, "default")
    _turn(store, PLAN, "Summarise so far.")
    store.derive_slot(PLAN, "summary", source="default", strategy="full")
    store.use_slot(PLAN, "summary")
    _turn(store, PLAN, "One paragraph for the board.")
    labelled = keeper.create(PLAN, label="board draft, agreed with finance and the on-call team")
    store.set_current_session(PLAN)
    return {"plan": PLAN, "first_checkpoint": first, "labelled_checkpoint": labelled.id}
