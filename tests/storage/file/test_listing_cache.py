"""The checkpoint listing without the heads cache the file backend keeps."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result
from helpers import checkpoints_dir

from agctl.store import Store
from agctl.store.checkpointer import Checkpointer

Run = Callable[..., Result]


def ok(run: Run, *args: str) -> Result:
    result = run(*args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def turns(run: Run) -> Checkpointer:
    """Session s with three turns (four checkpoints: before turn 1, after each turn)."""
    ok(run, "session", "new", "s")
    for text in ("one", "two", "three"):
        ok(run, "turn", "send", text)

    return Checkpointer(Store())


def live_ids(run: Run) -> list[str]:
    rows = json.loads(ok(run, "ckpt", "list", "--json").stdout)
    return [row["id"] for row in rows if row["live"]]


def test_the_comparison_needs_no_cache(run: Run, turns: Checkpointer) -> None:
    """Without the heads cache every slot is compared by content, with the same answer."""
    (checkpoints_dir(turns.store, "s") / "heads.json").unlink()
    assert live_ids(run) == [turns.ids("s")[0]]
    ok(run, "msg", "append", "user", "extra")
    assert live_ids(run) == []
