"""`agctl chat` for real: a process whose three standard streams are a pseudo-terminal
that is its controlling terminal (tests/terminal.py's ChatTerminal), keys typed there,
the offline provider or the fake OpenAI upstream on loopback (held mid-stream for
Ctrl-C), and the store read afterwards to see what was written. Every wait is for what
the terminal shows, bounded (terminal.TIMEOUT)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import ok
from terminal import ChatTerminal

from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.tools import DENIED

Run = Callable[..., Result]
CTRL_C, CTRL_D, ESC, UP = "\x03", "\x04", "\x1b", "\x1b[A"


@pytest.fixture
def offline(env: dict[str, str]) -> dict[str, str]:
    return {**env, "AGCTL_PROVIDER": "offline"}


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server
    assert server.errors == []


def upstream(env: dict[str, str], server: FakeOpenAI) -> dict[str, str]:
    return {**env, "AGCTL_PROVIDER": "openai", "AGCTL_BASE_URL": server.base_url,
            "AGCTL_MODEL": "m", "AGCTL_API_KEY": "k"}  # fmt: skip


def texts(store: Store, session: str, slot: str | None = None) -> list[str]:
    return [m.text() for m in store.load_slot(session, slot).messages]


# What prompt_toolkit writes as a prompt starts, once it reads the keyboard (bracketed
# paste on): typing before it would reach the terminal's line discipline instead.
PROMPT_STARTS = b"\x1b[?2004h"


def ask(chat: ChatTerminal, line: str, *shows: bytes) -> bytes:
    """Type `line` at the prompt; what the terminal shows until each of `shows` came, in
    order, and the next prompt started."""
    chat.type(line)
    shown = b"".join(chat.wait_for(text) for text in shows)
    return shown + chat.wait_for(PROMPT_STARTS)


def chatting(run: Run, env: dict[str, str], *args: str) -> ChatTerminal:
    """`agctl chat ARGS` on a new session s, at its first prompt."""
    ok(run("session", "new", "s"))
    chat = ChatTerminal(env, "chat", *args)
    chat.wait_for(b"default>")
    return chat


def leave(chat: ChatTerminal) -> int:
    """Ctrl-D at an empty prompt; the exit status."""
    chat.keys(CTRL_D)
    status, _, _ = chat.finish()
    return status


def test_every_slash_command_runs_its_agctl_command(
    offline: dict[str, str], run: Run, store: Store
) -> None:
    chat = chatting(run, offline)
    ask(chat, "hello", b'you said "hello"')
    ask(chat, "/retry", b"on new slot default-retry-1 (from default, kept as it was)",
        b'you said "hello"')  # fmt: skip
    shown = ask(chat, "/diff", b'+#1 assistant: Offline reply to turn 2 in slot "default-retry-1"')
    assert b"--- default\r\n+++ default-retry-1\r\n" in shown
    assert b'-#1 assistant: Offline reply to turn 1 in slot "default"' in shown
    ask(chat, "/slots", b"*  default-retry-1  full  derived  default")
    ask(chat, "/msgs", b"1  assistant")
    ask(chat, "/ctx", b"slot default-retry-1 \xc2\xb7 offline model offline", b"room left")
    ask(chat, "/ckpt good one", b"\r\n")
    ask(chat, "/ckpts", b"  good one")
    ask(chat, "/pin 0", b"pinned message 0 in slot default-retry-1")
    assert store.load_slot("s", "default-retry-1").pinned() == [0]
    [good] = [c.id for c in Checkpointer(store).summaries("s") if c.label == "good one"]
    ask(chat, f"/rollback {good}", f"rolled back to {good} (turn 2)".encode())
    assert store.load_slot("s", "default-retry-1").pinned() == []  # pinned after it
    ask(chat, "/memory set colour blue", b"colour set")
    ask(chat, "/memory", b"colour  blue")
    assert store.load_session("s").memory == {"colour": "blue"}
    ask(chat, "/model", b"model: offline (provider offline)")
    ask(chat, "/model small-one", b"model: small-one (provider offline)")
    assert store.load_session("s").model == "small-one"
    ask(chat, "/tools", b"offered in this chat: none")
    ask(chat, "/nope", b"agctl: error: no command /nope in the chat: /help lists them")
    ask(chat, "/rollback zzzz", b"agctl: error: no checkpoint matches 'zzzz'")
    ask(chat, "/slot nowhere", b"agctl: error: slot 'nowhere' not found")
    ask(chat, "/edit 0 hi instead", b"on new slot default-edit-1", b'you said "hi instead"')
    ask(chat, "/undo", b"back at turn 2")
    ask(chat, "/slot default", b"current slot: default")
    ask(chat, "/compress", b"nothing to compress in slot default")
    ask(chat, "/help", b"/rollback ID")
    forked = ask(chat, "/fork", b"\r\n").decode()
    assert leave(chat) == 0

    assert texts(store, "s", "default")[0] == "hello"
    assert texts(store, "s", "default-retry-1")[0] == "hello"  # the old reply kept
    [child] = store.children("s")
    assert child in forked and store.current_session_id() == child


def test_a_pipe_drives_the_chat_line_by_line(
    offline: dict[str, str], run: Run, store: Store
) -> None:
    ok(run("session", "new", "s"))
    lines = 'hello\n"""\nline one\nline two\n"""\n/retry\n/nope\n/slots\n'
    done = subprocess.run([sys.executable, "-m", "agctl", "chat"], input=lines,
                          capture_output=True, text=True, env=offline, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr  # the last failure, though /slots came after
    assert texts(store, "s", "default")[::2] == ["hello", "line one\nline two"]
    assert texts(store, "s", "default-retry-1")[2] == "line one\nline two"
    assert "*  default-retry-1" in done.stdout
    assert "agctl: error: no command /nope in the chat" in done.stderr
    assert "Traceback" not in done.stderr


def test_multi_line_input_and_history_across_two_chats(
    offline: dict[str, str], run: Run, store: Store, isolated_env: Path
) -> None:
    chat = chatting(run, offline)
    ask(chat, f"first{ESC}\rsecond", b"Offline reply to turn 1")  # Esc-Enter: a new line
    chat.type('"""')
    chat.type("one")
    ask(chat, 'two"""', b"Offline reply to turn 2")
    ask(chat, "remember me", b"Offline reply to turn 3")
    assert leave(chat) == 0
    assert texts(store, "s")[::2] == ["first\nsecond", "one\ntwo", "remember me"]
    history = isolated_env / "chat-history" / "s.history"
    assert stat.S_IMODE(history.stat().st_mode) == 0o600
    assert stat.S_IMODE(history.parent.stat().st_mode) == 0o700

    again = ChatTerminal(offline, "chat")
    again.wait_for(b"default>")
    again.keys(UP)
    again.wait_for(b"remember me")
    ask(again, "", b"Offline reply to turn 4")
    assert leave(again) == 0
    assert texts(store, "s")[-2] == "remember me"


def test_ctrl_c_twice_or_ctrl_d_leaves_and_ctrl_c_clears_a_line(
    offline: dict[str, str], run: Run, store: Store
) -> None:
    chat = chatting(run, offline)
    chat.keys("never sent" + CTRL_C)  # clears the line: nothing to leave yet
    chat.keys(CTRL_C)
    chat.wait_for(b"(Ctrl-C again or Ctrl-D to leave)")
    chat.wait_for(PROMPT_STARTS)
    ask(chat, "still here", b"Offline reply to turn 1")  # then Ctrl-C asks again
    chat.keys(CTRL_C)
    chat.wait_for(b"(Ctrl-C again or Ctrl-D to leave)")
    chat.wait_for(PROMPT_STARTS)
    chat.keys(CTRL_C)
    status, _, _ = chat.finish()
    assert status == 0
    assert texts(store, "s")[0] == "still here"


def test_ctrl_c_mid_reply_keeps_the_draft_and_writes_nothing(
    env: dict[str, str], run: Run, store: Store, fake: FakeOpenAI
) -> None:
    fake.reply("the whole reply is long and never arrives in full", chunk_size=4)
    gate = fake.pause_stream(after=3)
    chat = chatting(run, upstream(env, fake))
    chat.type("tell me")
    chat.wait_for(b"the ")  # the reply has begun streaming, and is held
    chat.keys(CTRL_C)
    try:
        chat.wait_for(b"agctl: error: interrupted", timeout=5)
    except AssertionError:
        # A SIGINT that lands just before the turn blocks reading the held stream is run
        # by Python once the read returns: at the stream's next piece, as for a real
        # upstream. Let it go on; the turn must stop there all the same, writing nothing.
        gate.set()
        chat.wait_for(b"agctl: error: interrupted")
    chat.wait_for(b"--resume-draft")
    chat.wait_for(PROMPT_STARTS)  # still in the chat
    gate.set()
    assert leave(chat) == 0
    assert texts(store, "s") == []
    assert store.load_draft("s", "default").prompt == "tell me"


def test_a_tool_call_is_approved_inline(
    env: dict[str, str], run: Run, store: Store, fake: FakeOpenAI, tmp_path: Path
) -> None:
    program = tmp_path / "mark.py"
    program.write_text("import json, sys\nprint('marked ' + json.load(sys.stdin)['name'])\n")
    schema = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}})
    ok(run("tool", "add", "mark", "--description", "Mark", "--parameters", schema,
           "--", sys.executable, str(program)))  # fmt: skip
    fake.reply(
        reasoning="mark it first",
        tool_calls=[{"id": "call_1", "name": "mark", "arguments": {"name": "x"}}],
    )
    fake.reply("done marking")
    chat = chatting(run, upstream(env, fake), "-T", "mark")
    chat.type("mark x")
    chat.wait_for(b"mark it first")  # the reasoning, streamed
    chat.wait_for(b"[y/n/always] ")
    ask(chat, "y", b"tool mark(", b"done marking")
    fake.reply(tool_calls=[{"id": "call_2", "name": "mark", "arguments": {"name": "z"}}])
    fake.reply("not marked")
    chat.type("mark z")
    chat.wait_for(b"[y/n/always] ")
    ask(chat, "n", b"denied, not run", b"not marked")
    # The terminal is opened once for the chat's questions, not once a turn.
    opened = [os.readlink(f"/proc/{chat.process.pid}/fd/{fd}")
              for fd in os.listdir(f"/proc/{chat.process.pid}/fd")]  # fmt: skip
    assert opened.count("/dev/tty") == 1, opened
    assert leave(chat) == 0
    messages = store.load_slot("s").messages
    assert [m.role for m in messages][:4] == ["user", "assistant", "tool", "assistant"]
    assert messages[2].text().strip() == "marked x"
    assert messages[6].text() == DENIED


def test_no_session_starts_one(offline: dict[str, str], store: Store) -> None:
    chat = ChatTerminal(offline, "chat")
    chat.wait_for(b"no session was selected: started ")
    started = chat.wait_for(b", now current").removesuffix(b", now current").decode()
    ask(chat, "hello", b'you said "hello"')
    assert leave(chat) == 0
    assert store.current_session_id() == started
    assert texts(store, started)[0] == "hello"


README = Path(__file__).resolve().parents[2] / "README.md"
TRANSCRIPT_MARKER = "<!-- chat transcript: tests/process/test_chat.py types it on a terminal -->"


def readme_transcript() -> list[str]:
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(TRANSCRIPT_MARKER) + 2
    return lines[start : lines.index("```", start)]


def test_the_readme_chat_is_what_a_terminal_shows(env: dict[str, str]) -> None:
    """The README's chat, typed on a terminal with the offline provider: every command and
    line typed as printed there, every line it shows after one seen, in order."""
    import re

    lines = readme_transcript()
    assert lines[0] == "$ agctl session new tour" and lines[2].startswith("$ agctl chat")
    created = subprocess.run([sys.executable, "-m", "agctl", "session", "new", "tour"],
                             env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert created.stdout.splitlines() == [lines[1]]
    chat = ChatTerminal(env, *lines[2].split()[2:])
    chat.wait_for(b"default>")
    typed = re.compile(r"^[\w.-]+> (?P<line>.*)$")
    expected: list[str] = []
    for line in lines[3:]:
        match = typed.match(line)
        if match is None:
            expected.append(line)
            continue
        if expected:
            shown = chat.wait_for(expected[-1].encode()) + chat.wait_for(PROMPT_STARTS)
            plain = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", shown).decode().replace("\r", "")
            position = 0
            for want in expected:  # each line, whole, in order
                position = plain.index(want + "\n", position) + len(want)
            expected = []
        if match["line"] == "^D":
            assert leave(chat) == 0
            return
        chat.type(match["line"])
    raise AssertionError("the README's chat does not end with ^D")


def test_edit_without_text_edits_the_prompt_at_the_prompt(
    offline: dict[str, str], run: Run, store: Store
) -> None:
    chat = chatting(run, offline, "--slot", "default")
    ask(chat, "hello", b'you said "hello"')
    chat.type("/edit 0")
    chat.wait_for(b"edit 0>")
    chat.wait_for(b"hello")  # the old prompt, to edit
    ask(chat, " world", b"on new slot default-edit-1", b'you said "hello world"')
    chat.wait_for(b"default-edit-1>")  # --slot follows the turn to its new slot
    assert leave(chat) == 0
    assert texts(store, "s", "default-edit-1")[0] == "hello world"
    assert texts(store, "s", "default")[0] == "hello"


def test_bytes_that_are_not_utf8_are_refused_not_a_traceback(
    offline: dict[str, str], run: Run, store: Store
) -> None:
    chat = chatting(run, offline)
    os.write(chat.master, b"bad \xff\xfe\r")
    chat.wait_for(b"agctl: error: the line is not valid UTF-8")
    chat.wait_for(PROMPT_STARTS)
    ask(chat, "good", b'you said "good"')
    assert leave(chat) == 0
    for failure in (b"Traceback", b"Unhandled exception", b"Press ENTER"):
        assert failure not in chat.received
    assert texts(store, "s")[0] == "good"

    piped = subprocess.run([sys.executable, "-m", "agctl", "chat"], input=b"ok\n\xff\n/slots\n",
                           capture_output=True, env=offline, timeout=60)  # fmt: skip
    assert piped.returncode == 5
    assert piped.stderr.decode() == (
        "agctl: error: line 2 of standard input is not valid UTF-8 (byte 0: invalid start byte)\n"
    )
    assert texts(store, "s")[2] == "ok"  # the line before it was sent; none after


def test_a_chat_on_a_slot_session_or_tool_that_does_not_exist_is_exit_3(
    offline: dict[str, str], run: Run
) -> None:
    ok(run("session", "new", "s"))
    for args, error in (
        (["--slot", "nope"], "agctl: error: slot 'nope' not found in session 's'\n"),
        (["-s", "nope"], "agctl: error: no session matches 'nope'\n"),
        (
            ["-T", "nope"],
            "agctl: error: no tool named nope (tools: none is defined ('agctl tool add'))\n",
        ),
    ):
        # Refused before reading a line: /slots would print, "hi" would fail again.
        done = subprocess.run([sys.executable, "-m", "agctl", "chat", *args], input="/slots\nhi\n",
                              capture_output=True, text=True, env=offline, timeout=60)  # fmt: skip
        assert (done.returncode, done.stdout, done.stderr) == (3, "", error)


def test_sigterm_ends_the_chat_mid_reply_with_the_draft_kept(
    env: dict[str, str], run: Run, store: Store, fake: FakeOpenAI
) -> None:
    """As `turn send` stops on SIGTERM (a CI cancel, `timeout`): where Ctrl-C only stops
    the reply, SIGTERM ends the chat too, exit 143, its prompt kept as the draft."""
    fake.reply("the whole reply is long and never arrives in full", chunk_size=4)
    gate = fake.pause_stream(after=3)
    chat = chatting(run, upstream(env, fake))
    chat.type("tell me")
    chat.wait_for(b"the ")
    chat.process.send_signal(signal.SIGTERM)
    chat.wait_for(b"agctl: error: interrupted")
    status, _, _ = chat.finish()
    gate.set()
    assert status == 143
    assert texts(store, "s") == []
    assert store.load_draft("s", "default").prompt == "tell me"


def test_sigterm_at_the_prompt_ends_the_chat(offline: dict[str, str], run: Run) -> None:
    chat = chatting(run, offline)
    chat.process.send_signal(signal.SIGTERM)
    status, _, _ = chat.finish()
    assert status == 143
    assert b"Ctrl-C again" not in chat.received


def chat_pipe(
    env: dict[str, str], lines: str | bytes, *args: str
) -> subprocess.CompletedProcess[str]:
    """`agctl ARGS` (the chat, with its options) reading `lines` from a pipe."""
    data = lines.encode() if isinstance(lines, str) else lines
    done = subprocess.run([sys.executable, "-m", "agctl", *args], input=data,
                          capture_output=True, env=env, timeout=60)  # fmt: skip
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def test_a_script_is_read_in_order_across_the_chat_turns(
    offline: dict[str, str], run: Run, store: Store, tmp_path: Path
) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["first reply", "second reply", "third reply"]))
    ok(run("session", "new", "s"))
    done = chat_pipe(offline, "a\nb\n/retry\n", "chat", "--script", str(script))
    assert done.returncode == 0, done.stderr
    assert texts(store, "s", "default") == ["a", "first reply", "b", "second reply"]
    assert texts(store, "s", "default-retry-1")[-1] == "third reply"


def test_ctrl_d_at_the_edit_prompt_cancels_the_edit_not_the_chat(
    offline: dict[str, str], run: Run, store: Store
) -> None:
    chat = chatting(run, offline)
    ask(chat, "hello", b'you said "hello"')
    chat.type("/edit 0")
    chat.wait_for(b"hello")  # the old prompt, to edit
    chat.keys(CTRL_C + CTRL_D)  # the line cleared, then Ctrl-D at the empty edit prompt
    chat.wait_for(b"/edit 0 cancelled")
    chat.wait_for(PROMPT_STARTS)
    ask(chat, "still here", b'you said "still here"')
    assert leave(chat) == 0
    assert b"Aborted" not in chat.received
    assert [slot.id for slot in store.list_slots("s")] == ["default"]


def test_model_name_is_not_an_option_and_slash_commands_leave_stdin_to_the_chat(
    offline: dict[str, str], run: Run, store: Store
) -> None:
    ok(run("session", "new", "s"))
    done = chat_pipe(offline, '/model "-x"\n/memory set k -\nhello\nworld\n', "chat")
    assert done.returncode == 2, done.stderr  # /memory set k - refused, with its reason
    assert "standard input is the chat's" in done.stderr
    assert store.load_session("s").model == "-x"
    assert store.load_session("s").memory == {}
    assert texts(store, "s")[::2] == ["hello", "world"]


def test_crlf_lines_and_json_chat_output(offline: dict[str, str], run: Run, store: Store) -> None:
    ok(run("session", "new", "s"))
    done = chat_pipe(offline, "/slots\r\n/memory\tset k v\r\nhello\r\n", "chat")
    assert done.returncode == 0, done.stderr
    assert "*  default" in done.stdout
    assert store.load_session("s").memory == {"k": "v"}
    assert texts(store, "s")[0] == "hello"
    shown = chat_pipe(offline, "/model\n/tools\n/help\n", "--json", "chat")
    assert shown.returncode == 0, shown.stderr
    decoder, documents, position = json.JSONDecoder(), [], 0
    while shown.stdout[position:].lstrip().startswith(("{", "[")):
        position += len(shown.stdout[position:]) - len(shown.stdout[position:].lstrip())
        document, position = decoder.raw_decode(shown.stdout, position)
        documents.append(document)
    assert documents == [
        {"model": "offline", "provider": "offline", "profile": None},
        [],
        {"offered": []},
    ]
    assert "/rollback ID" in shown.stdout[position:]  # /help, as text


def test_a_history_file_that_cannot_be_opened_is_a_warning(
    offline: dict[str, str], run: Run, store: Store, isolated_env: Path
) -> None:
    ok(run("session", "new", "s"))
    folder = isolated_env / "chat-history"
    folder.mkdir(mode=0o700)
    (folder / "s.history").symlink_to("/nowhere")
    chat = ChatTerminal(offline, "chat")
    chat.wait_for(b"agctl: warning: the chat history cannot be kept")
    ask(chat, "hello", b'you said "hello"')
    chat.keys(UP)
    chat.wait_for(b"hello")  # recalled from this chat's own lines
    chat.keys(CTRL_C)  # clears the line
    assert leave(chat) == 0
    assert b"Traceback" not in chat.received
    assert texts(store, "s")[0] == "hello"


def test_ctx_counts_the_chat_model_tools_and_system_prompt(
    offline: dict[str, str], run: Run
) -> None:
    ok(run("session", "new", "s"))
    ok(run("tool", "add", "calc", "--description", "Add", "--", sys.executable, "-c", "0"))
    done = chat_pipe(offline, "/ctx\n", "chat", "--model", "gpt-4o", "-T", "calc",
                     "--system", "You are terse and exact.")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "offline model gpt-4o" in done.stdout
    rows = {line[:17].strip(): line[17:].split() for line in done.stdout.splitlines()}
    assert rows["system prompt"][0] == "1" and int(rows["system prompt"][1]) > 0
    assert rows["tool definitions"][0] == "1" and int(rows["tool definitions"][1]) > 0


def test_compress_summarises_with_the_chat_provider(
    env: dict[str, str], run: Run, store: Store, fake: FakeOpenAI
) -> None:
    """The environment names an OpenAI upstream; the chat's --provider offline summarises."""
    ok(run("session", "new", "s"))
    lines = "a\nb\nc\nd\ne\nf\n/compress --keep-recent 2 --min-tokens 0\n"
    done = chat_pipe(upstream(env, fake), lines, "chat", "--provider", "offline")
    assert done.returncode == 0, done.stderr
    assert fake.requests == []
    assert store.load_slot("s").compressed


def test_diff_is_of_the_chat_slot_and_a_slot_gone_falls_back_to_the_current_one(
    offline: dict[str, str], run: Run, store: Store
) -> None:
    ok(run("session", "new", "s"))
    ok(run("turn", "send", "hello"))
    ok(run("turn", "retry"))
    ok(run("slot", "use", "default"))  # current: default; the chat: default-retry-1
    done = chat_pipe(offline, "/diff\n/diff default\n", "chat", "--slot", "default-retry-1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("--- default\n+++ default-retry-1\n") == 2
    [after] = [c.id for c in Checkpointer(store).summaries("s") if c.label == "after turn 1"]
    done = chat_pipe(offline, f"/rollback {after}\nagain\n", "chat", "--slot", "default-retry-1")
    assert done.returncode == 0, done.stderr
    assert "agctl: slot default-retry-1 is gone; the chat goes on on slot default" in done.stderr
    assert texts(store, "s", "default")[2] == "again"


def test_bad_input_is_refused_before_a_session_is_started(
    offline: dict[str, str], store: Store
) -> None:
    with_key = {**offline, "ANTHROPIC_API_KEY": "x"}
    for env, args, status, error in (
        (offline, ["-T", "nosuch"], 3, "agctl: error: no tool named nosuch"),
        (offline, ["--slot", "nosuch"], 3, "agctl: error: slot 'nosuch' not found"),
        (with_key, ["--provider", "anthropic", "-o", "seed", "1"], 2,
         "agctl: error: the anthropic wire accepts no model option 'seed'"),
    ):  # fmt: skip
        done = chat_pipe(env, "a\nb\n", "chat", *args)
        assert (done.returncode, done.stdout) == (status, ""), done.stderr
        assert done.stderr.startswith(error)
        assert store.list_sessions() == [] and store.current_session_id() is None
    done = chat_pipe(offline, "hi\n", "chat", "--slot", "default")  # a new session has it
    assert done.returncode == 0, done.stderr
    assert store.current_session_id() is not None


def test_sigint_ends_a_piped_chat_with_the_turn_in_flight_drafted(
    env: dict[str, str], run: Run, store: Store, fake: FakeOpenAI
) -> None:
    """Not on a terminal, Ctrl-C (SIGINT) ends the chat as it ends any command: exit 130,
    the turn in flight kept as the draft, the lines queued after it never sent."""
    import threading

    arrived, release = threading.Event(), threading.Event()
    fake.before_reply(lambda: (arrived.set(), release.wait(30)))
    ok(run("session", "new", "s"))
    chat = subprocess.Popen([sys.executable, "-m", "agctl", "chat"], env=upstream(env, fake),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    assert chat.stdin is not None
    chat.stdin.write(b"tell me\nsecond\nthird\n")
    chat.stdin.close()
    try:
        assert arrived.wait(60)  # the first turn's request is at the server, unanswered
        chat.send_signal(signal.SIGINT)
        assert chat.wait(timeout=60) == 130
    finally:
        release.set()
        chat.kill()  # a no-op once it ended
        chat.wait()
    assert len(fake.requests) == 1
    assert texts(store, "s") == []
    assert store.load_draft("s", "default").prompt == "tell me"
