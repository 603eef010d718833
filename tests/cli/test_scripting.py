"""Issue 11, input that was lost or misread: piped stdin joined to an argument, --file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import data_dir_files

import agctl

Run = Callable[..., Result]
SID = "s"
SOURCE_ROOT = str(Path(agctl.__file__).resolve().parents[1])


@pytest.fixture(autouse=True)
def session(run: Run) -> None:
    assert run("session", "new", SID).exit_code == 0
    assert run("msg", "append", "user", "first").exit_code == 0


def last_text(run: Run) -> str:
    return str(json.loads(run("msg", "get", "-1", "--json").stdout)["content"])


# Every command that reads text, with what to read back afterwards.
TEXT_COMMANDS: dict[str, tuple[list[str], Callable[[Run], str]]] = {
    "msg append": (["msg", "append", "user", "ARG"], last_text),
    "msg insert": (["msg", "insert", "0", "user", "ARG"], lambda run: _message(run, 0)),
    "msg edit": (["msg", "edit", "0", "ARG"], lambda run: _message(run, 0)),
    "memory set": (
        ["memory", "set", "key", "ARG"],
        lambda run: run("memory", "get", "key").stdout.rstrip("\n"),
    ),
    "turn send": (["turn", "send", "ARG", "--no-stream"], lambda run: _message(run, -2)),
}


def _message(run: Run, index: int) -> str:
    return str(json.loads(run("msg", "get", str(index), "--json").stdout)["content"])


@pytest.mark.parametrize("name", sorted(TEXT_COMMANDS))
def test_an_argument_and_piped_stdin_are_joined(run: Run, name: str) -> None:
    """Before: `agctl turn send "Summarise this" < notes.txt` sent only the argument."""
    args, read_back = TEXT_COMMANDS[name]
    result = run(*[a.replace("ARG", "Summarise this") for a in args], input="the notes\n")
    assert result.exit_code == 0, result.output
    assert read_back(run) == "Summarise this\n\nthe notes"


@pytest.mark.parametrize("name", sorted(TEXT_COMMANDS))
def test_a_dash_is_stdin_only_and_no_stdin_is_the_argument_only(run: Run, name: str) -> None:
    args, read_back = TEXT_COMMANDS[name]
    assert run(*[a.replace("ARG", "-") for a in args], input="only stdin\n").exit_code == 0
    assert read_back(run) == "only stdin"
    assert run(*[a.replace("ARG", "alone") for a in args], input="").exit_code == 0
    assert read_back(run) == "alone"


@pytest.mark.parametrize("command", [["msg", "append", "user"], ["turn", "send"]])
def test_files_follow_the_text_each_under_a_line_naming_it(
    run: Run, tmp_path: Path, command: list[str]
) -> None:
    one, two = tmp_path / "one.py", tmp_path / "two.txt"
    one.write_text("print(1)\n")
    two.write_text("notes")
    result = run(*command, "Compare:", "-f", str(one), "--file", str(two), input="piped")
    assert result.exit_code == 0, result.output
    index = "-1" if command[0] == "msg" else "-2"
    assert _message(run, int(index)) == (
        f"Compare:\n\npiped\n\n--- {one} ---\nprint(1)\n\n--- {two} ---\nnotes"
    )


def test_files_alone_make_the_message(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "q.txt"
    path.write_text("just the file")
    assert run("msg", "append", "user", "-f", str(path), input="").exit_code == 0
    assert last_text(run) == f"--- {path} ---\njust the file"


@pytest.mark.parametrize("content", [None, b"caf\xe9"], ids=["missing", "not-utf8"])
@pytest.mark.parametrize("command", [["msg", "append", "user"], ["turn", "send"]])
def test_a_bad_file_is_exit_2_before_anything_is_sent_or_written(
    run: Run, tmp_path: Path, isolated_env: Path, content: bytes | None, command: list[str]
) -> None:
    path = tmp_path / "input.txt"
    if content is not None:
        path.write_bytes(content)
    before, files = run("slot", "show", "--json").stdout, data_dir_files(isolated_env)
    result = run(*command, "hi", "-f", str(path))
    assert result.exit_code == 2, result.output
    assert f"--file {path}" in result.stderr
    assert run("slot", "show", "--json").stdout == before
    assert data_dir_files(isolated_env) == files


def test_the_readme_stdin_example_runs_as_printed(isolated_env: Path, tmp_path: Path) -> None:
    """`agctl turn send "Summarise this" < notes.txt`, in a real process and shell."""
    (tmp_path / "notes.txt").write_text("the meeting moved to Tuesday\n")
    env = {
        **os.environ,
        "AGCTL_DATA_DIR": str(isolated_env),
        "AGCTL_SESSION": SID,
        "PYTHONPATH": SOURCE_ROOT,
    }
    done = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" -m agctl turn send "Summarise this" < notes.txt'],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Summarise this the meeting moved to Tuesday" in done.stdout


def test_an_empty_prompt_after_a_tool_result_sends_the_view_as_it_is(run: Run, store: Any) -> None:
    """Before: `turn send ""` after a tool result appended an empty user message."""
    from agctl.context.models import Message
    from agctl.providers.base import ChatRequest, Finish, TextDelta
    from agctl.turn.send import TurnOptions, send_turn

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    asked = Message.from_openai({"role": "assistant", "content": None, "tool_calls": [call]})
    store.update_slot(SID, None, lambda s: s.messages.append(asked))
    assert run("msg", "append", "tool", '{"ok": true}', "--tool-call-id", "c1").exit_code == 0
    seen: list[list[dict[str, Any]]] = []

    class Spy:
        name = "spy"

        def stream(self, request: ChatRequest) -> Any:
            seen.append(request.messages)
            yield TextDelta("done")
            yield Finish("stop")

    result = send_turn(store, SID, "", Spy(), TurnOptions(model="m"))
    assert seen[0][-1]["role"] == "tool"
    roles = [m.role for m in store.load_slot(SID).messages]
    assert roles[-3:] == ["assistant", "tool", "assistant"]
    assert result.reply.text() == "done"
    assert run("turn", "send", "", "--no-stream").exit_code == 2  # last is no tool result


@pytest.mark.parametrize(
    "how", [[], ["-"], [""]], ids=["no prompt, empty stdin", "-, empty stdin", "empty argument"]
)
def test_no_prompt_continues_after_a_tool_result_from_the_command_line(
    how: list[str], run: Run, store: Any
) -> None:
    """Before: `agctl turn send </dev/null` after a tool result was a usage error."""
    from agctl.context.models import Message

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    asked = Message.from_openai({"role": "assistant", "content": None, "tool_calls": [call]})
    store.update_slot(SID, None, lambda s: s.messages.append(asked))
    assert run("msg", "append", "tool", '{"ok": true}', "--tool-call-id", "c1").exit_code == 0
    result = run("turn", "send", *how, "--no-stream", input="")
    assert result.exit_code == 0, result.stderr
    roles = [m["role"] for m in json.loads(run("msg", "list", "--json").stdout)]
    assert roles[-3:] == ["assistant", "tool", "assistant"]


@pytest.mark.parametrize("how", [[], ["-"], [""]])
def test_an_empty_prompt_is_refused_before_anything_is_sent(how: list[str], run: Run) -> None:
    result = run("turn", "send", *how, "--no-stream", input="")
    assert result.exit_code == 2
    assert "prompt is empty" in result.stderr
    assert [m["content"] for m in json.loads(run("msg", "list", "--json").stdout)] == ["first"]


@pytest.mark.parametrize(
    ("profile", "variable"),
    [
        (["--preset", "openai"], "OPENAI_API_KEY"),
        (["--preset", "deepseek"], "DEEPSEEK_API_KEY"),
        (["--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "BOX_KEY"], "BOX_KEY"),
    ],
)
def test_an_unset_key_variable_fails_before_any_request(
    run: Run,
    server: Any,
    monkeypatch: pytest.MonkeyPatch,
    profile: list[str],
    variable: str,
) -> None:
    """Before: the request went out unauthenticated, and its 401 was retried."""
    for name in ("OPENAI_API_KEY", "DEEPSEEK_API_KEY", "BOX_KEY", "AGCTL_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    assert run("profile", "add", "p", *profile, "--model", "m", "--default").exit_code == 0
    result = run("turn", "send", "hi", "--no-stream")
    assert result.exit_code == 6, result.output
    assert f"{variable} is not set (profile p)" in result.stderr
    assert server.requests == []
    monkeypatch.setenv(variable, "sk-now-it-is-set-123456")
    assert run("turn", "send", "hi", "--no-stream").exit_code == 0
    assert len(server.requests) == 1


def test_a_keyless_local_server_needs_no_key(run: Run, server: Any) -> None:
    assert run("profile", "add", "local", "--base-url", server.base_url, "--model", "m",
               "--default").exit_code == 0  # fmt: skip
    assert run("turn", "send", "hi", "--no-stream").exit_code == 0


@pytest.mark.parametrize("word", ["default", "none", "null"])
def test_unsetting_a_session_text_setting_is_said_so(word: str, run: Run) -> None:
    """Before: `session set model null` stored the model "null", shown as `model = null`,
    like an unset one."""
    assert run("session", "set", "model", "gpt-x").exit_code == 0
    result = run("session", "set", "model", word)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "model unset (the default)\n"
    assert json.loads(run("session", "show", "--json").stdout)["model"] is None
    literal = run("session", "set", "model", "null-model")
    assert literal.stdout == "model = null-model\n"
