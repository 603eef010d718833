"""`ctx show`, `ctx compress`, `slot summarize`, `slot merge` and "context full" on the CLI.

Turns run on the offline provider, or against the fake OpenAI server on loopback when what
matters is that nothing (or nothing but a summary request) is sent.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import data_dir_files, draft_file

from agctl.base.hashing import message_hashes
from agctl.context.models import ContextBudget, Message
from agctl.context.tokens import MESSAGE_OVERHEAD, estimate_text
from agctl.store import Store
from agctl.turn.compress import render_transcript

Run = Callable[..., Result]

SYSTEM = "You are terse."
MODEL = "fake-model"
CHAT_PATH = "/v1/chat/completions"
LEADING = "Project: agctl. Answer precisely."
HISTORY = [
    "Which file format should the sessions use? We need something people can read and diff, "
    "that survives a crash halfway through a write, and that other tools can parse easily.",
    "JSON, one file per slot, written atomically: a temp file in the same directory, fsync, "
    "rename, then fsync the directory. A session directory holds all of its slots.",
    "How do we keep the requests inside the model's window when a slot gets very long, say "
    "after a few hundred turns of debugging with large tool outputs in between?",
    "Estimate the tokens of every zone, and when the next request would not fit, fold the "
    "older messages into a summary in the compressed zone before sending anything.",
    "And what if compression is turned off for a slot whose messages must be kept verbatim, "
    "like a legal review where every word of the earlier exchange matters?",
    "Then the turn fails before sending anything, says by how many tokens it is over, and "
    "keeps the prompt as a draft so that nothing typed is lost; nothing else is written.",
    "Can a branch be merged back into the slot it was derived from once the experiment in "
    "it is done, without duplicating what was already there?",
    "Yes: append copies what the branch added since the derive, or summary appends one "
    "summary of it; the merge is recorded so that doing it twice adds nothing.",
]
KEEP = 4
PROMPT = "What is left to do before the release?"


def cost(text: str) -> int:
    return MESSAGE_OVERHEAD + estimate_text(text)


def msg(role: str, content: str) -> Message:
    return Message.model_validate({"role": role, "content": content})


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def as_json(result: Result) -> Any:
    return json.loads(ok(result).stdout)


def add(store: Store, slot: str | None, *messages: Message) -> None:
    store.update_slot("s1", slot, lambda s: s.messages.extend(messages))


def history() -> list[Message]:
    return [msg("system", LEADING)] + [
        msg("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(HISTORY)
    ]


def window_for_limit(limit: int) -> int:
    """The smallest window whose auto budget leaves exactly `limit` tokens for a request."""
    return next(w for w in range(limit, 2 * limit) if w - ContextBudget.auto(w).reserve == limit)


def zone_rows(output: str) -> dict[str, list[str]]:
    """The ZONE table of `ctx show`: zone name -> [messages, tokens, share, budget]."""
    names = [
        "system prompt",
        "memory",
        "immutable",
        "compressed",
        "messages",
        "tool results",
        "scratch",
        "input",
        "tool definitions",
    ]
    rows = {}
    for line in output.splitlines():
        for name in names:
            if line.startswith(name + "  "):
                rows[name] = line[len(name) :].split()
    return rows


def zones(payload: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {z["zone"]: (z["messages"], z["tokens"]) for z in payload["zones"]}


@pytest.fixture
def sid(run: Run, store: Store) -> str:
    store.create_session("s1", system_prompt=SYSTEM)
    store.set_current_session("s1")
    ok(run("config", "set", "compress_keep_recent", str(KEEP)))
    return "s1"


@pytest.fixture
def wired(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGCTL_MODEL", MODEL)
    monkeypatch.setenv("AGCTL_API_KEY", "sk-agctl-test-key")
    return server


def chats(server: FakeOpenAI) -> list[dict[str, Any]]:
    return [r.body for r in server.requests if r.path == CHAT_PATH]


# ---- ctx show: the wire parts the view holds -------------------------------------------


def test_ctx_show_counts_the_wire_parts_by_wire(run: Run, sid: str, store: Store) -> None:
    """The parts only one wire understands (thinking signatures), by wire: an empty object
    and no line at all while the slot holds none."""
    assert as_json(run("--json", "ctx", "show"))["wire_parts"] == {}
    none = ok(run("ctx", "show")).stdout.rstrip().splitlines()
    assert none[-1].startswith("total ") and not any("wire parts" in line for line in none)
    thinking = {"type": "thinking", "thinking": "Check the docs.", "signature": "EqQBCgIYAhIM"}
    signed = {"text": "two", "thoughtSignature": "CiQB"}
    add(
        store,
        None,
        msg("user", "one?"),
        Message(role="assistant", content="one", wire_parts={"anthropic": [thinking] * 2}),
        msg("user", "two?"),
        Message(
            role="assistant",
            content="two",
            wire_parts={"gemini": [signed], "anthropic": [thinking]},
        ),
    )
    assert as_json(run("--json", "ctx", "show"))["wire_parts"] == {"anthropic": 3, "gemini": 1}
    lines = ok(run("ctx", "show")).stdout.rstrip().splitlines()
    assert lines[-2].startswith("total ")
    assert lines[-1] == "wire parts: 3 anthropic, 1 gemini"


# ---- ctx show, before and after an automatic compression -------------------------------


def test_ctx_show_before_and_after_an_automatic_compression(
    run: Run, store: Store, sid: str
) -> None:
    original = history()
    add(store, None, *original)
    view = cost(SYSTEM) + sum(cost(m.text()) for m in original)
    # One token more than the limit once PROMPT is added: the turn must compress.
    window = window_for_limit(view + cost(PROMPT) - 1)
    reserve = ContextBudget.auto(window).reserve
    limit = window - reserve
    ok(run("config", "set", "context_windows.offline", str(window)))

    before = as_json(run("--json", "ctx", "show"))
    assert (before["window"], before["reserve"], before["limit"]) == (window, reserve, limit)
    assert (before["total"], before["room"]) == (view, cost(PROMPT) - 1)
    assert zones(before) == {
        "system prompt": (1, cost(SYSTEM)),
        "memory": (0, 0),
        "immutable": (0, 0),
        "compressed": (0, 0),
        "messages": (9, view - cost(SYSTEM)),
        "tool results": (0, 0),
        "scratch": (0, 0),
        "input": (0, 0),
        "tool definitions": (0, 0),
    }
    with_prompt = as_json(run("--json", "ctx", "show", PROMPT))
    assert (with_prompt["total"], with_prompt["room"]) == (limit + 1, -1)
    assert zones(with_prompt)["input"] == (1, cost(PROMPT))
    human = ok(run("ctx", "show", PROMPT)).stdout
    assert human.splitlines()[0] == (
        f"slot default · offline model offline · window {window} · "
        f"reserve {reserve} · limit {limit}"
    )
    assert human.rstrip().splitlines()[-1] == f"total {limit + 1} of {limit}: over by 1"

    reply = ok(run("turn", "send", PROMPT)).stdout.strip()

    assert reply.startswith('Offline reply to turn 1 in slot "default"')
    # The offline provider summarises by extraction: the user's instruction-like
    # question, then the latest sentences, as many as 128 tokens hold.
    summary = "\n".join(
        [
            "Extract of 4 earlier messages (3 of 6 sentences, verbatim):",
            "[user] Which file format should the sessions use?",
            f"[user] {HISTORY[2]}",
            f"[assistant] {HISTORY[3]}",
        ]
    )
    slot = store.load_slot(sid)
    assert [m.text() for m in slot.compressed] == [summary]
    assert [m.text() for m in slot.messages] == [
        LEADING,
        *HISTORY[-KEEP:],
        PROMPT,
        reply,
    ]
    after = as_json(run("--json", "ctx", "show"))
    # The reply carries the provider's completion count, which replaces the estimate.
    kept = cost(LEADING) + sum(cost(t) for t in HISTORY[-KEEP:]) + cost(PROMPT)
    kept += estimate_text(reply)
    total = cost(SYSTEM) + cost(summary) + kept
    assert zones(after) == {
        "system prompt": (1, cost(SYSTEM)),
        "memory": (0, 0),
        "immutable": (0, 0),
        "compressed": (1, cost(summary)),
        "messages": (1 + KEEP + 2, kept),
        "tool results": (0, 0),
        "scratch": (0, 0),
        "input": (0, 0),
        "tool definitions": (0, 0),
    }
    assert (after["total"], after["room"]) == (total, limit - total)
    assert after["budget"]["history"] == {
        "used": cost(summary) + kept,
        "budget": ContextBudget.auto(window).history,
        "over": cost(summary) + kept > ContextBudget.auto(window).history,
    }
    human = ok(run("ctx", "show")).stdout
    rows = zone_rows(human)
    assert rows["compressed"] == [
        "1",
        str(cost(summary)),
        f"{cost(summary) / limit:.1%}",
        "history",
    ]
    assert rows["messages"][:2] == [str(1 + KEEP + 2), str(kept)]
    assert rows["memory"] == ["0", "0", "0.0%", "system"]
    assert human.rstrip().splitlines()[-1] == f"total {total} of {limit}: room left {limit - total}"


# ---- tools: their definitions against `tools`, their results against `tool_results` ----

WORDS_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
# Prints the number of words of its `text` argument (a JSON document on stdin).
WORDS = "import json, sys; print(len(json.load(sys.stdin)['text'].split()))"


def definition_cost(name: str, description: str, schema: dict[str, Any]) -> int:
    """Tokens of one tool as `turn send -T NAME` offers it: its definition's compact JSON."""
    offered = {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }
    return estimate_text(json.dumps(offered, ensure_ascii=False, separators=(",", ":")))


@pytest.fixture
def words(run: Run, sid: str) -> int:
    """Tool `words` (approve: auto) in the config; the tokens of its definition."""
    ok(run("tool", "add", "words", "--description", "Count words",
           "--parameters", json.dumps(WORDS_SCHEMA), "--approve", "auto",
           "--", sys.executable, "-c", WORDS))  # fmt: skip
    return definition_cost("words", "Count words", WORDS_SCHEMA)


def test_ctx_show_counts_the_tools_offered_against_tools(
    run: Run, words: int, tmp_path: Path
) -> None:
    plain = as_json(run("--json", "ctx", "show"))
    assert zones(plain)["tool definitions"] == (0, 0) and plain["budget"]["tools"]["used"] == 0

    offered = as_json(run("--json", "ctx", "show", "-T", "words"))
    assert zones(offered)["tool definitions"] == (1, words)
    assert offered["budget"]["tools"] == {"used": words, "budget": 655, "over": False}
    assert offered["total"] == plain["total"] + words
    assert as_json(run("--json", "ctx", "show", "--tools", "all")) == offered

    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([{"name": "cat", "description": "Show a file",
                                       "parameters": schema, "command": ["cat"]}]))  # fmt: skip
    both = as_json(run("--json", "ctx", "show", "--tools-file", str(tools_file),
                       "-T", "cat", "-T", "words"))  # fmt: skip
    cat = definition_cost("cat", "Show a file", schema)
    assert zones(both)["tool definitions"] == (2, cat + words)
    rows = zone_rows(ok(run("ctx", "show", "-T", "words")).stdout)
    assert rows["tool definitions"][:2] == ["1", str(words)]
    assert rows["tool definitions"][-1] == "tools"


def test_ctx_show_with_a_tool_it_does_not_know_is_not_found(run: Run, words: int) -> None:
    result = run("ctx", "show", "-T", "nope")
    assert result.exit_code == 3
    assert "no tool named nope (tools: words)" in result.stderr
    assert run("ctx", "show", "--tools", "some").exit_code == 2


def test_the_tool_messages_of_a_turn_count_against_tool_results(
    run: Run, store: Store, words: int, tmp_path: Path
) -> None:
    call = {"id": "w1", "name": "words", "arguments": {"text": "one two three"}}
    script = tmp_path / "script.json"
    script.write_text(json.dumps([[{"tool_calls": [call]}, "Three words."]]))
    ok(run("turn", "send", "How many words?", "-T", "words", "--script", str(script)))
    slot = store.load_slot("s1")
    assert [m.role for m in slot.messages] == ["user", "assistant", "tool", "assistant"]
    (result,) = [m for m in slot.messages if m.role == "tool"]
    assert result.text() == "3\n"  # the tool's stdout as it printed it

    shown = as_json(run("--json", "ctx", "show"))
    assert zones(shown)["tool results"] == (1, result.token_count()) == (1, cost("3\n"))
    assert shown["budget"]["tool_results"]["used"] == cost("3\n")
    said = [m for m in slot.messages if m.role != "tool"]
    assert zones(shown)["messages"] == (3, sum(m.token_count() for m in said))


# ---- context full: nothing sent, nothing written --------------------------------------

FULL_ROUTES: dict[str, list[tuple[str, ...]]] = {
    "config": [("config", "set", "auto_compress", "false")],
    "session": [("session", "set", "auto_compress", "false")],
    "slot": [("slot", "set", "auto_compress", "false")],
    "slot over session": [
        ("session", "set", "auto_compress", "true"),
        ("slot", "set", "auto_compress", "false"),
    ],
    "session over config": [
        ("config", "set", "auto_compress", "true"),
        ("session", "set", "auto_compress", "false"),
    ],
    "slot default follows session": [
        ("slot", "set", "auto_compress", "true"),
        ("slot", "set", "auto_compress", "default"),
        ("session", "set", "auto_compress", "false"),
    ],
}


@pytest.fixture
def near_full(run: Run, store: Store, sid: str) -> int:
    """The slot's request with PROMPT is 5 tokens over the fake model's limit; its window."""
    add(store, None, *history())
    request = cost(SYSTEM) + sum(cost(m.text()) for m in history()) + cost(PROMPT)
    window = window_for_limit(request - 5)
    ok(run("config", "set", f"context_windows.{MODEL}", str(window)))
    return window


@pytest.mark.parametrize("route", sorted(FULL_ROUTES))
def test_context_full_sends_nothing_and_writes_nothing(
    run: Run, isolated_env: Path, near_full: int, wired: FakeOpenAI, route: str
) -> None:
    for command in FULL_ROUTES[route]:
        ok(run(*command))
    shown = as_json(run("--json", "ctx", "show", PROMPT))
    assert shown["room"] == -5
    before = data_dir_files(isolated_env)

    result = run("turn", "send", PROMPT)

    assert result.exit_code == 7, result.output
    reserve = ContextBudget.auto(near_full).reserve
    assert result.stderr.splitlines()[:2] == [
        f"agctl: error: context full: the request needs {shown['total']} tokens, but "
        f"{MODEL} allows {shown['limit']} ({near_full} window - {reserve} reserve): "
        "5 tokens over",
        "agctl: hint: compress with 'agctl ctx compress', or turn auto-compress on",
    ]
    assert "kept as a draft" in result.stderr
    assert result.stdout == ""
    assert wired.requests == []
    after = data_dir_files(isolated_env)
    assert json.loads(after.pop(draft_file("s1")))["prompt"] == PROMPT
    assert after == before


COMPRESS_ROUTES: dict[str, list[tuple[str, ...]]] = {
    "default": [],
    "slot over session": [
        ("session", "set", "auto_compress", "false"),
        ("slot", "set", "auto_compress", "true"),
    ],
    "session over config": [
        ("config", "set", "auto_compress", "false"),
        ("session", "set", "auto_compress", "true"),
    ],
    "slot over config": [
        ("config", "set", "auto_compress", "false"),
        ("slot", "set", "auto_compress", "true"),
    ],
}


@pytest.mark.parametrize("route", sorted(COMPRESS_ROUTES))
def test_auto_compress_on_asks_for_a_summary_then_sends(
    run: Run, store: Store, near_full: int, wired: FakeOpenAI, route: str
) -> None:
    for command in COMPRESS_ROUTES[route]:
        ok(run(*command))
    wired.reply(text="They planned the storage, the budget and merges.")

    ok(run("turn", "send", PROMPT))

    summary_request, turn_request = chats(wired)
    assert summary_request["messages"][1] == {
        "role": "user",
        "content": render_transcript(history()[1:-KEEP]),
    }
    assert [m["content"] for m in turn_request["messages"]] == [
        SYSTEM,
        "They planned the storage, the budget and merges.",
        LEADING,
        *HISTORY[-KEEP:],
        PROMPT,
    ]
    assert store.load_slot("s1").messages[-1].text() == f"echo: {PROMPT}"


def test_slot_and_session_settings_are_shown(run: Run, sid: str) -> None:
    assert ok(run("slot", "set", "auto_compress", "false")).stdout == (
        "slot default: auto_compress = false\n"
    )
    assert "auto compress  no" in ok(run("slot", "show")).stdout
    assert as_json(run("--json", "session", "set", "auto_compress", "false")) == {
        "session": "s1",
        "auto_compress": False,
    }
    assert as_json(run("--json", "slot", "set", "auto_compress", "default")) == {
        "slot": "default",
        "auto_compress": None,
    }


# ---- ctx compress and slot summarize -------------------------------------------------


def test_ctx_compress_truncate_calls_no_model(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    original = history()
    add(store, None, *original)

    truncate = ("ctx", "compress", "--strategy", "truncate", "--keep-recent", "3")
    result = ok(run(*truncate, "--min-tokens", "0"))

    match = re.fullmatch(
        r"compressed slot default: 5 messages folded \(truncate\), 4 kept; "
        r"the originals are in checkpoint (\w+)\nlost: 3 instructions \(all 3 facts .*",
        result.stdout,
        re.DOTALL,
    )
    assert match is not None, result.stdout
    assert wired.requests == []
    slot = store.load_slot(sid)
    assert [m.text() for m in slot.messages] == [LEADING, *HISTORY[-3:]]
    assert slot.compressed == []
    checkpoints = as_json(run("--json", "ckpt", "list"))
    assert [(c["id"] == match.group(1), c["label"]) for c in checkpoints] == [
        (False, "after compression"),
        (True, "before compression"),
    ]


def test_ctx_compress_summarize_sends_one_summary_request(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    add(store, None, *history())
    wired.reply(text="A short summary.")

    payload = as_json(
        run(
            "--json",
            "ctx",
            "compress",
            "--keep-recent",
            "2",
            "--min-tokens",
            "0",
            "--instructions",
            "Keep dates.",
        )
    )

    assert {k: payload[k] for k in ("slot", "strategy", "folded", "kept", "summary")} == {
        "slot": "default",
        "strategy": "summarize",
        "folded": 6,
        "kept": 3,
        "summary": "A short summary.",
    }
    (body,) = chats(wired)
    assert body["messages"] == [
        {"role": "system", "content": "Keep dates."},
        {"role": "user", "content": render_transcript(history()[1:-2])},
    ]
    assert [m.text() for m in store.load_slot(sid).compressed] == ["A short summary."]


def test_ctx_compress_on_a_readonly_slot_is_refused(
    run: Run, isolated_env: Path, store: Store, sid: str
) -> None:
    add(store, None, *history())
    ok(run("slot", "mode", "readonly"))
    before = data_dir_files(isolated_env)

    result = run("ctx", "compress", "--strategy", "truncate")

    assert result.exit_code == 4
    assert "slot 'default' is readonly: cannot compress" in result.stderr
    assert data_dir_files(isolated_env) == before
    assert as_json(run("--json", "ckpt", "list")) == []


def test_slot_summarize_stores_the_summary_override(run: Run, store: Store, sid: str) -> None:
    add(store, None, msg("user", "What is a monad?"), msg("assistant", "A monoid, roughly."))
    expected = (
        "Extract of 2 earlier messages (2 of 2 sentences, verbatim):\n"
        "[user] What is a monad?\n[assistant] A monoid, roughly."
    )

    assert ok(run("slot", "summarize")).stdout == expected + "\n"

    shown = as_json(run("--json", "slot", "show"))
    assert shown["config"]["focused"]["summary_override"] == expected
    assert len(shown["messages"]) == 2
    ok(run("slot", "mode", "focused", "--recent", "1", "--stride", "1"))
    view = as_json(run("--json", "slot", "show", "--view"))
    assert [m["content"] for m in view["messages"]] == [SYSTEM, expected, "A monoid, roughly."]


# ---- memory in context ---------------------------------------------------------------

MEMORY_TEXT = "Known facts (session memory):\n- project: agctl\n- user: Ada"


def test_memory_in_context_is_one_system_message_after_the_history(
    run: Run, store: Store, sid: str
) -> None:
    add(store, None, msg("user", "Hello."))
    ok(run("memory", "set", "user", "Ada"))
    ok(run("memory", "set", "project", "agctl"))
    assert zones(as_json(run("--json", "ctx", "show")))["memory"] == (0, 0)

    ok(run("session", "set", "memory_in_context", "true"))

    view = as_json(run("--json", "slot", "show", "--view"))
    assert view["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hello."},
        {"role": "system", "content": MEMORY_TEXT},
    ]
    assert view["tokens"] == cost(SYSTEM) + cost(MEMORY_TEXT) + cost("Hello.")
    human = ok(run("slot", "show", "--view")).stdout
    assert f"[2] system  ~{cost(MEMORY_TEXT)} tokens\n{MEMORY_TEXT}\n" in human
    shown = as_json(run("--json", "ctx", "show"))
    assert zones(shown)["memory"] == (1, cost(MEMORY_TEXT))
    assert [z["zone"] for z in shown["zones"]][:6] == [
        "system prompt",
        "immutable",
        "compressed",
        "messages",
        "tool results",
        "memory",
    ]
    assert shown["budget"]["system"]["used"] == cost(SYSTEM) + cost(MEMORY_TEXT)
    rows = zone_rows(ok(run("ctx", "show")).stdout)
    assert rows["memory"][:2] == ["1", str(cost(MEMORY_TEXT))]


# ---- slot merge ----------------------------------------------------------------------


@pytest.fixture
def branch(run: Run, store: Store, sid: str) -> list[Message]:
    """default: u1 a1; slot b derived from it adds u2 a2. Returns what b added."""
    add(store, None, msg("user", "u1"), msg("assistant", "a1"))
    ok(run("slot", "derive", "b"))
    ok(run("msg", "append", "--slot", "b", "user", "u2"))
    ok(run("msg", "append", "--slot", "b", "assistant", "a2"))
    return store.load_slot(sid, "b").messages[2:]


def test_merge_append_records_provenance_and_does_not_repeat(
    run: Run, store: Store, branch: list[Message]
) -> None:
    result = ok(run("slot", "merge", "b"))

    assert result.stdout == "merged 2 message(s) of b into default (append: 2 appended)\n"
    shown = as_json(run("--json", "slot", "show"))
    assert [m["content"] for m in shown["messages"]] == ["u1", "a1", "u2", "a2"]
    assert shown["messages"][2:] == [m.model_dump(mode="json") for m in branch]
    (record,) = shown["meta"]["merges"]
    assert {k: record[k] for k in ("source", "strategy", "hashes", "added")} == {
        "source": "b",
        "strategy": "append",
        "hashes": message_hashes(branch),
        "added": 2,
    }
    human = ok(run("slot", "show")).stdout
    line = next(line for line in human.splitlines() if line.startswith("merges"))
    assert re.fullmatch(r"merges\s+b \(append, 2 messages, \d{4}-\d\d-\d\dT\d\d:\d\d\)", line)

    again = as_json(run("--json", "slot", "merge", "b"))
    assert (again["merged"], again["appended"]) == (0, 0)
    assert ok(run("slot", "merge", "b")).stdout == "nothing new to merge from b into default\n"
    assert len(store.load_slot("s1").messages) == 4
    assert len(store.load_slot("s1").meta.merges) == 1


def test_merge_summary_appends_one_summary(run: Run, store: Store, branch: list[Message]) -> None:
    add(store, None, msg("user", "u3"))

    payload = as_json(
        run("--json", "slot", "merge", "b", "--into", "default", "--strategy", "summary")
    )

    assert payload == {
        "source": "b",
        "into": "default",
        "strategy": "summary",
        "merged": 2,
        "appended": 1,
        "already_merged": 0,
    }
    target = store.load_slot("s1")
    assert [(m.role, m.text()) for m in target.messages] == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("user", "u3"),
        (
            "system",
            "From branch b: Extract of 2 earlier messages (2 of 2 sentences, verbatim):\n"
            "[user] u2\n[assistant] a2",
        ),
    ]
    (record,) = target.meta.merges
    assert (record.strategy, record.added, record.hashes) == ("summary", 1, message_hashes(branch))
    assert "b (summary, 2 messages, " in ok(run("slot", "show")).stdout
    again = as_json(run("--json", "slot", "merge", "b", "--strategy", "summary"))
    assert (again["merged"], again["already_merged"]) == (0, 2)


def test_merge_into_a_readonly_slot_is_refused(
    run: Run, isolated_env: Path, branch: list[Message]
) -> None:
    ok(run("slot", "mode", "readonly", "default"))
    before = data_dir_files(isolated_env)

    result = run("slot", "merge", "b")

    assert result.exit_code == 4
    assert "slot 'default' is readonly: cannot merge" in result.stderr
    assert data_dir_files(isolated_env) == before


def test_merge_without_a_parent_or_into_is_a_usage_error(run: Run, branch: list[Message]) -> None:
    result = run("slot", "merge", "default")
    assert result.exit_code == 2
    assert "slot 'default' was not derived from another\nagctl: hint: give --into SLOT" in (
        result.stderr
    )


# ---- ctx show --cache ----------------------------------------------------------------


def test_ctx_show_cache_expects_the_prefix_of_the_last_request_sent(
    run: Run, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    """Against the last request a turn sent over HTTP: all of it after an append, all of
    it still after a memory change (memory goes after the history), only the system
    prompt after an edit of the first message; the input's cost with cache reads at a
    tenth of the price."""
    ok(run("config", "set", f"prices.{MODEL}",
           '{"prompt": 2.5, "completion": 10, "cache_read": 0.25}'))  # fmt: skip
    empty = as_json(run("--json", "ctx", "show", "--cache"))["cache"]
    assert (empty["last_sent_messages"], empty["cached_tokens"]) == (None, 0)
    ok(run("turn", "send", "one"))
    ok(run("turn", "send", "two"))
    sent = chats(wired)[-1]["messages"]
    assert len(sent) == 4

    def outlook() -> dict[str, Any]:
        shown = as_json(run("--json", "ctx", "show", "three", "--cache"))
        return {**shown["cache"], "total": shown["total"]}

    slot = store.load_slot(sid)
    cached = cost(SYSTEM) + sum(m.token_count() for m in slot.messages[:3])
    first = outlook()
    assert first["last_sent_messages"] == 4 and first["cached_messages"] == 4
    assert first["cached_tokens"] == cached and first["input_tokens"] == first["total"]
    expected = ((first["total"] - cached) + cached * 0.1) * 2.5 / 1_000_000
    assert first["expected_input_cost"] == pytest.approx(expected)
    assert first["input_cost_uncached"] == pytest.approx(first["total"] * 2.5 / 1_000_000)

    ok(run("memory", "set", "user", "Ada"))
    ok(run("session", "set", "memory_in_context", "true"))
    assert outlook()["cached_messages"] == 4

    ok(run("msg", "edit", "0", "one, edited"))
    edited = outlook()
    assert (edited["cached_messages"], edited["cached_tokens"]) == (1, cost(SYSTEM))
    line = ok(run("ctx", "show", "three", "--cache")).stdout.splitlines()[-1]
    assert line.startswith(f"cache: ~{cost(SYSTEM)} of {edited['total']} input tokens (")
    assert "the first 1 messages of the last request (4); input ~$" in line


# ---- ctx compress --dry-run and --min-tokens ------------------------------------------


def test_ctx_compress_dry_run_says_what_it_would_fold_and_invalidate(
    run: Run, isolated_env: Path, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    """Nothing written, no model called: the folded messages and tokens, the tokens that
    stay cached (system prompt; a truncation keeps the leading system message too) and
    those invalidated (the rest of the history), and whether --min-tokens allows it."""
    original = history()
    add(store, None, *original)
    before = data_dir_files(isolated_env)
    tokens = [m.token_count() for m in original]
    shown = as_json(run("--json", "ctx", "compress", "--dry-run", "--keep-recent", "3"))
    assert shown.pop("loss")["exact"] is False  # tests/cli/test_loss_report.py
    assert shown == {
        "slot": "default",
        "strategy": "summarize",
        "folded": 5,
        "folded_tokens": sum(tokens[1:6]),
        "kept": 4,
        "cached_kept_tokens": cost(SYSTEM),
        "invalidated_tokens": sum(tokens),
        "min_tokens": 2048,
        "would_compress": False,
        "fail_on_loss": [],
        "refused": None,
    }
    truncate = ("ctx", "compress", "--dry-run", "--strategy", "truncate", "--keep-recent", "3")
    shown = as_json(run("--json", *truncate, "--min-tokens", "10"))
    assert (shown["cached_kept_tokens"], shown["invalidated_tokens"]) == (
        cost(SYSTEM) + tokens[0],
        sum(tokens[1:]),
    )
    assert shown["would_compress"] is True
    text = ok(run(*truncate)).stdout
    assert text.startswith(
        f"would fold 5 messages (~{sum(tokens[1:6])} tokens) of slot default (truncate), "
        "keeping 4\n"
        f"invalidates ~{sum(tokens[1:])} cached tokens (sent anew once); "
        f"~{cost(SYSTEM) + tokens[0]} stay cached\n"
        "under --min-tokens 2048: nothing would be compressed (--min-tokens 0 compresses "
        "anyway)\n"
        "lost: 3 instructions (all 3 facts of what was folded: a truncation keeps no summary)\n"
    )
    assert wired.requests == []
    assert data_dir_files(isolated_env) == before


def test_ctx_compress_under_the_minimum_changes_nothing(
    run: Run, isolated_env: Path, store: Store, sid: str, wired: FakeOpenAI
) -> None:
    add(store, None, *history())
    before = data_dir_files(isolated_env)
    folded = sum(m.token_count() for m in history()[1:6])
    result = as_json(run("--json", "ctx", "compress", "--keep-recent", "3"))
    assert (result["folded"], result["too_little"]) == (0, folded)
    ok(run("config", "set", "compress_min_tokens", str(folded + 1)))
    text = ok(run("ctx", "compress", "--keep-recent", "3")).stdout
    assert text.startswith(f"nothing compressed in slot default: only ~{folded} tokens to fold")
    assert f"under --min-tokens {folded + 1}" in text
    assert wired.requests == []
    assert data_dir_files(isolated_env) == before
    assert [m.text() for m in store.load_slot(sid).messages] == [m.text() for m in history()]
    ok(run("config", "set", "compress_min_tokens", str(folded)))
    assert as_json(run("--json", "ctx", "compress", "--keep-recent", "3"))["folded"] == 5
