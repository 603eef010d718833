"""Cassettes given to `turn send --cassette` and `turn replay --cassette` that do not parse or
do not exist: a clear error that writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import refuses_and_writes_nothing

Run = Callable[..., Result]


# ---- cassettes that do not parse ------------------------------------------------------------

ENTRY = {"hash": "0" * 64, "request": {"model": "m", "messages": []}, "events": []}


BAD_CASSETTES = [
    pytest.param(b"not json\n", "line 1", id="not-json"),
    pytest.param(b"\xff\xfe\x00\n", "line 1", id="not-utf8"),
    pytest.param(b"null\n", "line 1", id="null"),
    pytest.param(b"[1, 2]\n", "line 1", id="array"),
    pytest.param(b'"entry"\n', "line 1", id="string"),
    pytest.param(b'{"a": 1}\n', "hash", id="wrong-object"),
    pytest.param(json.dumps({**ENTRY, "events": [1]}).encode() + b"\n", "events", id="event-int"),
    pytest.param(
        json.dumps({**ENTRY, "events": [{"type": "bogus"}]}).encode() + b"\n",
        "line 1",
        id="event-unknown",
    ),
    pytest.param(
        json.dumps({**ENTRY, "schema_version": "9.0"}).encode() + b"\n", "9.0", id="future"
    ),
    pytest.param(
        json.dumps({**ENTRY, "schema_version": "x.y"}).encode() + b"\n", "line 1", id="version"
    ),
    pytest.param(
        json.dumps(ENTRY).encode() + b"\n{broken\n" + json.dumps(ENTRY).encode() + b"\n",
        "line 2",
        id="middle-line",
    ),
]


@pytest.mark.parametrize(("content", "says"), BAD_CASSETTES)
@pytest.mark.parametrize("command", ["send", "replay"])
def test_a_cassette_that_does_not_parse_is_refused(
    run: Run,
    isolated_env: Path,
    tmp_path: Path,
    session: str,
    command: str,
    content: bytes,
    says: str,
) -> None:
    cassette = tmp_path / "bad.cassette"
    cassette.write_bytes(content)
    transcript = tmp_path / "chat.jsonl"
    transcript.write_text('{"input": "hello again"}\n')
    args = (
        ("turn", "send", "hello again", "--cassette", str(cassette))
        if command == "send"
        else ("turn", "replay", str(transcript), "--cassette", str(cassette))
    )
    result = refuses_and_writes_nothing(run, isolated_env, *args, code=5, says=str(cassette))
    assert says in result.stderr
    assert cassette.read_bytes() == content


def test_a_missing_cassette_is_refused(
    run: Run, isolated_env: Path, tmp_path: Path, session: str
) -> None:
    missing = tmp_path / "nowhere.cassette"
    refuses_and_writes_nothing(
        run, isolated_env, "turn", "send", "x", "--cassette", str(missing), code=3
    )
    assert not missing.exists()
