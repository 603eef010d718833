"""The offline provider: the same request gets the same reply, and what a script file may hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import OPTIONS, data_dir_files, draft_file, file_only

from agctl.base.errors import InvalidInput, ProviderError
from agctl.providers.base import ChatRequest, TextDelta, TurnContext
from agctl.providers.offline import OfflineProvider, load_script
from agctl.store import Store
from agctl.turn.send import prepare_turn, send_turn


@pytest.mark.parametrize(
    "reply", [{"content": 5}, {"content": "x", "reasoning": 5}, {"tool_calls": "lookup"}]
)
def test_a_script_of_the_wrong_types_is_refused(tmp_path: Path, reply: object) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([reply]))
    with pytest.raises(InvalidInput):
        load_script(path)


def test_offline_provider_is_deterministic(store: Store, sid: str) -> None:
    request = prepare_turn(store, sid, "Same?", OPTIONS).request
    first = list(OfflineProvider().stream(request))
    assert first == list(OfflineProvider().stream(request))
    assert "".join(e.text for e in first if isinstance(e, TextDelta)).startswith("Offline reply")


@file_only
def test_script_answers_by_turn_and_fails_past_the_end(
    store: Store, sid: str, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                "first answer",
                {"content": None, "tool_calls": [{"name": "lookup", "arguments": '{"q": 1}'}]},
            ]
        )
    )
    provider = OfflineProvider(load_script(script))
    assert send_turn(store, sid, "one", provider, OPTIONS).reply.text() == "first answer"
    second = send_turn(store, sid, "two", provider, OPTIONS)
    assert second.finish_reason == "tool_calls"
    call = second.reply.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("lookup", '{"q": 1}')
    before = data_dir_files(store.root)
    with pytest.raises(ProviderError, match=r"2 replies, .* its turn 3 \(the session's turn 3\)"):
        send_turn(store, sid, "three", provider, OPTIONS)
    after = data_dir_files(store.root)
    draft = after.pop(draft_file("s"))
    assert after == before
    assert json.loads(draft)["prompt"] == "three"


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("{", "neither JSON nor JSON lines"),
        ('{"a": 1}', "must be a list"),
        ("[3]", "reply 0"),
        ('[{"tool_calls": [{"id": "x"}]}]', "needs a name"),
    ],
)
def test_bad_scripts(tmp_path: Path, content: str, error: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InvalidInput, match=error):
        load_script(path)


def test_script_as_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('"a"\n{"content": "b", "reasoning": "r"}\n')
    replies = load_script(path)
    assert [(r.content, r.reasoning) for r in replies] == [("a", None), ("b", "r")]


def _asked(purpose: str, messages: list[dict[str, str]]) -> str:
    """The offline provider's whole answer to one request of `purpose`."""
    request = ChatRequest("offline", messages, context=TurnContext(purpose=purpose))
    return "".join(e.text for e in OfflineProvider().stream(request) if isinstance(e, TextDelta))


def test_a_probe_is_answered_from_the_context_before_it_only() -> None:
    context = [
        {"role": "system", "content": "[user] The staging database listens on port 5433."},
        {
            "role": "user",
            "content": "Lunch is at noon. The staging database now listens on port 6543.",
        },
        {"role": "assistant", "content": "Noted: the cache listens on port 6379."},
    ]
    question = {
        "role": "user",
        "content": "Which port does the staging database listen on?\nAnswer in a few words.",
    }

    # Both database sentences share four words with the question; the later one wins.
    said = _asked("probe", [*context, question])
    assert said == "The staging database now listens on port 6543."
    # Nothing before the question shares a word: it says so rather than guess.
    assert _asked("probe", [context[2], {"role": "user", "content": "Who wrote the sonnets?"}]) == (
        "Nothing in the conversation says."
    )
    # The question's own lines are not context: "staging" there does not answer it.
    alone = [{"role": "user", "content": "Which staging port?\nThe staging port is 1."}]
    assert _asked("probe", alone) == "Nothing in the conversation says."


@pytest.mark.parametrize(
    ("expected", "answer", "grade"),
    [
        ("5433", "It listens on port 5433.", "YES"),
        ("deploy/prod.yaml", "See  DEPLOY/prod.yaml", "YES"),
        ("5433", "It listens on port 6543.", "NO"),
        ("", "anything", "NO"),
    ],
)
def test_the_offline_judge_says_yes_when_the_answer_holds_the_expected_text(
    expected: str, answer: str, grade: str
) -> None:
    grading = f"Question: Which port?\nExpected: {expected}\nAnswer: {answer}"
    messages = [{"role": "system", "content": "grade"}, {"role": "user", "content": grading}]

    assert _asked("judge", messages) == grade
