"""What a chat line asks for (agctl.chat.commands) and how lines become a prompt
(agctl.chat.lines): pure functions, checked directly; tests/process/test_chat.py runs
them on a terminal."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest

from agctl.base.errors import InvalidInput, UsageError
from agctl.chat.commands import SLASH, agctl_argv, help_text, parse
from agctl.chat.lines import PipeReader, block_open, encodable, history_path, unblocked


def test_a_line_is_a_prompt_unless_it_starts_with_a_slash() -> None:
    assert parse("hello /there").name is None
    assert parse("hello").name is None and parse("hello").text == "hello"
    assert parse("//etc/hosts is where").text == "/etc/hosts is where"
    assert parse("/memory set k 'two words'").words == ["set", "k", "two words"]


@pytest.mark.parametrize(
    ("line", "slot", "argv"),
    [
        ("/slots", None, ["slot", "list"]),
        ("/msgs", "a", ["msg", "list", "--slot", "a"]),
        ("/slot b", "a", ["slot", "use", "b"]),
        ("/undo 2", None, ["turn", "undo", "2"]),
        ("/diff", None, ["slot", "diff"]),
        ("/ckpt", None, ["ckpt", "create"]),
        ("/ckpt a good one", None, ["ckpt", "create", "--label", "a good one"]),
        ("/rollback k3x9", None, ["ckpt", "rollback", "k3x9"]),
        ("/ctx", "a", ["ctx", "show", "--slot", "a"]),
        ("/compress --keep-recent 2", None, ["ctx", "compress", "--keep-recent", "2"]),
        ("/pin 0 -1", "a", ["msg", "pin", "--slot", "a", "0", "-1"]),
        ("/memory", None, ["memory", "list"]),
        ("/memory rm k", None, ["memory", "rm", "k"]),
    ],
)
def test_a_slash_command_is_its_agctl_command(line: str, slot: str | None, argv: list[str]) -> None:
    assert agctl_argv(parse(line), {"slot": ["--slot", slot]} if slot else {}) == argv


def test_unknown_commands_and_bad_quotes_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="no command /nope in the chat: /help lists them"):
        parse("/nope")
    with pytest.raises(UsageError, match="/memory: No closing quotation"):
        parse("/memory set k 'open")


def test_help_names_every_command_within_100_columns() -> None:
    text = help_text()
    assert all(f"/{name}" in text for name in SLASH)
    assert max(len(line) for line in text.splitlines()) <= 100


@pytest.mark.parametrize(
    ("text", "is_open", "prompt"),
    [
        ('"""', True, ""),
        ('"""\none', True, "one"),
        ('"""\none\ntwo\n"""', False, "one\ntwo"),
        ('"""one"""', False, "one"),
        ("plain", False, "plain"),
        ('say """hi"""', False, 'say """hi"""'),
    ],
)
def test_a_block_is_open_until_closed_and_its_quotes_dropped(
    text: str, is_open: bool, prompt: str
) -> None:
    assert block_open(text) is is_open
    if not is_open:
        assert unblocked(text) == prompt


def test_a_pipe_gives_lines_and_blocks_and_refuses_what_is_not_utf8() -> None:
    reader = PipeReader(io.BytesIO(b'one\n"""\na\nb\n"""\n\xff\n'))
    assert reader.read("") == "one"
    assert unblocked(reader.read("")) == "a\nb"
    with pytest.raises(InvalidInput, match="line 6 of standard input is not valid UTF-8"):
        reader.read("")
    with pytest.raises(EOFError):
        reader.read("")
    with pytest.raises(UsageError, match='ended inside a """ block'):
        PipeReader(io.BytesIO(b'"""\nopen\n')).read("")
    assert not encodable("bad \udcff") and encodable("café")


def test_the_history_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = history_path(tmp_path / "data", "s")
    finally:
        os.umask(old)
    assert path == tmp_path / "data" / "chat-history" / "s.history"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_history_file_left_readable_is_made_private_again(tmp_path: Path) -> None:
    folder = tmp_path / "chat-history"
    folder.mkdir(mode=0o700)
    loose = folder / "s.history"
    loose.write_text("+old line\n")
    loose.chmod(0o644)
    assert stat.S_IMODE(history_path(tmp_path, "s").stat().st_mode) == 0o600
    assert loose.read_text() == "+old line\n"  # kept, not truncated


def test_the_chat_options_go_to_the_commands_that_take_them_before_their_own_words() -> None:
    passed = {
        "slot": ["--slot", "a"],
        "model": ["--model", "m"],
        "source": ["--script", "s.json"],
        "tools": ["-T", "calc"],
        "context": ["--system", "X"],
    }
    assert agctl_argv(parse("/compress --model own"), passed) == [
        "ctx", "compress", "--slot", "a", "--model", "m", "--script", "s.json", "--model", "own"
    ]  # fmt: skip
    assert agctl_argv(parse("/ctx"), passed) == [
        "ctx", "show", "--slot", "a", "--model", "m", "-T", "calc", "--system", "X"
    ]  # fmt: skip
    assert agctl_argv(parse("/slots"), passed) == ["slot", "list"]
