"""Tools run as real processes: time limits that kill whole process groups, floods of output,
the scrubbed environment, bytes that are not UTF-8, programs that are missing or fail."""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from helpers import process_dead

from agctl.turn.tools import KEPT_OUTPUT, ToolRun, ToolSpec, check_call, run_tool


def tool(*command: str, **fields: Any) -> ToolSpec:
    return ToolSpec.model_validate({"name": "t", "command": list(command), **fields})


def run(spec: ToolSpec, arguments: dict[str, Any] | None = None, **kwargs: Any) -> ToolRun:
    return run_tool(spec, arguments or {}, data_dir=None, **kwargs)


def wait_dead(pid: int) -> bool:
    """Whether `pid` dies within 10 s: a kill is not instant, but it is not slow either."""
    for _ in range(1000):
        if process_dead(pid):
            return True
        time.sleep(0.01)
    return False


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@needs_proc
def test_a_timeout_kills_the_tool_and_its_children() -> None:
    # Long enough for sh to start its child and say its pid on a loaded machine.
    result = run(tool("sh", "-c", "sleep 60 & echo $!; sleep 60", timeout_s=1.5))
    child = int(result.output.strip())
    assert result.timed_out and result.exit_code is None
    assert result.result_text == "error: timed out after 1.5s"
    assert wait_dead(child)


@needs_proc
def test_a_tool_that_ignores_sigterm_is_killed() -> None:
    script = "trap '' TERM; sleep 60 & echo $!; wait"
    result = run(tool("sh", "-c", script, timeout_s=1.5))
    child = int(result.output.strip())
    assert result.timed_out
    assert wait_dead(child)


@needs_proc
def test_what_a_tool_leaves_running_dies_with_it() -> None:
    """The background child holds stdout open: the run neither waits 60 s nor leaves it."""
    result = run(tool("sh", "-c", "sleep 60 & echo $!", timeout_s=30))
    assert result.exit_code == 0 and not result.timed_out
    assert wait_dead(int(result.output.strip()))


def test_ten_megabytes_of_output_keep_one_mebibyte_and_the_model_sees_head_and_tail() -> None:
    code = (
        "import sys; out = sys.stdout.buffer; out.write(b'HEAD'); "
        "[out.write(b'x' * 1000) for _ in range(10_000)]; out.write(b'TAIL')"
    )
    expected = b"HEAD" + b"x" * 10_000_000 + b"TAIL"
    result = run(tool(sys.executable, "-c", code, max_output=4096))
    assert result.exit_code == 0
    assert result.output_bytes == len(expected)
    assert result.output_sha256 == hashlib.sha256(expected).hexdigest()
    assert len(result.output) == KEPT_OUTPUT and result.output.startswith("HEADxx")
    assert result.truncated
    assert result.result_text.startswith("HEADxxx") and result.result_text.endswith("xxxTAIL")
    head, marker, tail = result.result_text.split("\n")
    cut = int(marker.removeprefix("[... ").removesuffix(" bytes cut ...]"))
    assert len(head) + cut + len(tail) == len(expected)
    assert len(result.result_text.encode()) <= 4096


def test_the_cut_count_adds_up() -> None:
    result = run(tool(sys.executable, "-c", "print('a' * 100_000, end='')", max_output=1000))
    head, marker, tail = result.result_text.split("\n")
    cut = int(marker.removeprefix("[... ").removesuffix(" bytes cut ...]"))
    assert len(head) + cut + len(tail) == 100_000


def test_the_environment_is_scrubbed_in_the_process() -> None:
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": "/home/someone",
        "OPENAI_API_KEY": "sk-planted",
        "MY_TOKEN": "planted-token",
        "MY_SETTING": "kept",
        "AGCTL_X": "planted",
        "UNRELATED": "dropped",
    }
    result = run(tool("env", env_allow=["MY_*", "AGCTL_*"]), environ=environ)
    seen = dict(line.split("=", 1) for line in result.output.splitlines())
    assert seen == {"PATH": os.environ["PATH"], "HOME": "/home/someone", "MY_SETTING": "kept"}
    assert "planted" not in result.output


def test_invalid_utf8_is_replaced_and_hashed_as_read() -> None:
    raw = b"ok \xff\xfe end"
    result = run(tool("printf", "ok \\377\\376 end"))
    assert result.output == raw.decode("utf-8", "replace") == result.result_text
    assert "\ufffd" in result.output
    assert result.output_sha256 == hashlib.sha256(raw).hexdigest()


def test_a_missing_program_is_an_error_result() -> None:
    result = run(tool("agctl-no-such-program"))
    assert result.result_text == (
        "error: cannot run agctl-no-such-program: No such file or directory"
    )
    assert not result.started and result.exit_code is None and not result.ok


def test_a_missing_working_directory_is_an_error_result(tmp_path: Path) -> None:
    result = run(tool("true", cwd="absent"), cwd=tmp_path)
    assert result.result_text.startswith("error: cannot run true: its working directory")
    assert not result.started


def test_a_failure_gives_its_exit_and_the_tail_of_stderr() -> None:
    result = run(tool("sh", "-c", "echo out; echo first >&2; echo last >&2; exit 3"))
    assert result.exit_code == 3 and not result.ok
    assert result.result_text == "error: exit 3\nfirst\nlast"
    assert result.output == "out\n"


def test_a_long_stderr_keeps_its_tail() -> None:
    code = "import sys; sys.stderr.write('B' * 100_000 + 'END'); sys.exit(1)"
    result = run(tool(sys.executable, "-c", code))
    assert result.result_text.startswith("error: exit 1\nBBB")
    assert result.result_text.endswith("BEND") and len(result.stderr_tail) <= 4096


def test_a_tool_killed_by_a_signal_says_so() -> None:
    result = run(tool("sh", "-c", "kill -9 $$"))
    assert result.exit_code == -9
    assert result.result_text == "error: killed by signal SIGKILL"


def test_stdin_mode_sends_one_json_document(tmp_path: Path) -> None:
    assert run(tool("cat"), {"text": "é", "n": 1}).output == '{"text":"é","n":1}'


def test_large_arguments_reach_a_tool_that_does_not_read_them() -> None:
    """Writing stdin must not deadlock against a tool that never reads it."""
    big = {"text": "x" * 5_000_000}
    assert run(tool("true"), big).exit_code == 0
    assert run(tool("cat"), big).output_bytes == len('{"text":""}') + 5_000_000


def test_env_mode_sets_the_variables() -> None:
    script = 'printf "%s|%s|%s" "$AGCTL_TOOL_ARGS" "$TOOL_ARG_CITY" "$TOOL_ARG_DAYS"'
    result = run(tool("sh", "-c", script, args="env"), {"city": "Paris", "days": 3})
    assert result.output == '{"city":"Paris","days":3}|Paris|3'


def test_env_mode_gives_no_stdin() -> None:
    assert run(tool("cat", args="env"), {"a": 1}).output == ""


def test_argv_mode_appends_the_json() -> None:
    result = run(tool("sh", "-c", 'printf "%s" "$1"', "sh", args="argv"), {"q": "a b"})
    assert result.output == '{"q":"a b"}'


def test_a_tool_runs_where_agctl_started_or_in_its_cwd(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    assert run(tool("pwd"), cwd=tmp_path).output.strip() == str(tmp_path)
    assert run(tool("pwd", cwd="sub"), cwd=tmp_path).output.strip() == str(tmp_path / "sub")


def test_a_call_with_bad_arguments_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    spec = tool(
        "touch",
        str(marker),
        parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    for arguments in ('{"n": "three"}', "{oops", "[]"):
        checked = check_call(spec, "t", arguments)
        assert isinstance(checked, str) and checked.startswith("error: ")
    assert not marker.exists()
    checked = check_call(spec, "t", '{"n": 3}')
    assert isinstance(checked, dict)
    assert run(spec, checked).ok and marker.exists()


@needs_proc
def test_ctrl_c_kills_the_tool_group_and_reraises(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"echo $$ > {pids}; sleep 60 & echo $! >> {pids}; wait"

    def interrupt_once_started(signum: int, frame: FrameType | None) -> None:
        if pids.exists() and len(pids.read_text().split()) == 2:
            signal.setitimer(signal.ITIMER_REAL, 0)
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt_once_started)
    signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(tool("sh", "-c", script, timeout_s=60))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    for pid in pids.read_text().split():
        assert wait_dead(int(pid))
