"""`agctl search` and `msg find --text`: one matcher, every session and slot, streamed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import add_said, file_only, searched_sessions
from terminal import HOSTILE_TEXT, on_terminal, raw_controls

from agctl.base.errors import NotFound, UsageError
from agctl.context.models import Message
from agctl.reports.search import Matcher, RegexTimeout, find_messages, raw_text, search, snippet
from agctl.store import Store

Run = Callable[..., Result]


# ---- the matcher -----------------------------------------------------------------------


def test_plain_text_matches_as_a_substring_whatever_the_case() -> None:
    matcher = Matcher("Error")
    assert matcher.search("an ERROR here") == (3, 8)
    assert matcher.search("error") == (0, 5)
    assert matcher.search("err or") is None
    assert Matcher("a.b").search("axb") is None  # not a pattern
    assert Matcher("a.b").search("A.B") == (0, 3)


def test_case_folding_finds_what_lowercasing_misses() -> None:
    assert Matcher("STRASSE").search("die Straße") == (4, 10)
    assert Matcher("ß").search("xSSy") == (1, 3)
    assert Matcher("\u017f").search("S") == (0, 1)  # long s folds to s


def test_a_regex_matches_as_written() -> None:
    assert Matcher(r"err\w+ \d+", regex=True).search("an error 42") == (3, 11)
    assert Matcher("error", regex=True).search("ERROR") is None
    assert Matcher("(?i)error", regex=True).search("ERROR") == (0, 5)


@pytest.mark.parametrize(("pattern", "regex"), [("nee(", True), ("", False), ("", True)])
def test_a_bad_pattern_is_a_usage_error(pattern: str, regex: bool) -> None:
    with pytest.raises(UsageError):
        Matcher(pattern, regex=regex)


@pytest.mark.parametrize(
    "message",
    [
        Message(role="user", content="plain"),
        Message(role="user", content=[{"type": "text", "text": "a"}, {"type": "image"}]),
        Message(role="assistant", content="", tool_calls=[{"id": "c", "function": {"name": "f"}}]),
        Message(role="assistant", tool_calls=[{"id": "c", "function": {"name": "f"}}]),
        Message(role="tool", content="out", tool_call_id="c"),
    ],
    ids=["text", "parts", "empty", "calls", "tool"],
)
def test_the_fast_path_reads_the_text_message_text_gives(message: Message) -> None:
    assert raw_text(message.model_dump(mode="json")) == message.text()


@pytest.mark.parametrize(
    "data",
    [
        {"role": "robot", "content": "x"},
        {"role": "user"},
        {"role": "user", "content": 5},
        {"role": "user", "content": ["not a part"]},
        {"role": "tool", "content": "no call id"},
        "not a message",
    ],
)
def test_the_fast_path_leaves_what_the_model_refuses_to_the_validated_read(data: object) -> None:
    assert raw_text(data) is None


def test_a_snippet_is_one_line_cut_around_the_match() -> None:
    text = "a" * 100 + " the\nneedle\there " + "b" * 100
    start = text.index("needle")
    shown = snippet(text, start, start + 6)
    assert shown.startswith("…") and shown.endswith("…")
    assert "the needle here" in shown
    assert "\n" not in shown and "\t" not in shown
    assert len(shown) < 100
    assert snippet("short needle", 6, 12) == "short needle"


# ---- the library -----------------------------------------------------------------------


@pytest.fixture
def sessions(store: Store) -> Store:
    return searched_sessions(store)


def test_hits_come_session_by_session_slot_by_slot_with_where_they_are(sessions: Store) -> None:
    hits = list(search(sessions, Matcher("hello")))
    assert [(h.session, h.slot, h.zone, h.index, h.role) for h in hits] == [
        ("a-session", "default", "messages", 0, "user"),
        ("a-session", "default", "messages", 2, "user"),
        ("a-session", "plan", "immutable", 0, "system"),
        ("a-session", "plan", "messages", 0, "user"),
        ("b-session", "default", "messages", 1, "assistant"),
    ]
    first = hits[0]
    assert (first.start, first.end, first.snippet) == (0, 5, "hello world")
    assert first.where == "a-session/default:0"
    assert hits[2].where == "a-session/plan:immutable:0"


def test_session_slot_and_role_narrow_the_search(sessions: Store) -> None:
    matcher = Matcher("hello")
    in_b = list(search(sessions, matcher, session_id="b-session"))
    assert [(h.session, h.index) for h in in_b] == [("b-session", 1)]
    in_plan = list(search(sessions, matcher, slot_id="plan"))
    assert {h.slot for h in in_plan} == {"plan"}
    assert len(in_plan) == 2
    system = list(search(sessions, matcher, roles={"system"}))
    assert [h.role for h in system] == ["system"]
    with pytest.raises(NotFound):
        list(search(sessions, matcher, session_id="b-session", slot_id="plan"))


def test_the_limit_stops_the_search(sessions: Store) -> None:
    assert len(list(search(sessions, Matcher("hello"), limit=2))) == 2
    assert list(search(sessions, Matcher("hello"), limit=0)) == []


def test_find_messages_uses_the_same_matcher(store: Store) -> None:
    store.create_session("s")
    add_said(store, "s", "Alpha", "alphabet", "beta", "ALPHA")
    slot = store.load_slot("s")
    assert find_messages(slot.messages, Matcher("alpha")) == [0, 1, 3]
    assert find_messages(slot.messages, Matcher("alpha"), {"assistant"}) == [1, 3]
    assert find_messages(slot.messages, Matcher("^alpha", regex=True)) == [1]


# ---- the command line ------------------------------------------------------------------


@file_only
def test_search_prints_a_line_per_hit(run: Run, sessions: Store) -> None:
    result = run("search", "hello")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "a-session/default:0 user: hello world",
        "a-session/default:2 user: HELLO again",
        "a-session/plan:immutable:0 system: hello ro",
        "a-session/plan:0 user: a plan: hello",
        "b-session/default:1 assistant: say hello",
    ]


@file_only
def test_search_json_is_one_object_a_line(run: Run, sessions: Store) -> None:
    result = run("search", "hello", "--json", "--limit", "2")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines == [
        {
            "session": "a-session",
            "slot": "default",
            "zone": "messages",
            "index": 0,
            "role": "user",
            "start": 0,
            "end": 5,
            "snippet": "hello world",
        },
        {
            "session": "a-session",
            "slot": "default",
            "zone": "messages",
            "index": 2,
            "role": "user",
            "start": 0,
            "end": 5,
            "snippet": "HELLO again",
        },
    ]


@file_only
def test_search_options_narrow_it(run: Run, sessions: Store) -> None:
    result = run("search", "^hello", "--regex", "--role", "user", "--slot", "default")
    assert result.stdout.splitlines() == ["a-session/default:0 user: hello world"]
    assert run("search", "hello", "-n", "1").stdout.count("\n") == 1
    by_prefix = run("-s", "b-", "search", "hello")
    assert by_prefix.stdout.splitlines() == ["b-session/default:1 assistant: say hello"]
    after = run("search", "hello", "-s", "b-session")
    assert after.stdout == by_prefix.stdout


@file_only
def test_the_selected_session_does_not_narrow_the_search(
    run: Run, sessions: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AGCTL_SESSION and `session use` pick where to work, not where to look."""
    sessions.set_current_session("b-session")
    monkeypatch.setenv("AGCTL_SESSION", "b-session")
    assert run("search", "hello").stdout.count("\n") == 5


@file_only
def test_no_hit_prints_nothing_and_exits_1_as_grep_does(run: Run, sessions: Store) -> None:
    """JSON lines print no line for no hit (a `[]` would be a line jq reads as a hit)."""
    for args in (["search", "absent"], ["search", "absent", "--json"], ["search", "x$", "--regex"]):
        result = run(*args)
        assert (result.exit_code, result.stdout, result.stderr) == (1, "", "")
    assert run("search", "hello", "-n", "1").exit_code == 0


@file_only
def test_a_runaway_regex_stops_with_exit_2_saying_so(store: Store, isolated_env: Path) -> None:
    """`(a+)+$` over 41 a's and a b backtracked for 20 s and more under re; the regex
    module answers it at once, and one it cannot, `(a|aa)+$`, is stopped by the time
    limit. A real process, bounded from outside, so that a regression fails, not hangs."""
    store.create_session("s")
    add_said(store, "s", "a" * 41 + "b")
    env = {**os.environ, "AGCTL_DATA_DIR": str(isolated_env), "PYTHONIOENCODING": "utf-8"}

    def search(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "agctl", "search", "--regex", *args]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)

    answered = search("(a+)+$")
    assert (answered.returncode, answered.stdout, answered.stderr) == (1, "", "")
    stopped = search("(a|aa)+$", "--regex-timeout", "0.5")
    assert stopped.returncode == 2, stopped.stderr
    assert "'(a|aa)+$' was stopped after matching for 0.5 s" in stopped.stderr
    assert "--regex-timeout" in stopped.stderr
    assert stopped.stdout == "" and "Traceback" not in stopped.stderr
    as_json = search("(a|aa)+$", "--json")
    assert as_json.returncode == 2
    assert json.loads(as_json.stderr)["error"]["type"] == "RegexTimeout"
    invalid = search("nee(")
    assert invalid.returncode == 2 and "invalid regular expression 'nee('" in invalid.stderr


def test_the_time_limit_is_for_the_whole_search() -> None:
    """Each text gets only what the texts before it left: many slow texts stop too."""
    matcher = Matcher("(a|aa)+$", regex=True, timeout=0.2)
    with pytest.raises(RegexTimeout):
        for _ in range(100):
            matcher.search("a" * 24 + "b")
    assert Matcher("(a|aa)+$", regex=True).search("a" * 8 + "b") is None


@pytest.mark.parametrize("timeout", [0.0, -1.0, float("nan")])
def test_a_time_limit_must_be_above_0(timeout: float) -> None:
    with pytest.raises(UsageError, match="above 0"):
        Matcher("a", regex=True, timeout=timeout)


@file_only
def test_what_re_refuses_the_regex_module_reads(run: Run, store: Store) -> None:
    """The syntax the help names: Unicode properties; a nested set warns nothing."""
    store.create_session("s")
    add_said(store, "s", "Größe 42")
    assert Matcher(r"\p{Lu}\p{Ll}+", regex=True).search("Größe 42") == (0, 5)
    result = run("search", "--regex", "[[a-z]+", "-s", "s")
    assert (result.exit_code, result.stderr) == (0, "")


@file_only
@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["search", "nee(", "--regex"], 2, "invalid regular expression 'nee('"),
        (["search", ""], 2, "empty"),
        (["search", "x", "--limit", "-1"], 2, "--limit"),
        (["search", "x", "--role", "robot"], 2, "--role"),
        (["search", "x", "--slot", "../b"], 2, "../b"),
        (["-s", "b-session", "search", "x", "--slot", "plan"], 3, "slot 'plan' not found"),
        (["-s", "zzz", "search", "x"], 3, "zzz"),
    ],
)
def test_bad_search_requests_fail_clearly(
    run: Run, sessions: Store, args: list[str], code: int, message: str
) -> None:
    result = run(*args)
    assert result.exit_code == code
    assert message in result.stderr
    assert "Traceback" not in result.output


@file_only
def test_a_hit_reaches_a_terminal_neutralised(
    run: Run, store: Store, isolated_env: Path, tmp_path: Path
) -> None:
    store.create_session("s")
    add_said(store, "s", HOSTILE_TEXT)
    env = {**os.environ, "AGCTL_DATA_DIR": str(isolated_env), "PYTHONIOENCODING": "utf-8"}
    status, received = on_terminal(env, "search", "look")
    assert status == 0, received
    assert raw_controls(received) == []
    assert "look\\u001b]52;c;ZXZpbA==\\u0007" in received.decode()


@file_only
def test_msg_find_text(run: Run, store: Store) -> None:
    store.create_session("s")
    store.set_current_session("s")
    add_said(store, "s", "Alpha", "alphabet", "beta", "ALPHA")
    assert run("msg", "find", "--text", "alpha").stdout.split() == ["0", "1", "3"]
    assert run("msg", "find", "assistant", "--text", "alpha").stdout.split() == ["1", "3"]
    regex = run("msg", "find", "--text", "^[a-z]+$", "--regex", "--json")
    assert json.loads(regex.stdout) == [1, 2]
    assert run("msg", "find", "user").stdout.split() == ["0", "2"]


@file_only
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["msg", "find"], "give ROLES, --text TEXT or both"),
        (["msg", "find", "user", "--regex"], "--regex needs --text"),
        (["msg", "find", "--text", "(", "--regex"], "invalid regular expression"),
    ],
)
def test_msg_find_refuses_what_it_cannot_do(
    run: Run, store: Store, args: list[str], message: str
) -> None:
    store.create_session("s")
    store.set_current_session("s")
    result = run(*args)
    assert result.exit_code == 2
    assert message in result.stderr


@file_only
def test_messages_a_turn_appended_are_found_without_a_validated_read(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn appends to the slot's log: the fast path reads those lines too, so a live
    conversation is searched as fast as a slot written whole."""
    from agctl.providers.offline import OfflineProvider
    from agctl.turn.send import TurnOptions, send_turn

    store.create_session("s")
    send_turn(store, "s", "where is the zebra", OfflineProvider(), TurnOptions(model="o"))

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the fast path fell back to load_slot")

    monkeypatch.setattr(store, "load_slot", refused)
    hits = list(search(store, Matcher("zebra")))
    assert [(h.session, h.zone, h.index, h.role) for h in hits][:1] == [
        ("s", "messages", 0, "user")
    ]
    assert len(hits) == 2  # the prompt, and the offline reply that quotes it
