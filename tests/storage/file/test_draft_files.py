"""Drafts on disk: one private file per slot, the single draft.json of older agctl adopted,
damaged and linked drafts."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import Result
from helpers import BrokenProvider, exited_zero, fail_turn, succeed_turn

from agctl.base.errors import (
    CorruptDocument,
    ProviderError,
)
from agctl.context.models import Draft, utcnow
from agctl.store import Store
from agctl.store.drafts import find_draft
from agctl.turn.send import TurnOptions, send_turn

Run = Callable[..., Result]
SID = "s"
OPTIONS = TurnOptions(model="offline")


@pytest.fixture
def session(store: Store) -> Store:
    store.create_session(SID)
    succeed_turn(store, "first")
    return store


def test_a_failed_turn_on_another_slot_keeps_each_slots_draft(session: Store) -> None:
    """Before: one draft.json per session, so the second failure threw the first away."""
    session.create_slot(SID, "other")
    fail_turn(session, "prompt A")
    fail_turn(session, "prompt B", slot="other")
    assert session.draft_slots(SID) == ["default", "other"]
    assert session.load_draft(SID, "default").prompt == "prompt A"
    assert session.load_draft(SID, "other").prompt == "prompt B"
    for name in ("default", "other"):
        path = session.session_dir(SID) / "drafts" / f"{name}.json"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((session.session_dir(SID) / "drafts").stat().st_mode) == 0o700
    succeed_turn(session, "done", slot="other")  # supersedes only its own slot's draft
    assert session.draft_slots(SID) == ["default"]


def test_a_legacy_draft_json_is_adopted_as_the_draft_of_its_slot(session: Store) -> None:
    """A data dir written by an agctl with one draft.json per session keeps working."""
    session.create_slot(SID, "other")
    legacy = session.session_dir(SID) / "draft.json"
    old = Draft(prompt="from before", slot="other", error="down")
    legacy.write_text(old.model_dump_json())
    assert session.draft_slots(SID) == ["other"]
    assert not legacy.exists()
    adopted = session.session_dir(SID) / "drafts" / "other.json"
    assert stat.S_IMODE(adopted.stat().st_mode) == 0o600
    assert find_draft(session.backend, SID).prompt == "from before"

    # A legacy draft older than the slot's own draft loses; a newer one wins.
    legacy.write_text(old.model_copy(update={"prompt": "older"}).model_dump_json())
    fail_turn(session, "newer", slot="other")
    assert session.load_draft(SID, "other").prompt == "newer" and not legacy.exists()
    later = Draft(prompt="newest", slot="other", created_at=utcnow() + timedelta(hours=1))
    legacy.write_text(later.model_dump_json())
    assert session.load_draft(SID, "other").prompt == "newest" and not legacy.exists()


def test_a_damaged_legacy_draft_is_reported_and_removable(run: Run, session: Store) -> None:
    legacy = session.session_dir(SID) / "draft.json"
    legacy.write_text("{not json")
    with pytest.raises(CorruptDocument, match=r"draft\.json"):
        session.draft_slots(SID)
    fail_turn(session, "a failed turn still keeps its draft")
    shown = run("-s", SID, "draft", "show")
    assert shown.exit_code == 5 and str(legacy) in shown.stderr
    assert exited_zero(run("-s", SID, "draft", "rm")).stdout.startswith("removed a damaged draft: ")
    assert not legacy.exists()
    assert (
        exited_zero(run("-s", SID, "draft", "show")).stdout
        == "a failed turn still keeps its draft\n"
    )


def test_a_damaged_draft_can_be_removed(run: Run, session: Store) -> None:
    fail_turn(session, "fine")
    session.create_slot(SID, "other")
    fail_turn(session, "lost to a bad disk", slot="other")
    (session.session_dir(SID) / "drafts" / "other.json").write_text("{not json")
    assert run("-s", SID, "draft", "show", "--slot", "other").exit_code == 5
    listed = json.loads(exited_zero(run("-s", SID, "draft", "show", "--all", "--json")).stdout)
    assert [row["slot"] for row in listed] == ["default", "other"]
    assert "damaged" in listed[1] and "other.json" in listed[1]["damaged"]
    text = exited_zero(run("-s", SID, "draft", "rm", "--slot", "other")).stdout
    assert text.startswith("removed a damaged draft: ")
    assert session.draft_slots(SID) == ["default"]


def test_a_linked_drafts_directory_is_refused_and_the_prompt_kept_in_the_error(
    run: Run, session: Store, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (session.session_dir(SID) / "drafts").symlink_to(elsewhere)
    with pytest.raises(ProviderError) as raised:
        send_turn(session, SID, "typed with care", BrokenProvider(), OPTIONS)
    notes = "\n".join(raised.value.__notes__)
    assert "the draft could not be kept" in notes and "symbolic link" in notes
    assert "typed with care" in notes
    assert list(elsewhere.iterdir()) == []
    shown = run("-s", SID, "draft", "show")
    assert shown.exit_code == 5 and "symbolic link" in shown.stderr
    succeed_turn(session, "a turn still commits")  # its draft clean-up is only a warning
    assert session.load_slot(SID).messages[-2].text() == "a turn still commits"
