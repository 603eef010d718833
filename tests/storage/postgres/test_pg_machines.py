"""Two machines on one database and schema (two data dirs): each sees the sessions and
turns the other writes; the current-session pointer stays each machine's own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agctl.providers.offline import OfflineProvider
from agctl.storage.postgres.backend import PostgresBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn

OFFLINE = TurnOptions(model="offline")


def texts(store: Store, session_id: str) -> list[str]:
    return [m.text() for m in store.load_slot(session_id).messages]


def test_two_machines_see_each_others_sessions_and_turns_but_not_their_pointer(
    open_backend: Callable[..., PostgresBackend], tmp_path: Path
) -> None:
    laptop_dir, runner_dir = tmp_path / "laptop", tmp_path / "runner"
    laptop = Store(backend=open_backend(laptop_dir))
    runner = Store(backend=open_backend(runner_dir))

    laptop.create_session("from-laptop")
    send_turn(laptop, "from-laptop", "asked on the laptop", OfflineProvider(), OFFLINE)
    runner.create_session("from-runner")
    send_turn(runner, "from-laptop", "asked on the runner", OfflineProvider(), OFFLINE)

    for machine in (laptop, runner):
        assert machine.session_ids() == ["from-laptop", "from-runner"]
        assert texts(machine, "from-laptop")[::2] == ["asked on the laptop", "asked on the runner"]
        assert machine.load_session("from-laptop").turn_count == 2
    assert Checkpointer(laptop).ids("from-laptop") == Checkpointer(runner).ids("from-laptop")
    assert len(Checkpointer(laptop).ids("from-laptop")) == 3  # before 1, after 1, after 2

    laptop.set_current_session("from-laptop")
    assert runner.current_session_id() is None
    runner.set_current_session("from-runner")
    assert laptop.current_session_id() == "from-laptop"
    assert runner.current_session_id() == "from-runner"
    # Kept on each machine: a backend opened again there finds its own.
    assert Store(backend=open_backend(laptop_dir)).current_session_id() == "from-laptop"
    assert Store(backend=open_backend(runner_dir)).current_session_id() == "from-runner"
    assert any(laptop_dir.rglob("*")) and any(runner_dir.rglob("*"))
