"""A damaged checkpoint log on the command line: a data error that names the log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import stored_documents

Run = Callable[..., Result]

EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT, EXIT_DATA, EXIT_PROVIDER = 0, 2, 3, 4, 5, 6
SID = "s"


def ok(result: Result) -> Result:
    assert result.exit_code == EXIT_OK, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def fails(result: Result, code: int, *needles: str) -> Result:
    """A clean failure: the exit code, the message on stderr, nothing on stdout."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.strip() and "Traceback" not in result.stderr
    if code != EXIT_USAGE:  # usage errors may come from Click itself
        assert result.stderr.startswith("agctl: error: ")
    for needle in needles:
        assert needle in result.stderr, result.stderr
    return result


def as_json(result: Result) -> Any:
    return json.loads(ok(result).stdout)


def documents(data_dir: Path, sid: str = SID) -> dict[str, Any]:
    return stored_documents(data_dir, sid)


def send(run: Run, prompt: str, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = as_json(run("turn", "send", prompt, "--json", *args))
    return result


@pytest.fixture
def session(run: Run) -> str:
    ok(run("session", "new", SID))
    return SID


@pytest.fixture
def turns(run: Run, session: str, isolated_env: Path) -> dict[int, tuple[str, dict[str, Any]]]:
    """Three turns: turn number -> (its checkpoint id, the documents after it)."""
    seen = {}
    for number in range(1, 4):
        result = send(run, f"prompt {number}")
        assert result["turn"] == number
        seen[number] = (result["checkpoint"], documents(isolated_env))
    return seen


def test_a_corrupt_checkpoint_is_a_data_error_naming_the_log(
    run: Run, turns: dict[int, tuple[str, dict[str, Any]]], isolated_env: Path
) -> None:
    log = isolated_env / "sessions" / SID / "checkpoints" / "log"
    raw = log.read_bytes()
    assert raw.count(b'"prompt 3"') == 1
    log.write_bytes(raw.replace(b'"prompt 3"', b'"prompt X"'))
    live = documents(isolated_env)

    fails(run("ckpt", "rollback", turns[3][0]), EXIT_DATA, str(log), "does not match its checksum")
    fails(run("ckpt", "show", turns[3][0]), EXIT_DATA, str(log))
    fails(run("ckpt", "diff", turns[3][0]), EXIT_DATA, str(log))
    assert documents(isolated_env) == live
    ok(run("ckpt", "rollback", turns[2][0]))
    assert documents(isolated_env) == turns[2][1]
