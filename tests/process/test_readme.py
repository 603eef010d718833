"""The README's code blocks marked runnable run as printed, in a real shell.

A block is marked by an HTML comment on the line before its fence (invisible on GitHub):

- `<!-- runnable -->`: each command must exit 0; in a `console` block each `$ ` line is a
  command and the lines after it are its output (stdout and stderr), compared exactly
  but for timestamps;
- `<!-- runnable: twice -->`: the block runs twice in one data dir (a CI job re-run);
- `<!-- runnable: with a session -->`: a session is made first;
- `<!-- runnable: served -->`: `agctl serve` runs meanwhile (on a free port, stopped with
  SIGTERM after), with OPENAI_BASE_URL and OPENAI_API_KEY set for its clients.

A block marked `<!-- file: NAME -->` is a file the examples use. Each block runs in a
fresh directory holding those files and the ones the README's examples name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from serving import serving

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MARKER = re.compile(r"^<!-- runnable(?::\s*(?P<how>[^>]*?))?\s*-->$")
FILE_MARKER = re.compile(r"^<!-- file: (?P<name>[\w.-]+) -->$")
FENCE = re.compile(r"^```(?P<lang>\w*)$")


@dataclass
class Block:
    line: int
    lang: str
    how: str
    text: str

    @property
    def name(self) -> str:
        return f"README.md:{self.line} ({self.lang}{', ' + self.how if self.how else ''})"


def runnable_blocks() -> list[Block]:
    lines = README.read_text(encoding="utf-8").splitlines()
    blocks = []
    for number, line in enumerate(lines):
        marker = MARKER.match(line)
        if not marker:
            continue
        fence = FENCE.match(lines[number + 1])
        assert fence, f"README.md:{number + 1}: a runnable marker must come right before a fence"
        end = lines.index("```", number + 2)
        body = "\n".join(lines[number + 2 : end]) + "\n"
        how = (marker.group("how") or "").strip()
        assert how in ("", "twice", "with a session", "served"), f"README.md:{number + 1}: {how!r}"
        blocks.append(Block(number + 2, fence.group("lang"), how, body))
    return blocks


def file_blocks() -> dict[str, str]:
    """The blocks marked as files, by name."""
    lines = README.read_text(encoding="utf-8").splitlines()
    files = {}
    for number, line in enumerate(lines):
        marker = FILE_MARKER.match(line)
        if marker:
            assert FENCE.match(lines[number + 1]), f"README.md:{number + 1}: a fence must follow"
            end = lines.index("```", number + 2)
            files[marker.group("name")] = "\n".join(lines[number + 2 : end]) + "\n"
    return files


# The files the README's examples read.
FILES = {
    "notes.txt": "Meeting notes: ship on Friday.\n",
    "main.py": "print('hello')\n",
    "test_main.py": "def test_hello():\n    assert True\n",
    "replies.json": json.dumps([f"canned reply {n}" for n in range(1, 21)]),
    "chat.jsonl": "".join(
        json.dumps({"input": text}) + "\n" for text in ("Hello", "What is a monad?", "Thanks")
    ),
    # The Tools section: the offline model's steps (a call of wc, then the answer), and a
    # transcript line expecting that call.
    "wc.json": json.dumps(
        [
            [
                {"tool_calls": [{"name": "wc", "arguments": {"path": "notes.txt"}}]},
                "notes.txt has 5 words.",
            ]
        ]
    ),
    "wc-check.jsonl": json.dumps(
        {
            "input": "How many words in notes.txt?",
            "expect_tools": [{"name": "wc", "arguments": {"path": "notes.txt"}}],
        }
    )
    + "\n",
    # Tools from MCP servers: the offline model calls notes__count_words, then answers.
    "count.json": json.dumps(
        [
            [
                {
                    "tool_calls": [
                        {"name": "notes__count_words", "arguments": {"path": "notes.txt"}}
                    ]
                },
                "notes.txt has 5 words.",
            ]
        ]
    ),
    **file_blocks(),
}


@pytest.fixture
def workdir(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A directory with the README's files, and an environment whose `agctl` is this tree."""
    work = tmp_path / "work"
    work.mkdir()
    for name, text in FILES.items():
        (work / name).write_text(text)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # `python` in an example is the Python running the tests, with their packages.
    for name, run in (("agctl", "-m agctl "), ("python", "")):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {run}"$@"\n')
        shim.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        "AGCTL_DATA_DIR": str(tmp_path / "data"),
        "AGCTL_CONFIG": str(tmp_path / "config.json"),
        "NO_COLOR": "1",
        "COLUMNS": "80",
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    return work, env


def sh(command: str, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )


STAMPS = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<timestamp>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d"), "<time>"),
]


def unstamped(text: str) -> str:
    for pattern, stand_in in STAMPS:
        text = pattern.sub(stand_in, text)
    return text


def console_steps(text: str) -> list[tuple[str, str]]:
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"output before the first command: {line!r}"
            steps[-1][1].append(line)
    return [(command, "".join(f"{line}\n" for line in out)) for command, out in steps]


def sh_commands(text: str) -> list[str]:
    """The commands of a shell block, a line ending in a backslash joined to the next."""
    joined = re.sub(r"\\\n", "", text)
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


BLOCKS = runnable_blocks()


def test_the_readme_marks_its_tour_replay_snippet_and_stdin_example() -> None:
    texts = [block.text for block in BLOCKS]
    assert any("$ agctl session new" in text for text in texts), "the tour"
    assert any("turn replay chat.jsonl" in text for text in texts), "the CI replay snippet"
    assert any('turn send "Summarise this" < notes.txt' in text for text in texts), "stdin"


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_a_runnable_block_runs_as_printed(
    block: Block, workdir: tuple[Path, dict[str, str]]
) -> None:
    work, env = workdir
    if block.how == "with a session":
        assert sh("agctl session new -q", work, env).returncode == 0
    if block.how == "served":
        with serving(env) as (url, _):
            run_block(block, work, {**env, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "unused"})
    else:
        run_block(block, work, env)


def run_block(block: Block, work: Path, env: dict[str, str]) -> None:
    """Run `block` as printed: a console block's output compared, others' exits checked."""
    if block.lang == "console":
        for command, expected in console_steps(block.text):
            result = sh(command, work, env)
            assert unstamped(result.stdout) == unstamped(expected), f"$ {command}"
        return
    if block.lang == "python":
        result = subprocess.run(
            [sys.executable, "-c", block.text],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return
    assert block.lang == "sh", f"{block.name}: cannot run a {block.lang!r} block"
    for _ in range(2 if block.how == "twice" else 1):
        for command in sh_commands(block.text):
            result = sh(command, work, env)
            assert result.returncode == 0, f"{command}\n{result.stdout}"


def test_the_stdin_example_sends_the_prompt_then_the_file(
    workdir: tuple[Path, dict[str, str]],
) -> None:
    work, env = workdir
    assert sh("agctl session new -q", work, env).returncode == 0
    (stdin_example,) = [
        line
        for block in BLOCKS
        for line in sh_commands(block.text)
        if line.startswith('agctl turn send "Summarise this" < notes.txt')
    ]
    assert sh(stdin_example, work, env).returncode == 0
    sent = sh("agctl msg get 0 --json", work, env)
    assert json.loads(sent.stdout)["content"] == "Summarise this\n\n" + FILES["notes.txt"][:-1]


def test_the_tools_example_runs_wc_on_the_file(workdir: tuple[Path, dict[str, str]]) -> None:
    """The three-line definition works as printed: the loop's tool message is wc's count
    of notes.txt (a broken definition would still exit 0, with an error result)."""
    work, env = workdir
    assert sh("agctl session new -q", work, env).returncode == 0
    (block,) = [block for block in BLOCKS if "agctl tool add wc" in block.text]
    define, send = sh_commands(block.text)[:2]
    assert sum(line.startswith(("agctl tool add", " ")) for line in block.text.splitlines()) == 3
    assert sh(define, work, env).returncode == 0
    assert "--script wc.json" in send
    assert sh(send, work, env).returncode == 0
    listed = json.loads(sh("agctl msg list --json", work, env).stdout)
    assert [m["role"] for m in listed] == ["user", "assistant", "tool", "assistant"]
    assert listed[2]["content"].strip() == str(len(FILES["notes.txt"].split()))
    assert listed[3]["content"] == "notes.txt has 5 words."


def test_the_mcp_example_runs_the_servers_tool_on_the_file(
    workdir: tuple[Path, dict[str, str]],
) -> None:
    """The MCP server printed in the README serves its tool as printed: the loop's tool
    message is its count of notes.txt (a broken server would still exit 0, with an error
    result)."""
    work, env = workdir
    assert sh("agctl session new -q", work, env).returncode == 0
    (block,) = [block for block in BLOCKS if "agctl mcp add notes" in block.text]
    add, _tools, send = sh_commands(block.text)[:3]
    assert sh(add, work, env).returncode == 0
    assert sh(send, work, env).returncode == 0
    listed = json.loads(sh("agctl msg list --json", work, env).stdout)
    assert [m["role"] for m in listed] == ["user", "assistant", "tool", "assistant"]
    assert listed[2]["content"] == str(len(FILES["notes.txt"].split()))


def test_the_exit_code_table_lists_every_exit_code_the_errors_define() -> None:
    from agctl.base import errors

    table = README.read_text(encoding="utf-8").split("### Exit codes", 1)[1].split("\n## ")[0]
    codes = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}
    defined = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    assert defined - codes == set()
