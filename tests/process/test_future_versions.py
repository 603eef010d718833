"""Documents in the data dir from a future version of agctl: a future major version is refused
(writing nothing), a future minor version is read and keeps its fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import refuses_and_writes_nothing

from agctl.base.hashing import line_sum
from agctl.store import Store
from agctl.store.checkpoints import checkpoint_offset

Run = Callable[..., Result]


# ---- documents from a future major version -----------------------------------------------


def _bump(path: Path, version: str, **extra: object) -> bytes:
    document = json.loads(path.read_bytes())
    document["schema_version"] = version
    document.update(extra)
    path.write_text(json.dumps(document, indent=2))
    return path.read_bytes()


# Every command here reads the session document; those marked True also read the slot.
READ_AND_WRITE: list[tuple[tuple[str, ...], bool]] = [
    (("session", "show"), True),
    (("slot", "list"), True),
    (("msg", "list"), True),
    (("msg", "append", "user", "more"), True),
    (("msg", "import", "-"), True),
    (("msg", "clear"), True),
    (("slot", "derive", "branch"), True),
    (("slot", "mode", "readonly"), True),
    (("ckpt", "create"), True),
    (("turn", "send", "hi", "--no-checkpoint"), True),
    (("turn", "send", "hi"), True),
    (("session", "export"), True),
    (("slot", "new", "fresh"), False),
    (("session", "set", "title", "renamed"), False),
    (("memory", "set", "k", "v"), False),
]


FUTURE_CASES = [
    pytest.param(document, args, id=f"{document}: {' '.join(args[:3])}")
    for document in ("session", "slot")
    for args, reads_slot in READ_AND_WRITE
    if document == "session" or reads_slot
]


@pytest.mark.parametrize(("document", "args"), FUTURE_CASES)
def test_a_document_from_a_future_major_version_is_refused(
    run: Run, isolated_env: Path, session: str, document: str, args: tuple[str, ...]
) -> None:
    root = isolated_env / "sessions" / session
    path = root / ("session.json" if document == "session" else "slots/default.json")
    _bump(path, "2.0", new_in_v2={"x": 1})
    result = refuses_and_writes_nothing(
        run,
        isolated_env,
        *args,
        input=b'[{"role": "user", "content": "x"}]',
        code=5,
        says=f"{document} document has schema version 2.0",
    )
    assert "1.0" in result.stderr and "upgrade agctl" in result.stderr
    assert str(path) in result.stderr


def test_a_document_from_a_future_minor_version_is_read_and_keeps_its_fields(
    run: Run, store: Store, isolated_env: Path, session: str
) -> None:
    path = isolated_env / "sessions" / session / "slots" / "default.json"
    _bump(path, "1.7", added_in_1_7={"keep": ["me", 1]})
    result = run("msg", "append", "user", "still fine")
    assert result.exit_code == 0, result.output
    document = json.loads(path.read_bytes())
    assert document["schema_version"] == "1.7"
    assert document["added_in_1_7"] == {"keep": ["me", 1]}
    assert [m.text() for m in store.load_slot(session).messages][-1] == "still fine"


def test_a_checkpoint_from_a_future_major_version_is_refused(
    run: Run, isolated_env: Path, session: str, checkpoint: str
) -> None:
    log = isolated_env / "sessions" / session / "checkpoints" / "log"
    raw = log.read_bytes()
    start = checkpoint_offset(checkpoint)
    end = raw.index(b"\n", start)
    record = raw[start:end]
    body = record.rpartition(b"\t")[0]
    bumped = body.replace(b'"schema_version":"1.0"', b'"schema_version":"2.0"', 1)
    assert bumped != body
    bumped += b"\t" + line_sum(bumped)  # a well-formed record of a newer version
    log.write_bytes(raw[:start] + bumped + raw[end:])
    assert run("msg", "append", "user", "after").exit_code == 0
    for args in (
        ("ckpt", "show", checkpoint),
        ("ckpt", "diff", checkpoint),
        ("ckpt", "rollback", checkpoint),
        ("ckpt", "fork", checkpoint, "--id", "forked"),
    ):
        refuses_and_writes_nothing(
            run,
            isolated_env,
            *args,
            code=5,
            says="checkpoint document has schema version 2.0",
        )
