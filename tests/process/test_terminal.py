"""What reaches a terminal, and what happens when standard output cannot be written.

Real processes throughout: `python -m agctl` on a pseudo-terminal (read from its master
side), on /dev/full, on a pipe closed early, with its standard output closed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest
from click.testing import Result
from terminal import HOSTILE_TEXT, OSC52, TIMEOUT, on_terminal, raw_controls

from agctl.cli.output import neutralise

HOSTILE_TITLE = "t\x1b]0;evil\x07"


@pytest.fixture
def env(isolated_env: Path, tmp_path: Path) -> dict[str, str]:
    environ = dict(os.environ)
    environ.update(
        AGCTL_DATA_DIR=str(isolated_env),
        AGCTL_CONFIG=str(tmp_path / "config.json"),
        PYTHONIOENCODING="utf-8",
        LINES="200",
        PAGER="cat",
    )
    return environ


def agctl(
    env: dict[str, str],
    *args: str,
    stdout: int | IO[bytes] = subprocess.PIPE,
    stderr: int | IO[bytes] = subprocess.PIPE,
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agctl", *args],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.fixture
def session(run: Callable[..., Result]) -> None:
    """A session titled HOSTILE_TITLE whose one message is HOSTILE_TEXT, read from stdin
    (made in-process: only what is shown needs a real terminal)."""
    assert run("session", "new", "s1").exit_code == 0
    assert run("session", "set", "title", HOSTILE_TITLE).exit_code == 0
    appended = run("msg", "append", "user", "-", input=(HOSTILE_TEXT + "\n").encode())
    assert appended.exit_code == 0, appended.output


# ---- the rule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain café 你好 🙂\n\ttab", "plain café 你好 🙂\n\ttab"),
        (OSC52, "\\u001b]52;c;ZXZpbA==\\u0007"),
        ("\x1b[2J\x1b[H", "\\u001b[2J\\u001b[H"),
        ("\x9b31m\x9d0;t\x9c", "\\u009b31m\\u009d0;t\\u009c"),
        (
            "a\x00b\x07c\x08d\re\x7ff\x0bg\x0ch",
            "a\\u0000b\\u0007c\\u0008d\\u000de\\u007ff\\u000bg\\u000ch",
        ),
        ("\x1b[1;31mred\x1b[0m plain", "red plain"),  # colour is dropped, not shown
        ("\x1b[3\x1b[0m1m", "\\u001b[31m"),  # a colour sequence cannot be assembled
    ],
)
def test_neutralise_shows_every_control_but_newline_and_tab(text: str, shown: str) -> None:
    assert neutralise(text) == shown
    assert not [
        c for c in neutralise(text) if (ord(c) < 32 and c not in "\n\t") or 127 <= ord(c) < 160
    ]


def test_neutralised_json_is_still_the_same_json() -> None:
    document = json.dumps({"content": HOSTILE_TEXT}, ensure_ascii=False)
    assert json.loads(neutralise(document)) == {"content": HOSTILE_TEXT}


# ---- on a terminal: nothing raw; elsewhere: the exact bytes ----------------------------------

HUMAN_COMMANDS = [
    ["msg", "list"],
    ["msg", "get", "-1"],
    ["msg", "export", "--format", "text"],
    ["msg", "export", "--format", "markdown"],
    ["session", "show"],
    ["session", "list"],
]


@pytest.mark.parametrize("args", HUMAN_COMMANDS, ids=" ".join)
def test_control_sequences_never_reach_a_terminal_raw(
    env: dict[str, str], session: None, args: list[str]
) -> None:
    status, received = on_terminal(env, *args)
    assert status == 0, received
    assert raw_controls(received) == []
    shown = received.decode()
    if args[0] == "msg":
        assert "look\\u001b]52;c;ZXZpbA==\\u0007" in shown
    else:
        assert "t\\u001b]0;evil\\u0007" in shown


@pytest.mark.parametrize("args", HUMAN_COMMANDS, ids=" ".join)
def test_redirected_output_keeps_the_exact_text(
    env: dict[str, str], session: None, args: list[str]
) -> None:
    result = agctl(env, *args)
    assert result.returncode == 0, result.stderr
    if args[:2] == ["msg", "get"] or args[:2] == ["msg", "export"]:
        assert HOSTILE_TEXT.encode() in result.stdout
    elif args[0] == "msg":  # the table folds whitespace, CR among it, into single spaces
        assert OSC52.encode() in result.stdout
    else:
        assert HOSTILE_TITLE.encode() in result.stdout


@pytest.mark.parametrize(
    ("args", "path"),
    [
        (["msg", "get", "-1", "--json"], ["content"]),
        (["msg", "list", "--json"], [0, "content"]),
        (["msg", "export"], [0, "content"]),
        (["session", "show", "--json"], ["title"]),
    ],
    ids=lambda v: " ".join(map(str, v)),
)
def test_json_on_a_terminal_is_valid_json_of_the_exact_text(
    env: dict[str, str], session: None, args: list[str], path: list[str | int]
) -> None:
    status, received = on_terminal(env, *args)
    assert status == 0, received
    assert raw_controls(received) == []
    value = json.loads(received)
    for key in path:
        value = value[key]
    assert value == (HOSTILE_TITLE if "title" in path else HOSTILE_TEXT)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "script.json"
    reply = {"content": f"reply{OSC52} \x9b2J done", "reasoning": "thinking\x1b]0;evil\x07 hard"}
    path.write_text(json.dumps([reply, reply]))
    return path


def test_a_streamed_reply_and_its_reasoning_reach_the_terminal_neutralised(
    env: dict[str, str], session: None, script: Path
) -> None:
    status, received = on_terminal(env, "turn", "send", "hi", "--script", str(script))
    assert status == 0, received
    assert raw_controls(received) == []
    shown = received.decode()
    assert "reply\\u001b]52;c;ZXZpbA==\\u0007 \\u009b2J done" in shown
    assert "thinking\\u001b]0;evil\\u0007 hard" in shown
    stored = agctl(env, "msg", "get", "-1", "--json")
    assert json.loads(stored.stdout)["content"] == f"reply{OSC52} \x9b2J done"


def test_a_streamed_reply_redirected_is_exact(
    env: dict[str, str], session: None, script: Path
) -> None:
    result = agctl(env, "turn", "send", "hi", "--script", str(script), "--stream")
    assert result.returncode == 0, result.stderr
    assert f"reply{OSC52} \x9b2J done".encode() in result.stdout


@pytest.mark.parametrize("mode", ["--stream", "--no-stream"])
def test_a_reply_with_a_csi_sequence_redirected_is_exact(
    env: dict[str, str], session: None, tmp_path: Path, mode: str
) -> None:
    """Before: click.echo stripped `ESC[31m` from the reply when stdout was a file."""
    path = tmp_path / "csi.json"
    path.write_text(json.dumps([{"content": "a \x1b[31mred\x1b[0m word"}]))
    result = agctl(env, "turn", "send", "hi", "--script", str(path), mode)
    assert result.returncode == 0, result.stderr
    assert b"a \x1b[31mred\x1b[0m word" in result.stdout


def test_error_messages_are_neutralised_on_a_terminal(env: dict[str, str], session: None) -> None:
    status, received = on_terminal(env, "msg", "import", f"/nonexistent/{OSC52}")
    assert status == 3
    assert raw_controls(received) == []
    assert b"agctl: error: /nonexistent/\\u001b]52;c;ZXZpbA==\\u0007: no such file" in received


def test_the_pager_gets_neutralised_text(env: dict[str, str], session: None) -> None:
    for _ in range(5):
        assert agctl(env, "msg", "append", "user", HOSTILE_TEXT).returncode == 0
    status, received = on_terminal({**env, "LINES": "4", "PAGER": "cat"}, "msg", "list")
    assert status == 0, received
    assert raw_controls(received) == []
    assert received.count(b"\\u001b]52;c;") == 6


def test_clicks_progress_bar_still_draws(
    env: dict[str, str], session: None, tmp_path: Path
) -> None:
    """Click's own progress bar redraws its line with CR; it shows no user data."""
    transcript = tmp_path / "transcript.jsonl"
    transcript.write_text("".join(json.dumps({"input": f"q{n}"}) + "\n" for n in range(3)))
    status, received = on_terminal(env, "turn", "replay", str(transcript))
    assert status == 0, received
    assert re.search(rb"\r(\x1b\[\?25l)?replaying  \[#", received), received


# ---- standard output that cannot be written --------------------------------------------------


def test_a_full_disk_on_stdout_is_one_clear_error(env: dict[str, str], session: None) -> None:
    with open("/dev/full", "wb") as full:
        result = agctl(env, "msg", "list", stdout=full, stderr=subprocess.PIPE)
    assert result.returncode == 1
    assert (
        result.stderr == b"agctl: error: cannot write to standard output: No space left on device\n"
    )


def test_a_full_disk_on_stdout_of_a_change_is_reported_too(
    env: dict[str, str], session: None
) -> None:
    with open("/dev/full", "wb") as full:
        result = agctl(env, "msg", "append", "user", "hi", stdout=full, stderr=subprocess.PIPE)
    assert result.returncode == 1
    assert (
        result.stderr == b"agctl: error: cannot write to standard output: No space left on device\n"
    )


@pytest.mark.parametrize(
    "args", [["msg", "list"], ["msg", "export", "--format", "text"], ["msg", "list", "--json"]]
)
def test_a_reader_that_goes_away_ends_agctl_quietly_with_141(
    env: dict[str, str], session: None, args: list[str]
) -> None:
    """As `agctl msg list | head -0`: the pipe is closed before agctl writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = agctl(env, *args, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert result.returncode == 141
    assert result.stderr == b""


def test_a_pipeline_into_head(env: dict[str, str], session: None) -> None:
    result = subprocess.run(
        '"$PYTHON" -m agctl msg list | head -0; echo "${PIPESTATUS[0]}"',
        shell=True,
        executable="/bin/bash",
        env={**env, "PYTHON": sys.executable},
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.stdout == b"141\n"
    assert result.stderr == b""


def test_a_closed_stdout_is_an_error(env: dict[str, str], session: None) -> None:
    result = subprocess.run(
        '"$PYTHON" -m agctl msg list >&-',
        shell=True,
        env={**env, "PYTHON": sys.executable},
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr == b"agctl: error: cannot write to standard output: it is closed\n"


def test_a_closed_stdout_is_no_error_for_a_quiet_command(
    env: dict[str, str], session: None
) -> None:
    result = subprocess.run(
        '"$PYTHON" -m agctl -q session use s1 >&-',
        shell=True,
        env={**env, "PYTHON": sys.executable},
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""


def test_an_unwritable_stderr_keeps_the_exit_code(env: dict[str, str], session: None) -> None:
    with open("/dev/full", "wb") as full:
        result = agctl(env, "msg", "get", "99", stdout=subprocess.PIPE, stderr=full)
    assert result.returncode == 3
    assert result.stdout == b""
