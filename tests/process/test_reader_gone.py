"""A reader that goes away in the middle of a streamed reply (`agctl turn send | head -c 10`)
costs no turn: the reply is committed whole, and agctl exits 141 saying nothing, as a
command whose reader left before it wrote does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI

SID = "s"
REPLY = "".join(f"word{n:03d} " for n in range(60))


def agctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agctl", "-s", SID, *args],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.fixture
def env(isolated_env: Path, server: FakeOpenAI) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AGCTL_", "OPENAI_"))}
    environ.update(
        AGCTL_DATA_DIR=str(isolated_env),
        AGCTL_PROVIDER="openai",
        AGCTL_BASE_URL=server.base_url,
        AGCTL_MODEL="fake-model",
        PYTHONIOENCODING="utf-8",
    )
    created = agctl(environ, "session", "new", SID)
    assert created.returncode == 0, created.stderr
    return environ


@pytest.mark.parametrize("mode", [["--stream"], ["--stream", "--jsonl"]])
def test_a_reader_gone_mid_stream_loses_no_turn(
    env: dict[str, str], server: FakeOpenAI, tmp_path: Path, mode: list[str]
) -> None:
    server.reply(REPLY, chunk_size=8)
    gate = server.pause_stream(after=4)  # the rest waits until the reader has gone
    errors = tmp_path / "stderr"
    read_end, write_end = os.pipe()
    with errors.open("wb") as stderr:
        turn = subprocess.Popen(
            [sys.executable, "-m", "agctl", "-s", SID, "turn", "send", "hi", *mode],
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=stderr,
            env=env,
        )
    os.close(write_end)
    try:
        head = b""
        while len(head) < 10:  # as `head -c 10`: read ten bytes, then go away
            chunk = os.read(read_end, 10 - len(head))
            assert chunk, "agctl ended before it streamed ten bytes"
            head += chunk
    finally:
        os.close(read_end)
        gate.set()
        status = turn.wait(timeout=60)
    assert (status, errors.read_text()) == (141, "")
    listed = agctl(env, "--json", "msg", "list")
    assert listed.returncode == 0, listed.stderr
    messages = [(m["role"], m["content"]) for m in json.loads(listed.stdout)]
    assert messages == [("user", "hi"), ("assistant", REPLY)]
    assert agctl(env, "draft", "show").returncode == 3, "no draft: the turn is committed"


def test_every_writer_goes_on_after_standard_output_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared mechanism every command prints through: once standard output cannot be
    written, click.echo, print, sys.stdout and its buffer drop what they are given instead
    of raising into the command's work, and the command line ends 141."""
    import click

    from agctl.cli import output

    read_end, write_end = os.pipe()
    os.close(read_end)
    broken = os.fdopen(write_end, "w", encoding="utf-8")
    monkeypatch.setattr(sys, "stdout", broken)
    done = []
    with output.guarded() as stdout:
        click.echo("one")
        print("two", flush=True)
        sys.stdout.write("three")
        sys.stdout.buffer.write(b"four")
        sys.stdout.flush()
        done.append(True)
        status = output.settle(stdout)
    assert done == [True]
    assert isinstance(stdout.failure, BrokenPipeError)
    assert status == output.EXIT_BROKEN_PIPE
    broken.close()
