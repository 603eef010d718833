"""Hostile session, slot and checkpoint ids on the command line, and in the current-session
pointer or a session's current slot: each a clear error that writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import files, refuses_and_writes_nothing

Run = Callable[..., Result]


# ---- hostile ids ---------------------------------------------------------------------------

HOSTILE_IDS = [
    pytest.param("..", id="dotdot"),
    pytest.param("../escape", id="parent"),
    pytest.param("a/../b", id="inner-dotdot"),
    pytest.param("a/b", id="slash"),
    pytest.param("/etc", id="absolute"),
    pytest.param("a:b", id="colon"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("a\nb", id="newline"),
    pytest.param("ok\r", id="carriage-return"),
    pytest.param("x" * 10_000, id="10k"),
]


SESSION_ARGS = [
    ("session", "new", "{}"),
    ("session", "use", "{}"),
    ("session", "show", "{}"),
    ("session", "rm", "{}"),
    ("session", "export", "{}"),
    ("session", "children", "{}"),
    ("session", "new", "child", "--parent", "{}"),
    ("-s", "{}", "msg", "list"),
    ("-s", "{}", "msg", "append", "user", "x"),
    ("ckpt", "fork", "{ckpt}", "--id", "{}"),
]


SLOT_ARGS = [
    ("slot", "new", "{}"),
    ("slot", "derive", "{}"),
    ("slot", "derive", "ok", "--from", "{}"),
    ("slot", "use", "{}"),
    ("slot", "rm", "{}"),
    ("slot", "show", "{}"),
    ("slot", "mode", "readonly", "{}"),
    ("slot", "merge", "{}"),
    ("slot", "merge", "default", "--into", "{}"),
    ("msg", "append", "user", "x", "--slot", "{}"),
    ("msg", "list", "--slot", "{}"),
    ("turn", "send", "hi", "--slot", "{}"),
]


CHECKPOINT_ARGS = [
    ("ckpt", "show", "{}"),
    ("ckpt", "diff", "{}"),
    ("ckpt", "diff", "{ckpt}", "{}"),
    ("ckpt", "rollback", "{}"),
    ("ckpt", "fork", "{}"),
    ("ckpt", "rm", "{}"),
]


ID_CASES = [
    pytest.param(kind, template, id=" ".join(template).replace("{}", "ID"))
    for kind, templates in (
        ("session", SESSION_ARGS),
        ("slot", SLOT_ARGS),
        ("checkpoint", CHECKPOINT_ARGS),
    )
    for template in templates
]


@pytest.mark.parametrize("hostile", HOSTILE_IDS)
@pytest.mark.parametrize(("kind", "template"), ID_CASES)
def test_hostile_ids_are_refused(
    run: Run,
    isolated_env: Path,
    tmp_path: Path,
    checkpoint: str,
    kind: str,
    template: tuple[str, ...],
    hostile: str,
) -> None:
    args = [{"{}": hostile, "{ckpt}": checkpoint}.get(a, a) for a in template]
    outside = files(tmp_path)
    result = refuses_and_writes_nothing(run, isolated_env, *args, code=2, says=f"{kind} id")
    assert len(result.stderr) < 400, "the error quotes a 10,000-character id whole"
    assert files(tmp_path) == outside


@pytest.mark.parametrize("pointer", [b"../../outside\n", b"a/b\n", b"x" * 10_000, b"\xff\xfe\n"])
def test_a_hostile_current_session_pointer_is_a_clear_error(
    run: Run, isolated_env: Path, session: str, pointer: bytes
) -> None:
    (isolated_env / "current-session").write_bytes(pointer)
    for args in (("msg", "list"), ("msg", "append", "user", "x"), ("slot", "new", "n")):
        refuses_and_writes_nothing(run, isolated_env, *args)


def test_a_hostile_current_slot_in_the_session_document_is_a_clear_error(
    run: Run, isolated_env: Path, session: str, tmp_path: Path
) -> None:
    path = isolated_env / "sessions" / session / "session.json"
    document = json.loads(path.read_bytes())
    document["current_slot"] = "../../../outside"
    path.write_text(json.dumps(document))
    for args in (("msg", "list"), ("msg", "append", "user", "x"), ("turn", "send", "hi")):
        refuses_and_writes_nothing(run, isolated_env, *args, says="slot id")
    assert not (tmp_path / "outside.json").exists()
