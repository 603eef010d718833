"""A damaged checkpoint log on the command line: a data error that names the log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import (
    EXIT_DATA,
    documents,
    fails,
    ok,
    turns_with_checkpoints,
)

Run = Callable[..., Result]

SID = "s"


@pytest.fixture
def session(run: Run) -> str:
    ok(run("session", "new", SID))
    return SID


@pytest.fixture
def turns(run: Run, session: str, isolated_env: Path) -> dict[int, tuple[str, dict[str, Any]]]:
    """Three turns: turn number -> (its checkpoint id, the documents after it)."""
    return turns_with_checkpoints(run, isolated_env, session)


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
