"""agctl.base.ids: session ids, short and sorting by time; ids that are no safe name refused."""

from __future__ import annotations

import re

import pytest
from helpers import file_only

from agctl.base.errors import (
    InvalidId,
)
from agctl.base.ids import new_session_id
from agctl.store import Store


def test_generated_ids_are_short_and_sort_by_time() -> None:
    first, second = new_session_id(1_800_000_000), new_session_id(1_800_000_001)
    assert re.fullmatch(r"[0-9a-z]{10}", first)
    assert first[:7] < second[:7]
    assert len({new_session_id(1_800_000_000) for _ in range(50)}) > 40


@file_only
@pytest.mark.parametrize(
    "bad", ["", "..", "a/b", "../x", "a:b", "a\x00b", "a\nb", ".hidden", "-opt", "x" * 129, "a..b"]
)
def test_unsafe_ids_are_refused(store: Store, bad: str) -> None:
    with pytest.raises(InvalidId):
        store.create_session(bad)
    sid = store.create_session("ok").id
    with pytest.raises(InvalidId):
        store.create_slot(sid, bad)
    with pytest.raises(InvalidId):
        store.load_slot(sid, bad)
    assert not list(store.root.parent.glob("x*"))
