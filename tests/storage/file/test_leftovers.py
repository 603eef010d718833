"""Staging dirs another process left behind do not trip a new session up."""

from __future__ import annotations

import os
from collections.abc import Callable

from click.testing import Result

from agctl.store import Store
from agctl.turn.send import TurnOptions

Run = Callable[..., Result]
OPTIONS = TurnOptions(model="offline")


def test_parallel_creations_do_not_trip_over_each_others_leftovers(store: Store) -> None:
    stale = store.sessions_dir / ".new-gone-0000"
    store.sessions_dir.mkdir(parents=True)
    stale.mkdir()
    os.utime(stale, (0, 0))
    stale.rmdir()  # another process removed it between the listing and the stat
    store.create_session("fine")
    assert store.session_ids() == ["fine"]
