"""agctl.base.ids: session ids, short and sorting by time."""

from __future__ import annotations

import re

from agctl.base.ids import new_session_id


def test_generated_ids_are_short_and_sort_by_time() -> None:
    first, second = new_session_id(1_800_000_000), new_session_id(1_800_000_001)
    assert re.fullmatch(r"[0-9a-z]{10}", first)
    assert first[:7] < second[:7]
    assert len({new_session_id(1_800_000_000) for _ in range(50)}) > 40
