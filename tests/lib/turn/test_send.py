"""Turns on the offline, scripted and replay providers: commit, failure, drafts, cassettes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import OPTIONS, data_dir_files, file_only

from agctl.base.errors import ProviderError, ReadonlySlot, StoreError, TurnInterrupted
from agctl.context.models import Draft, Message
from agctl.providers.base import ChatRequest, Event, Finish, ReasoningDelta, TextDelta
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn


class ListProvider:
    """A provider replying with a fixed list of events, remembering each request."""

    name = "list"

    def __init__(self, events: list[Event], fail_after: BaseException | None = None) -> None:
        self.events = events
        self.fail_after = fail_after
        self.requests: list[ChatRequest] = []

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.requests.append(request)
        yield from self.events
        if self.fail_after is not None:
            raise self.fail_after


def test_offline_turn_commits_prompt_and_reply(store: Store, sid: str) -> None:
    result = send_turn(store, sid, "What now?", OfflineProvider(), OPTIONS)
    assert result.turn == 1 and result.slot_id == "default"
    assert 'turn 1 in slot "default"' in result.reply.text()
    assert 'you said "What now?"' in result.reply.text()
    assert "(3 messages in context)" in result.reply.text()
    messages = store.load_slot(sid).messages
    assert [(m.role, m.text()) for m in messages[1:]] == [
        ("user", "What now?"),
        ("assistant", result.reply.text()),
    ]
    assert messages[-1].model == "offline" and messages[-1].tokens == result.usage.completion_tokens
    session = store.load_session(sid)
    assert session.turn_count == 1
    assert session.cost.by_model["offline"].requests == 1
    assert session.cost.prompt_tokens == result.usage.prompt_tokens > 0


@file_only
def test_empty_reply_is_an_error_and_writes_nothing(store: Store, sid: str) -> None:
    before = data_dir_files(store.root)
    with pytest.raises(ProviderError, match="empty reply"):
        send_turn(store, sid, "hello?", ListProvider([Finish("stop")]), OPTIONS)
    assert store.load_slot(sid).messages == store.load_slot(sid).messages[:1]
    assert {k: v for k, v in data_dir_files(store.root).items() if "draft" not in k} == before


@file_only
def test_interrupt_mid_stream_writes_nothing_and_keeps_a_draft(store: Store, sid: str) -> None:
    before = data_dir_files(store.root)
    provider = ListProvider([TextDelta("partial ")], fail_after=KeyboardInterrupt())
    with pytest.raises(TurnInterrupted) as caught:
        send_turn(store, sid, "my long question", provider, OPTIONS)
    assert str(caught.value) == "interrupted"  # the note says the rest, once
    (note,) = caught.value.__notes__
    assert note.startswith("nothing was written; ") and "--resume-draft" in note
    assert {k: v for k, v in data_dir_files(store.root).items() if "draft" not in k} == before
    assert store.load_draft(sid, "default").prompt == "my long question"


@file_only
def test_an_unexpected_error_mid_stream_keeps_the_draft_and_goes_on_as_it_came(
    store: Store, sid: str
) -> None:
    before = data_dir_files(store.root)
    bug = RuntimeError("a bug in a provider")
    provider = ListProvider([TextDelta("partial ")], fail_after=bug)
    with pytest.raises(RuntimeError) as caught:
        send_turn(store, sid, "my precious question", provider, OPTIONS)
    assert caught.value is bug  # the same error, its traceback intact, not a library error
    (note,) = caught.value.__notes__
    assert note.startswith("nothing was written; ") and "--resume-draft" in note
    assert {k: v for k, v in data_dir_files(store.root).items() if "draft" not in k} == before
    draft = store.load_draft(sid, "default")
    assert (draft.prompt, draft.error) == (
        "my precious question",
        "RuntimeError: a bug in a provider",
    )


@file_only
def test_ctrl_c_while_fitting_the_request_keeps_a_draft_and_says_when(
    store: Store, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agctl.turn import send as turns

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(turns, "fit_breakdown", interrupted)
    provider = ListProvider([TextDelta("never asked")])
    before = data_dir_files(store.root)
    with pytest.raises(TurnInterrupted, match=r"^interrupted while fitting the request in the"):
        send_turn(store, sid, "fit me", provider, TurnOptions(model="offline", window=100_000))
    assert provider.requests == []
    assert {k: v for k, v in data_dir_files(store.root).items() if "draft" not in k} == before
    assert store.load_draft(sid, "default").prompt == "fit me"


@file_only
@pytest.mark.parametrize(
    ("failure", "raised", "says"),
    [
        (KeyboardInterrupt(), TurnInterrupted, "interrupted before the reply was written"),
        (StoreError("No space left on device"), StoreError, "No space left on device"),
    ],
    ids=["interrupted", "store-error"],
)
def test_a_reply_that_could_not_be_written_is_kept_with_the_prompt_and_shown(
    store: Store,
    sid: str,
    monkeypatch: pytest.MonkeyPatch,
    failure: BaseException,
    raised: type[Exception],
    says: str,
) -> None:
    def failing(*args: object, **kwargs: object) -> None:
        raise failure

    before = data_dir_files(store.root)
    monkeypatch.setattr("agctl.store.slots.append_messages", failing)
    provider = ListProvider([TextDelta("the answer"), Finish("stop")])
    with pytest.raises(raised) as caught:  # no checkpoint: its dropped baseline changes the log
        send_turn(store, sid, "keep both", provider, TurnOptions(model="offline", checkpoint=False))
    assert str(caught.value) == says
    assert "the model's reply, which was not written:\nthe answer" in caught.value.__notes__
    monkeypatch.undo()
    assert {k: v for k, v in data_dir_files(store.root).items() if "draft" not in k} == before
    draft = store.load_draft(sid, "default")
    assert draft.prompt == "keep both" and draft.reply is not None
    assert draft.reply.text() == "the answer"


@file_only
def test_a_turn_whose_accounting_fails_writes_none_of_it(
    store: Store, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One unit of work: messages, count and cost, and checkpoints commit together."""
    from agctl.turn import send as turns

    def unaccounted(*args: object, **kwargs: object) -> None:
        raise StoreError("cannot count the turn")

    before = data_dir_files(store.root)
    monkeypatch.setattr(turns, "account", unaccounted)
    with pytest.raises(StoreError) as caught:
        send_turn(store, sid, "not written", OfflineProvider(), OPTIONS)
    monkeypatch.undo()
    assert "the model's reply, which was not written:" in "\n".join(caught.value.__notes__)
    assert {k: v for k, v in data_dir_files(store.root).items() if "draft" not in k} == before
    assert [m.text() for m in store.load_slot(sid).messages] == ["hi"]
    assert store.load_draft(sid, "default").prompt == "not written"


def test_a_draft_that_cannot_be_saved_puts_the_prompt_in_the_error(
    store: Store, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(session_id: str, draft: Draft) -> Path:
        raise StoreError("cannot write drafts/default.json: No space left on device")

    monkeypatch.setattr(store, "save_draft", full_disk)
    provider = ListProvider([], fail_after=ProviderError("boom"))
    with pytest.raises(ProviderError) as caught:
        send_turn(store, sid, "do not lose me", provider, OPTIONS)
    notes = "\n".join(caught.value.__notes__)
    assert "do not lose me" in notes and "No space left" in notes


def test_successful_turn_clears_the_draft(store: Store, sid: str) -> None:
    store.save_draft(sid, Draft(prompt="old", slot="default"))
    send_turn(store, sid, "old", OfflineProvider(), OPTIONS)
    assert store.draft_slots(sid) == []


def test_readonly_slot_refuses_before_the_provider_is_called(store: Store, sid: str) -> None:
    store.set_mode(sid, None, "readonly")
    provider = ListProvider([TextDelta("never")])
    with pytest.raises(ReadonlySlot):
        send_turn(store, sid, "hi", provider, OPTIONS)
    assert provider.requests == []


def test_request_holds_the_view_scratch_and_turn_options(store: Store, sid: str) -> None:
    store.update_slot(sid, None, lambda s: s.append(Message(role="assistant", content="a1")))
    store.set_mode(
        sid, None, "focused", focus={"recent_messages": 1, "stride": 1, "summary_override": "S"}
    )
    provider = ListProvider([TextDelta("ok"), Finish("stop")])
    options = TurnOptions(
        model="m", temperature=0.2, max_tokens=50, scratch=["cwd=/tmp"], system="Just now."
    )
    send_turn(store, sid, "next", provider, options)
    request = provider.requests[0]
    assert [(m["role"], m["content"]) for m in request.messages] == [
        ("system", "Just now."),
        ("system", "S"),
        ("assistant", "a1"),
        ("system", "cwd=/tmp"),
        ("user", "next"),
    ]
    assert request.params() == {"temperature": 0.2, "max_tokens": 50}
    stored = [m.text() for m in store.load_slot(sid).messages]
    assert stored == ["hi", "a1", "next", "ok"]
    assert store.load_session(sid).system_prompt == "Be brief."


def test_turn_on_another_slot_leaves_the_current_one(store: Store, sid: str) -> None:
    store.derive_slot(sid, "branch")
    send_turn(store, sid, "in branch", OfflineProvider(), TurnOptions(model="x", slot="branch"))
    assert len(store.load_slot(sid, "branch").messages) == 3
    assert len(store.load_slot(sid).messages) == 1


def test_a_reply_that_cannot_be_written_is_shown_and_the_prompt_kept(store: Store) -> None:
    store.create_session("s")

    class LockedMeanwhile:
        name = "locked"

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            store.set_mode("s", None, "readonly")  # another process, while the model answers
            yield TextDelta("a costly answer")

    with pytest.raises(ReadonlySlot) as caught:
        send_turn(store, "s", "my question", LockedMeanwhile(), OPTIONS)
    notes = "\n".join(caught.value.__notes__)
    assert "a costly answer" in notes and "--resume-draft" in notes
    assert store.load_draft("s", "default").prompt == "my question"
    assert store.load_slot("s").messages == []


@pytest.mark.parametrize(
    "fields", [{"temperature": float("nan")}, {"temperature": 3.0}, {"max_tokens": 2**70}]
)
def test_turn_options_refuse_what_the_cli_refuses(fields: dict[str, Any]) -> None:
    from agctl.base.errors import UsageError

    with pytest.raises(UsageError):
        TurnOptions(model="m", **fields)


# ---- the CLI on the offline provider -------------------------------------------------


@pytest.fixture
def cli_session(run: Callable[..., Result]) -> str:
    assert run("session", "new", "c", "--system", "sys").exit_code == 0
    return "c"


def test_turn_send_json_result(run: Callable[..., Result], cli_session: str) -> None:
    result = run("turn", "send", "hello", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= {"session", "slot", "turn", "model", "reply", "usage", "cost"}
    assert (data["session"], data["slot"], data["turn"], data["model"]) == (
        "c",
        "default",
        1,
        "offline",
    )
    assert data["cost"] == 0.0 and data["usage"]["completion_tokens"] > 0


def test_turn_send_from_stdin_prints_the_reply(
    run: Callable[..., Result], cli_session: str
) -> None:
    result = run("turn", "send", input="piped question\n")
    assert result.exit_code == 0
    assert 'you said "piped question"' in result.stdout
    assert result.stdout.count("\n") == 1


@file_only
def test_dry_run_prints_the_request_and_writes_nothing(
    run: Callable[..., Result], cli_session: str, store: Store
) -> None:
    before = data_dir_files(store.root)
    result = run("turn", "send", "hello", "--dry-run", "--scratch", "now=noon")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert [m["content"] for m in data["request"]["messages"]] == ["sys", "now=noon", "hello"]
    assert data["tokens"] > 0 and data["turn"] == 1
    assert data_dir_files(store.root) == before


@file_only
def test_resume_draft_sends_the_failed_prompt(
    run: Callable[..., Result], cli_session: str, store: Store, tmp_path: Path
) -> None:
    script = tmp_path / "empty.json"
    script.write_text("[]")
    failed = run("turn", "send", "precious words", "--script", str(script))
    assert failed.exit_code == 6
    assert "--resume-draft" in failed.stderr and "nothing was written" in failed.stderr
    again = run("turn", "send", "--resume-draft")
    assert again.exit_code == 0, again.stderr
    assert store.load_slot("c").messages[0].text() == "precious words"
    assert run("turn", "send", "--resume-draft").exit_code == 3


def test_jsonl_prints_events_then_the_result(run: Callable[..., Result], cli_session: str) -> None:
    lines = [json.loads(line) for line in run("turn", "send", "hi", "--jsonl").stdout.splitlines()]
    assert {line["type"] for line in lines[:-1]} >= {"text", "usage", "finish"}
    assert lines[-1]["type"] == "result" and lines[-1]["turn"] == 1
    text = "".join(line["text"] for line in lines if line["type"] == "text")
    assert text == lines[-1]["reply"]


def test_a_write_during_the_call_is_kept_by_the_commit(store: Store, sid: str) -> None:
    class Interloper:
        """While the model 'thinks', another writer appends to the same slot."""

        name = "interloper"

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            store.update_slot(
                sid, None, lambda s: s.append(Message(role="user", content="meanwhile"))
            )
            yield TextDelta("answer")

    send_turn(store, sid, "question", Interloper(), OPTIONS)
    assert [m.text() for m in store.load_slot(sid).messages] == [
        "hi",
        "meanwhile",
        "question",
        "answer",
    ]


def test_earlier_reasoning_is_not_sent_back_but_is_kept(store: Store, sid: str) -> None:
    thinking = ListProvider([ReasoningDelta("secret thoughts"), TextDelta("answer")])
    send_turn(store, sid, "first", thinking, OPTIONS)
    follow = ListProvider([TextDelta("ok")])
    send_turn(store, sid, "second", follow, OPTIONS)
    assert all("reasoning_content" not in m for m in follow.requests[0].messages)
    assert store.load_slot(sid).messages[2].reasoning == "secret thoughts"


def test_a_loop_of_turns_reuses_the_committed_slot_only_while_unchanged(
    store: Store, sid: str
) -> None:
    first = send_turn(store, sid, "one", OfflineProvider(), OPTIONS)
    assert first.slot is not None
    assert store.load_slot(sid, reuse=first.slot) is first.slot, "unchanged: not parsed again"
    store.update_slot(sid, None, lambda s: s.append(Message(role="user", content="meanwhile")))
    assert store.load_slot(sid, reuse=first.slot) is not first.slot
    second = send_turn(store, sid, "two", OfflineProvider(), OPTIONS, reuse=first.slot)
    texts = [m.text() for m in store.load_slot(sid).messages]
    assert texts[:5] == ["hi", "one", first.reply.text(), "meanwhile", "two"]
    # system prompt, hi, one, reply, meanwhile, two: the second turn saw the change
    assert "(6 messages in context)" in second.reply.text()


def test_a_focused_slot_has_its_summary_rewritten_every_n_turns(store: Store, sid: str) -> None:
    from agctl.store.checkpointer import Checkpointer

    store.set_mode(sid, None, "focused", focus={"recent_messages": 2, "auto_summary_every": 2})
    summaries = []
    for n in range(1, 5):
        result = send_turn(store, sid, f"question {n}", OfflineProvider(), OPTIONS)
        assert result.summarized == (n % 2 == 0) and ("summarized" in result.to_dict()) == (
            n % 2 == 0
        )
        summaries.append(store.load_slot(sid).config.focused.summary_override)
    assert summaries[0] is None and summaries[1] and summaries[2] == summaries[1]
    assert summaries[3] and summaries[3] != summaries[1] and "question 3" in summaries[3]
    labels = [c.label for c in Checkpointer(store).summaries(sid)]
    assert labels.count("summary after turn 2") == 1 and labels.count("summary after turn 4") == 1
    assert not Checkpointer(store).verify(sid).problems
    store.set_mode(sid, None, "focused", focus={"auto_summary_every": 0})
    assert store.load_slot(sid).config.focused.auto_summary_every is None
