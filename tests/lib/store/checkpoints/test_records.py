"""agctl.store.checkpoints.records: a checkpoint's id is its offset in the log, in base32."""

from __future__ import annotations

import pytest

from agctl.base.errors import NotFound
from agctl.base.ids import BASE32_ALPHABET, new_session_id
from agctl.store.checkpoints import checkpoint_id, checkpoint_offset


def test_checkpoint_ids_are_base32_offsets_in_the_alphabet_of_session_ids() -> None:
    pinned = {0: "0000", 31: "000z", 1_234_567: "15nm7", 32**5: "100000"}
    assert {offset: checkpoint_id(offset) for offset in pinned} == pinned
    assert all(checkpoint_offset(identifier) == o for o, identifier in pinned.items())
    assert set("".join(pinned.values())) <= set(BASE32_ALPHABET)
    assert new_session_id(1_800_000_000)[:7] == "1nmkmg0"  # the same digits, time-sortable
    with pytest.raises(NotFound):
        checkpoint_offset("00il")  # letters base32 leaves out to be read unambiguously
