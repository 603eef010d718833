"""Drafts: `draft show`/`draft rm`, superseded by a later turn on their slot, and refused
by --resume-draft once their slot changed (unless --force)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from click.testing import Result

from agctl.drafts import check_resumable, find_draft, new_draft, staleness
from agctl.errors import NotFound, ProviderError, SlotChanged, StaleDraft
from agctl.models import Draft, Message, utcnow
from agctl.providers.base import ChatRequest, Event, TextDelta
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turns import TurnOptions, send_turn

Run = Callable[..., Result]
SID = "s"
OPTIONS = TurnOptions(model="offline")


class Broken:
    name = "broken"

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        raise ProviderError("down")
        yield TextDelta("")  # pragma: no cover


def fail(store: Store, prompt: str, slot: str | None = None) -> Draft:
    with pytest.raises(ProviderError):
        send_turn(store, SID, prompt, Broken(), TurnOptions(model="offline", slot=slot))
    return store.load_draft(SID, slot or "default")


def succeed(store: Store, prompt: str, slot: str | None = None) -> None:
    send_turn(store, SID, prompt, OfflineProvider(), TurnOptions(model="offline", slot=slot))


def append(store: Store, text: str, slot: str | None = None) -> None:
    store.update_slot(SID, slot, lambda s: s.append(Message(role="user", content=text)))


@pytest.fixture
def session(store: Store) -> Store:
    store.create_session(SID)
    succeed(store, "first")
    return store


# ---- a later turn supersedes the draft of its slot -------------------------------------


def test_a_later_turn_on_the_slot_clears_its_older_draft(session: Store) -> None:
    fail(session, "lost cause")
    succeed(session, "something else")
    assert session.draft_slots(SID) == []


def test_a_turn_on_another_slot_keeps_the_draft(session: Store) -> None:
    session.create_slot(SID, "other")
    fail(session, "keep me")
    succeed(session, "elsewhere", slot="other")
    assert session.load_draft(SID, "default").prompt == "keep me"


def test_a_draft_kept_after_the_turn_started_stays(session: Store) -> None:
    later = Draft(prompt="newer", slot="default", created_at=utcnow() + timedelta(hours=1))
    session.save_draft(SID, later)
    succeed(session, "now")
    assert session.load_draft(SID, "default").prompt == "newer"


# ---- what "older than the slot's last change" means ------------------------------------


def test_a_draft_records_its_slot_and_is_fresh_until_the_slot_changes(session: Store) -> None:
    draft = fail(session, "question")
    assert draft.slot_messages == 2 and draft.slot_state is not None
    assert staleness(session, SID, draft) is None
    check_resumable(session, SID, draft)

    append(session, "meanwhile")
    reason = staleness(session, SID, draft)
    assert reason is not None and "2 messages then, 3 now" in reason
    with pytest.raises(StaleDraft, match="older than the last change of slot 'default'") as e:
        check_resumable(session, SID, draft)
    assert e.value.exit_code == 4 and "--force" in str(e.value)


def test_an_edit_that_keeps_the_count_makes_the_draft_stale(session: Store) -> None:
    draft = fail(session, "question")
    session.update_slot(SID, None, lambda s: s.edit(0, "rewritten"))
    assert "messages or settings were changed" in str(staleness(session, SID, draft))


def test_a_rollback_to_an_older_state_makes_the_draft_stale(session: Store) -> None:
    """Times cannot tell this: the restored slot carries its old updated_at."""
    from agctl.checkpoints import Checkpointer

    keeper = Checkpointer(session)
    start = keeper.ids(SID)[-1]  # before turn 1
    draft = fail(session, "question")
    keeper.rollback(SID, start)
    assert session.load_slot(SID).meta.updated_at < draft.created_at
    assert staleness(session, SID, draft) is not None


def test_a_draft_kept_after_the_slot_changed_under_the_turn_is_fresh(session: Store) -> None:
    class EditedMeanwhile:
        name = "edited"

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            session.update_slot(SID, None, lambda s: s.edit(0, "changed by another"))
            yield TextDelta("an answer")

    with pytest.raises(SlotChanged):
        send_turn(session, SID, "question", EditedMeanwhile(), OPTIONS)
    draft = session.load_draft(SID, "default")
    assert draft.reply is not None
    assert staleness(session, SID, draft) is None


def test_a_draft_without_a_recorded_slot_goes_by_time(session: Store) -> None:
    old = Draft(prompt="old", slot="default", created_at=utcnow() - timedelta(hours=1))
    assert "changed at" in str(staleness(session, SID, old))
    new = Draft(prompt="new", slot="default", created_at=utcnow() + timedelta(hours=1))
    assert staleness(session, SID, new) is None


def test_find_draft_by_slot(session: Store) -> None:
    session.save_draft(SID, new_draft(session, SID, session.load_slot(SID), "p", "boom"))
    assert find_draft(session, SID, "default").prompt == "p"
    with pytest.raises(NotFound, match=r"'other' of session 's' has no draft \(drafts are kept for: default\)"):
        find_draft(session, SID, "other")


# ---- the CLI ---------------------------------------------------------------------------


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def test_draft_show_and_rm(run: Run, session: Store) -> None:
    result = run("-s", SID, "draft", "show")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == f"agctl: error: session {SID!r} has no draft\n"
    assert run("-s", SID, "draft", "rm").exit_code == 3

    fail(session, "my long question")
    shown = ok(run("-s", SID, "draft", "show"))
    assert shown.stdout == "my long question\n"
    assert "draft for slot default, kept " in shown.stderr and "after: down" in shown.stderr
    row = json.loads(ok(run("-s", SID, "draft", "show", "--slot", "default", "--json")).stdout)
    assert row["prompt"] == "my long question" and row["slot"] == "default"
    assert row["stale"] is None and row["error"] == "down" and row["reply"] is None
    assert run("-s", SID, "draft", "show", "--slot", "nope").exit_code == 3

    append(session, "meanwhile")
    stale = ok(run("-s", SID, "draft", "show"))
    assert "stale: its slot changed since" in stale.stderr
    assert json.loads(ok(run("-s", SID, "draft", "show", "--json")).stdout)["stale"]

    removed = json.loads(ok(run("-s", SID, "draft", "rm", "--json")).stdout)
    assert removed["prompt"] == "my long question"
    assert run("-s", SID, "draft", "show").exit_code == 3


def test_a_damaged_draft_can_be_removed(run: Run, session: Store) -> None:
    fail(session, "fine")
    session.create_slot(SID, "other")
    fail(session, "lost to a bad disk", slot="other")
    (session.session_dir(SID) / "drafts" / "other.json").write_text("{not json")
    assert run("-s", SID, "draft", "show", "--slot", "other").exit_code == 5
    listed = json.loads(ok(run("-s", SID, "draft", "show", "--all", "--json")).stdout)
    assert [row["slot"] for row in listed] == ["default", "other"]
    assert "damaged" in listed[1] and "other.json" in listed[1]["damaged"]
    text = ok(run("-s", SID, "draft", "rm", "--slot", "other")).stdout
    assert text.startswith("removed a damaged draft: ")
    assert session.draft_slots(SID) == ["default"]


def test_resume_draft_refuses_a_stale_draft_unless_forced(run: Run, session: Store) -> None:
    fail(session, "the question")
    append(session, "meanwhile")
    refused = run("-s", SID, "turn", "send", "--resume-draft")
    assert refused.exit_code == 4 and refused.stdout == ""
    assert "the draft is older than the last change of slot 'default'" in refused.stderr
    assert "2 messages then, 3 now" in refused.stderr
    assert len(session.load_slot(SID).messages) == 3

    ok(run("-s", SID, "turn", "send", "--resume-draft", "--force"))
    assert session.load_slot(SID).messages[-2].text() == "the question"
    assert run("-s", SID, "draft", "show").exit_code == 3


def test_resume_draft_sends_a_fresh_draft_to_its_slot(run: Run, session: Store) -> None:
    session.create_slot(SID, "other")
    fail(session, "for other", slot="other")
    assert run("-s", SID, "turn", "send", "--resume-draft", "--slot", "default").exit_code == 3
    ok(run("-s", SID, "turn", "send", "--resume-draft"))
    assert session.load_slot(SID, "other").messages[0].text() == "for other"


def test_force_needs_resume_draft(run: Run, session: Store) -> None:
    result = run("-s", SID, "turn", "send", "hi", "--force")
    assert result.exit_code == 2 and "--force applies only with --resume-draft" in result.stderr
