"""Drafts: `draft show`/`draft rm`, superseded by a later turn on their slot, and refused
by --resume-draft once their slot changed (unless --force)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import Result
from helpers import draft_file, exited_zero, fail_turn, file_only, succeed_turn

from agctl.base.errors import (
    AgctlError,
    NotFound,
    ProviderError,
    SchemaTooNew,
    SlotChanged,
    StaleDraft,
    UsageError,
)
from agctl.context.models import Draft, Message, utcnow
from agctl.providers.base import ChatRequest, Event, TextDelta
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.store.drafts import (
    check_resumable,
    draft_slot,
    find_draft,
    new_draft,
    remove_draft,
    resumable_draft,
    staleness,
)
from agctl.turn.send import TurnOptions, send_turn

Run = Callable[..., Result]
SID = "s"
OPTIONS = TurnOptions(model="offline")


def append(store: Store, text: str, slot: str | None = None) -> None:
    store.update_slot(SID, slot, lambda s: s.append(Message(role="user", content=text)))


@pytest.fixture
def session(store: Store) -> Store:
    store.create_session(SID)
    succeed_turn(store, "first")
    return store


# ---- a later turn supersedes the draft of its slot -------------------------------------


def test_a_later_turn_on_the_slot_clears_its_older_draft(session: Store) -> None:
    fail_turn(session, "lost cause")
    succeed_turn(session, "something else")
    assert session.draft_slots(SID) == []


def test_a_turn_on_another_slot_keeps_the_draft(session: Store) -> None:
    session.create_slot(SID, "other")
    fail_turn(session, "keep me")
    succeed_turn(session, "elsewhere", slot="other")
    assert session.load_draft(SID, "default").prompt == "keep me"


def test_a_turn_on_another_slot_keeps_the_draft_one_on_its_slot_clears_it(store: Store) -> None:
    store.create_session("s")
    store.create_slot("s", "other")

    class Broken:
        name = "broken"

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            raise ProviderError("down")
            yield TextDelta("")  # pragma: no cover

    with pytest.raises(ProviderError):
        send_turn(store, "s", "long careful prompt", Broken(), OPTIONS)
    elsewhere = TurnOptions(model="offline", slot="other")
    send_turn(store, "s", "quick question", OfflineProvider(), elsewhere)
    assert store.load_draft("s", "default").prompt == "long careful prompt"
    send_turn(store, "s", "a different question", OfflineProvider(), OPTIONS)
    with pytest.raises(AgctlError):
        store.load_draft("s", "default")


def test_a_draft_kept_after_the_turn_started_stays(session: Store) -> None:
    later = Draft(prompt="newer", slot="default", created_at=utcnow() + timedelta(hours=1))
    session.save_draft(SID, later)
    succeed_turn(session, "now")
    assert session.load_draft(SID, "default").prompt == "newer"


# ---- one draft per slot ------------------------------------------------------------------


def test_without_a_slot_the_current_slots_draft_else_the_only_one(session: Store) -> None:
    for name in ("b", "c"):
        session.create_slot(SID, name)
    with pytest.raises(NotFound, match="session 's' has no draft"):
        draft_slot(session.backend, SID)
    fail_turn(session, "for b", slot="b")
    assert draft_slot(session.backend, SID) == "b"  # the only one, though not current
    fail_turn(session, "for c", slot="c")
    with pytest.raises(UsageError, match="drafts for slots b, c, none for the current slot") as e:
        draft_slot(session.backend, SID)
    assert e.value.exit_code == 2 and "--slot" in str(e.value)
    fail_turn(session, "for default")
    assert find_draft(session.backend, SID).prompt == "for default"  # the current slot's wins
    session.use_slot(SID, "c")
    assert find_draft(session.backend, SID).prompt == "for c"
    assert find_draft(session.backend, SID, "b").prompt == "for b"


def test_remove_draft_drops_only_the_draft_it_read(session: Store) -> None:
    session.create_slot(SID, "other")
    fail_turn(session, "mine")
    fail_turn(session, "theirs", slot="other")
    removed = remove_draft(session.backend, SID)
    assert isinstance(removed, Draft) and removed.prompt == "mine"
    assert session.draft_slots(SID) == ["other"]
    assert not session.clear_draft(SID, "default")


# ---- what "older than the slot's last change" means ------------------------------------


def test_a_draft_records_its_slot_and_is_fresh_until_the_slot_changes(session: Store) -> None:
    draft = fail_turn(session, "question")
    assert draft.slot_messages == 2 and draft.slot_state is not None
    assert staleness(session.backend, SID, draft) is None
    check_resumable(session.backend, SID, draft)

    append(session, "meanwhile")
    reason = staleness(session.backend, SID, draft)
    assert reason is not None and "2 messages then, 3 now" in reason
    with pytest.raises(StaleDraft, match="older than the last change of slot 'default'") as e:
        check_resumable(session.backend, SID, draft)
    assert e.value.exit_code == 4 and "--force" in str(e.value.hint)


def test_an_edit_that_keeps_the_count_makes_the_draft_stale(session: Store) -> None:
    draft = fail_turn(session, "question")
    session.update_slot(SID, None, lambda s: s.edit(0, "rewritten"))
    assert "messages or settings were changed" in str(staleness(session.backend, SID, draft))


def test_a_rollback_to_an_older_state_makes_the_draft_stale(session: Store) -> None:
    """Times cannot tell this: the restored slot carries its old updated_at."""
    from agctl.store.checkpointer import Checkpointer

    keeper = Checkpointer(session)
    start = keeper.ids(SID)[-1]  # before turn 1
    draft = fail_turn(session, "question")
    keeper.rollback(SID, start)
    assert session.load_slot(SID).meta.updated_at < draft.created_at
    assert staleness(session.backend, SID, draft) is not None


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
    assert staleness(session.backend, SID, draft) is None


def test_a_draft_without_a_recorded_slot_goes_by_time(session: Store) -> None:
    old = Draft(prompt="old", slot="default", created_at=utcnow() - timedelta(hours=1))
    assert "changed at" in str(staleness(session.backend, SID, old))
    new = Draft(prompt="new", slot="default", created_at=utcnow() + timedelta(hours=1))
    assert staleness(session.backend, SID, new) is None


def test_find_draft_by_slot(session: Store) -> None:
    session.save_draft(SID, new_draft(session.backend, SID, session.load_slot(SID), "p", "boom"))
    assert find_draft(session.backend, SID, "default").prompt == "p"
    kept_for = r"'other' of session 's' has no draft \(drafts are kept for: default\)"
    with pytest.raises(NotFound, match=kept_for):
        find_draft(session.backend, SID, "other")


# ---- the CLI ---------------------------------------------------------------------------


@file_only
def test_draft_show_and_rm(run: Run, session: Store) -> None:
    result = run("-s", SID, "draft", "show")
    assert (result.exit_code, result.stdout) == (3, "")
    assert result.stderr == f"agctl: error: session {SID!r} has no draft\n"
    assert run("-s", SID, "draft", "rm").exit_code == 3

    fail_turn(session, "my long question")
    shown = exited_zero(run("-s", SID, "draft", "show"))
    assert shown.stdout == "my long question\n"
    assert "draft for slot default, kept " in shown.stderr and "after: down" in shown.stderr
    row = json.loads(
        exited_zero(run("-s", SID, "draft", "show", "--slot", "default", "--json")).stdout
    )
    assert row["prompt"] == "my long question" and row["slot"] == "default"
    assert row["stale"] is None and row["error"] == "down" and row["reply"] is None
    assert run("-s", SID, "draft", "show", "--slot", "nope").exit_code == 3

    append(session, "meanwhile")
    stale = exited_zero(run("-s", SID, "draft", "show"))
    assert "stale: its slot changed since" in stale.stderr
    assert json.loads(exited_zero(run("-s", SID, "draft", "show", "--json")).stdout)["stale"]

    removed = json.loads(exited_zero(run("-s", SID, "draft", "rm", "--json")).stdout)
    assert removed["prompt"] == "my long question"
    assert run("-s", SID, "draft", "show").exit_code == 3


@file_only
def test_resume_draft_refuses_a_stale_draft_unless_forced(run: Run, session: Store) -> None:
    fail_turn(session, "the question")
    append(session, "meanwhile")
    refused = run("-s", SID, "turn", "send", "--resume-draft")
    assert refused.exit_code == 4 and refused.stdout == ""
    assert "the draft is older than the last change of slot 'default'" in refused.stderr
    assert "2 messages then, 3 now" in refused.stderr
    assert len(session.load_slot(SID).messages) == 3

    exited_zero(run("-s", SID, "turn", "send", "--resume-draft", "--force"))
    assert session.load_slot(SID).messages[-2].text() == "the question"
    assert run("-s", SID, "draft", "show").exit_code == 3


@file_only
def test_resume_draft_sends_a_fresh_draft_to_its_slot(run: Run, session: Store) -> None:
    session.create_slot(SID, "other")
    fail_turn(session, "for other", slot="other")
    assert run("-s", SID, "turn", "send", "--resume-draft", "--slot", "default").exit_code == 3
    exited_zero(run("-s", SID, "turn", "send", "--resume-draft"))
    assert session.load_slot(SID, "other").messages[0].text() == "for other"


@file_only
def test_force_needs_resume_draft(run: Run, session: Store) -> None:
    result = run("-s", SID, "turn", "send", "hi", "--force")
    assert result.exit_code == 2 and "--force applies only with --resume-draft" in result.stderr


@file_only
def test_a_draft_whose_slot_was_removed_can_be_shown_and_removed(run: Run, session: Store) -> None:
    session.create_slot(SID, "gone")
    fail_turn(session, "for a slot that goes", slot="gone")
    session.delete_slot(SID, "gone")
    shown = exited_zero(run("-s", SID, "draft", "show"))  # the only draft, though its slot is gone
    assert shown.stdout == "for a slot that goes\n"
    assert "its slot is gone" in shown.stderr and "--slot gone | agctl turn send -" in shown.stderr
    row = json.loads(
        exited_zero(run("-s", SID, "draft", "show", "--slot", "gone", "--json")).stdout
    )
    assert row["stale"].startswith("is gone")
    refused = run("-s", SID, "turn", "send", "--resume-draft", "--force")
    assert refused.exit_code == 3 and "'gone' not found" in refused.stderr
    assert session.draft_slots(SID) == ["gone"]
    removed = json.loads(
        exited_zero(run("-s", SID, "draft", "rm", "--slot", "gone", "--json")).stdout
    )
    assert removed["prompt"] == "for a slot that goes"
    assert session.draft_slots(SID) == []


@file_only
def test_resume_draft_without_slot_follows_the_same_rule(run: Run, session: Store) -> None:
    for name in ("b", "c"):
        session.create_slot(SID, name)
    fail_turn(session, "for b", slot="b")
    fail_turn(session, "for c", slot="c")
    asked = run("-s", SID, "turn", "send", "--resume-draft")
    assert (asked.exit_code, asked.stdout) == (2, "")
    assert "drafts for slots b, c" in asked.stderr and "--slot" in asked.stderr
    asked = run("-s", SID, "draft", "rm")
    assert asked.exit_code == 2 and "drafts for slots b, c" in asked.stderr
    exited_zero(run("-s", SID, "turn", "send", "--resume-draft", "--slot", "c"))
    assert session.load_slot(SID, "c").messages[0].text() == "for c"
    assert session.draft_slots(SID) == ["b"]
    exited_zero(run("-s", SID, "turn", "send", "--resume-draft"))  # now the only one
    assert session.load_slot(SID, "b").messages[0].text() == "for b"
    assert session.draft_slots(SID) == []


@file_only
def test_draft_show_all(run: Run, session: Store) -> None:
    assert exited_zero(run("-s", SID, "draft", "show", "--all", "--json")).stdout.strip() == "[]"
    assert (
        exited_zero(run("-s", SID, "draft", "show", "--all")).stderr == "session s has no draft\n"
    )
    session.create_slot(SID, "other")
    fail_turn(session, "first line\nsecond line")
    fail_turn(session, "for other", slot="other")
    append(session, "meanwhile", slot="other")
    text = exited_zero(run("-s", SID, "draft", "show", "--all")).stdout.splitlines()
    assert text[0].split() == ["SLOT", "KEPT", "STATE", "PROMPT"]
    assert text[1].split()[::2] == ["default", "fresh", "line"] and "second" not in text[1]
    assert text[2].split()[0::2][:2] == ["other", "stale"]
    rows = json.loads(exited_zero(run("-s", SID, "draft", "show", "--all", "--json")).stdout)
    assert [(r["slot"], r["prompt"], bool(r["stale"])) for r in rows] == [
        ("default", "first line\nsecond line", False),
        ("other", "for other", True),
    ]
    both = run("-s", SID, "draft", "show", "--all", "--slot", "other")
    assert both.exit_code == 2 and "either --slot or --all" in both.stderr


# ---- real processes ----------------------------------------------------------------------


def child_env(isolated_env: Path, tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, "AGCTL_DATA_DIR": str(isolated_env), "PYTHONIOENCODING": "utf-8"}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg-config")
    for name in ("AGCTL_SESSION", "AGCTL_LOG", "AGCTL_CONFIG", "AGCTL_API_KEY"):
        env.pop(name, None)
    return env


def agctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agctl", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@file_only
def test_failed_turns_on_two_slots_keep_both_prompts(
    session: Store, isolated_env: Path, tmp_path: Path
) -> None:
    """The review's repro, as a user types it, against a server that is not there."""
    env = child_env(isolated_env, tmp_path)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    for step in (
        ["config", "set", "max_retries", "0"],
        ["profile", "add", "dead", "--base-url", url, "--model", "m"],
        ["-s", SID, "slot", "new", "other"],
        ["-s", SID, "slot", "use", "default"],
    ):
        assert agctl(env, *step).returncode == 0, step
    first = agctl(env, "-s", SID, "turn", "send", "prompt A", "--profile", "dead")
    assert first.returncode == 6 and "'agctl turn send --resume-draft'" in first.stderr
    second = agctl(
        env, "-s", SID, "turn", "send", "prompt B", "--profile", "dead", "--slot", "other"
    )
    assert second.returncode == 6
    assert "'agctl turn send --resume-draft --slot other'" in second.stderr
    assert agctl(env, "-s", SID, "draft", "show").stdout == "prompt A\n"
    assert agctl(env, "-s", SID, "draft", "show", "--slot", "other").stdout == "prompt B\n"


@file_only
def test_draft_rm_waits_for_the_session_lock_and_removes_what_it_reports(
    session: Store, isolated_env: Path, tmp_path: Path
) -> None:
    """Before: draft rm read the draft, then removed whatever was there, without the lock:
    a draft a turn kept in between was dropped unseen. Now it waits for the lock, which
    this test holds while it replaces the draft."""
    fail_turn(session, "the draft rm saw first")
    env = child_env(isolated_env, tmp_path)
    command = [sys.executable, "-m", "agctl", "-v", "-s", SID, "--json", "draft", "rm"]
    with session.lock(SID):
        child = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        try:
            assert child.stderr is not None
            seen = []
            for line in child.stderr:
                seen.append(line)
                if "waiting up to" in line:
                    break
            else:
                pytest.fail(f"draft rm did not wait for the session lock: {seen}")
            fail_turn(session, "kept by a turn while draft rm waited")
        except BaseException:
            child.kill()
            raise
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert json.loads(out)["prompt"] == "kept by a turn while draft rm waited"
    assert session.draft_slots(SID) == []


# ---- the draft document's version --------------------------------------------------------


@file_only
def test_a_draft_is_versioned_and_one_of_a_newer_major_version_is_refused(
    session: Store, isolated_env: Path
) -> None:
    fail_turn(session, "lost")
    path = isolated_env / draft_file(SID)
    kept = json.loads(path.read_bytes())
    assert kept["schema_version"] == "1.0"
    del kept["schema_version"]  # as an older agctl kept it: read as 1.0
    path.write_text(json.dumps(kept))
    assert session.load_draft(SID, "default").prompt == "lost"
    path.write_text(json.dumps({**kept, "schema_version": "2.0"}))
    with pytest.raises(SchemaTooNew, match=r"draft document has schema version 2\.0.* 1\.0"):
        session.load_draft(SID, "default")


# agctl.store.drafts.resumable_draft: which draft `turn send --resume-draft` sends, and
# when not.


@pytest.fixture
def drafted(store: Store) -> Store:
    """A session whose 'default' slot has a draft kept from its current state."""
    store.create_session(SID)
    slot = store.load_slot(SID, None)
    store.save_draft(SID, new_draft(store.backend, SID, slot, "the question", "the model was down"))
    return store


def test_a_fresh_draft_is_resumable(drafted: Store) -> None:
    draft = resumable_draft(drafted.backend, SID)
    assert (draft.prompt, draft.slot) == ("the question", "default")
    assert resumable_draft(drafted.backend, SID, "default").prompt == "the question"


def test_a_draft_whose_slot_changed_is_refused_unless_forced(drafted: Store) -> None:
    message = Message(role="user", content="meanwhile")
    drafted.update_slot(SID, None, lambda slot: slot.append(message))
    with pytest.raises(StaleDraft):
        resumable_draft(drafted.backend, SID)
    assert resumable_draft(drafted.backend, SID, force=True).prompt == "the question"


def test_no_draft_for_the_slot_named(drafted: Store) -> None:
    with pytest.raises(NotFound, match="has no draft"):
        resumable_draft(drafted.backend, SID, "other")
