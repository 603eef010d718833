"""agctl.serve.warm: the slot a served turn committed is handed to the next turn on it,
and what goes upstream is byte for byte what a store read afresh sends, a write by
another process between two turns included."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_openai import FakeOpenAI
from helpers import add, msg

from agctl.context.models import Slot
from agctl.serve.chat import parse_chat, run_chat
from agctl.serve.warm import WarmSlots, warm_slots
from agctl.store import Store
from agctl.turn.setup import ModelChoice

SESSION = "s"
ELSEWHERE = "written by another process"


def served(root: Path, *, cold: bool) -> list[bytes]:
    """Three turns served on SESSION of the store in `root`, a message appended by another
    Store (another process) after the first; with `cold`, each turn on a new Store
    (nothing kept warm). The upstream's request bodies, as sent."""
    store, other = Store(root), Store(root)
    store.create_session(SESSION, system_prompt="Be brief.")
    add(store, SESSION, None, msg("user", "first"), msg("assistant", "yes"))
    choice = ModelChoice(provider="openai", model="fake-model")
    with FakeOpenAI() as upstream:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AGCTL_BASE_URL", upstream.base_url)
            patch.setenv("AGCTL_API_KEY", "k")
            for number in range(3):
                chat = parse_chat({"messages": [{"role": "user", "content": f"turn {number}"}]})
                serving = Store(root) if cold else store
                placed, result = run_chat(serving, chat, choice, session=SESSION)
                assert (placed.slot, result.reply.text()) == ("default", f"echo: turn {number}")
                if number == 0:
                    add(other, SESSION, None, msg("user", ELSEWHERE))
        if not cold:
            # The last turn's slot is kept, as the store holds it now.
            kept = warm_slots(store).take(SESSION, "default")
            assert kept is not None and kept.rev == other.load_slot(SESSION).rev
            assert len(kept.messages) == 9
        return [request.raw for request in upstream.requests]


def test_a_warm_slot_sends_what_a_fresh_read_sends(tmp_path: Path) -> None:
    warm, cold = served(tmp_path / "warm", cold=False), served(tmp_path / "cold", cold=True)
    assert warm == cold
    assert [ELSEWHERE.encode() in body for body in warm] == [False, True, True]


def test_a_slot_written_elsewhere_since_the_last_turn_is_read_again_before_placing(
    tmp_path: Path,
) -> None:
    """A client resending its history that lacks what another process appended parts
    from the slot there: a branch, as on a slot read afresh."""
    store = Store(tmp_path)
    history = [{"role": "user", "content": "first"}]
    choice = ModelChoice(provider="offline")
    placed, result = run_chat(store, parse_chat({"messages": history}), choice)
    assert warm_slots(store).take(placed.session, "default") is not None
    warm_slots(store).keep(placed.session, result.slot)  # as run_chat left it
    add(Store(tmp_path), placed.session, None, msg("user", ELSEWHERE))
    history += [{"role": "assistant", "content": result.reply.text()}]
    later = parse_chat({"messages": [*history, {"role": "user", "content": "second"}]})
    again, _ = run_chat(store, later, choice)
    assert (again.session, again.slot, again.branched_at) == (placed.session, "default-2", 2)


def test_a_slot_is_held_by_one_request_at_a_time_and_the_oldest_goes_first(
    tmp_path: Path,
) -> None:
    kept = WarmSlots(size=2)
    slots = {name: Slot(id=name) for name in ("a", "b", "c")}
    for slot in slots.values():
        kept.keep("s", slot)
    assert kept.take("s", "a") is None  # the oldest, dropped past the size
    assert kept.take("s", "b") is slots["b"]
    assert kept.take("s", "b") is None  # taken: no second request gets it
    assert kept.take("s", "c") is slots["c"]
    store = Store(tmp_path)
    assert warm_slots(store) is warm_slots(store) is not warm_slots(Store(tmp_path))
