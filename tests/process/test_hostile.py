"""Hostile input and secrets: every refusal is a clear error that writes nothing.

A refusal here means: a non-zero exit code, one `agctl: error: ...` message on stderr, no
traceback, and the data dir's files byte for byte as they were (lock files aside: taking a
lock is not writing data).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI

import agctl
from agctl.base.hashing import line_sum
from agctl.config.file import mask
from agctl.store import Store
from agctl.store.checkpoints import checkpoint_offset

Run = Callable[..., Result]
SOURCE_ROOT = str(Path(agctl.__file__).resolve().parents[1])

# ---- helpers -----------------------------------------------------------------------------


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root` by relative path: its bytes, or its target for a symlink."""
    found: dict[str, bytes] = {}
    if not root.exists():
        return found
    for path in sorted(root.rglob("*")):
        if path.name in (".lock", "journal"):
            continue
        if path.is_symlink():
            found[str(path.relative_to(root))] = b"symlink -> " + os.readlink(path).encode()
        elif path.is_file():
            found[str(path.relative_to(root))] = path.read_bytes()
    return found


def changed(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    return {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


def assert_refused(result: Result, *, code: int | None = None, says: str = "") -> None:
    """A clear error: a non-zero exit, an `agctl: error:` line, no traceback, nothing on stdout."""
    assert result.exit_code != 0, result.output
    if code is not None:
        assert result.exit_code == code, result.stderr
    assert result.stderr.startswith("agctl: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert says in result.stderr


def refuses_and_writes_nothing(
    run: Run,
    data_dir: Path,
    *args: str,
    input: bytes | None = None,
    code: int | None = None,
    says: str = "",
) -> Result:
    before = files(data_dir)
    result = run(*args, input=input)
    assert_refused(result, code=code, says=says)
    assert changed(before, files(data_dir)) == set()
    return result


@pytest.fixture
def session(run: Run) -> str:
    """A current session 's' with two messages and one checkpoint."""
    for args in (
        ("session", "new", "s", "--system", "Be brief."),
        ("msg", "append", "user", "hello"),
        ("msg", "append", "assistant", "hi"),
        ("ckpt", "create", "--label", "first"),
    ):
        result = run(*args)
        assert result.exit_code == 0, result.output
    return "s"


@pytest.fixture
def checkpoint(store: Store, session: str) -> str:
    from agctl.store.checkpointer import Checkpointer

    return Checkpointer(store).ids(session)[0]


# ---- invalid UTF-8 on standard input -----------------------------------------------------

NOT_UTF8 = [
    pytest.param(b"\xff\xfe\x00garbage", id="bom-like"),
    pytest.param(b"ok \xc3\x28 then", id="bad-continuation"),
    pytest.param(b"\xed\xa0\x80 lone surrogate", id="surrogate"),
    pytest.param(b'[{"role": "user", "content": "a\xffb"}]', id="inside-json"),
    pytest.param(b'{"role": "user", "content": "a\xc0\xafb"}\n', id="overlong-jsonl"),
]

STDIN_COMMANDS = [
    pytest.param(("msg", "append", "user", "-"), id="msg-append"),
    pytest.param(("msg", "append", "user"), id="msg-append-implicit"),
    pytest.param(("msg", "insert", "0", "user", "-"), id="msg-insert"),
    pytest.param(("msg", "edit", "0", "-"), id="msg-edit"),
    pytest.param(("msg", "import", "-"), id="msg-import"),
    pytest.param(("msg", "import", "-", "--format", "openai"), id="msg-import-openai"),
    pytest.param(("msg", "import", "-", "--format", "jsonl"), id="msg-import-jsonl"),
    pytest.param(("turn", "send", "-"), id="turn-send"),
    pytest.param(("turn", "replay", "-"), id="turn-replay"),
    pytest.param(("session", "import", "-"), id="session-import"),
    pytest.param(("slot", "new", "static", "--static", "-"), id="slot-new-static"),
]


@pytest.mark.parametrize("data", NOT_UTF8)
@pytest.mark.parametrize("args", STDIN_COMMANDS)
def test_invalid_utf8_on_stdin_is_refused(
    run: Run, isolated_env: Path, session: str, args: tuple[str, ...], data: bytes
) -> None:
    refuses_and_writes_nothing(run, isolated_env, *args, input=data, code=5)


def test_invalid_utf8_error_names_the_byte(run: Run, isolated_env: Path, session: str) -> None:
    result = refuses_and_writes_nothing(
        run, isolated_env, "msg", "append", "user", "-", input=b"ok \xc3\x28", code=5
    )
    assert "not valid UTF-8" in result.stderr and "byte 3" in result.stderr


# ---- a 50 MB message -----------------------------------------------------------------------

BIG_MB = 50
# ASCII, CJK, emoji, NUL and a control character: every kind JSON has to escape or encode.
BIG_UNIT = "context 上下文 🧪 \x00\x1b\t|"


def big_text() -> str:
    unit_bytes = len(BIG_UNIT.encode())
    return BIG_UNIT * (BIG_MB * 1024 * 1024 // unit_bytes)


def run_child(args: list[str], stdin: Path, env: dict[str, str]) -> tuple[int, float, float]:
    """Run agctl in a child process; return its exit code, peak RSS in MB and seconds."""
    started = time.monotonic()
    with (
        stdin.open("rb") as feed,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        child = subprocess.Popen(
            [sys.executable, "-m", "agctl", *args], stdin=feed, stdout=out, stderr=err, env=env
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped: Popen must not wait
        seconds = time.monotonic() - started
        err.seek(0)
        stderr = err.read()
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")
    return child.returncode, usage.ru_maxrss / 1024, seconds


def test_a_50_mb_message_is_stored_intact_in_bounded_time_and_memory(
    store: Store, session: str, isolated_env: Path, tmp_path: Path
) -> None:
    text = big_text()
    assert len(text.encode()) > (BIG_MB - 1) * 1024 * 1024
    feed = tmp_path / "big.txt"
    feed.write_text(text, encoding="utf-8")
    env = {**os.environ, "AGCTL_DATA_DIR": str(isolated_env), "PYTHONPATH": SOURCE_ROOT}

    code, peak_mb, seconds = run_child(["msg", "append", "user", "-"], feed, env)

    assert code == 0
    assert peak_mb < 1024, f"appending {BIG_MB} MB took {peak_mb:.0f} MB of memory"
    assert seconds < 60, f"appending {BIG_MB} MB took {seconds:.1f} s"
    slot = store.load_slot(session)
    assert [m.role for m in slot.messages] == ["user", "assistant", "user"]
    assert slot.messages[-1].content == text
    path = isolated_env / "sessions" / session / "slots" / "default.json"
    assert json.loads(path.read_bytes())["messages"][-1]["content"] == text
    store.update_slot(session, None, lambda s: s.append(s.messages[0]))
    after = store.load_slot(session)
    assert len(after.messages) == 4 and after.messages[2].content == text
    feed.unlink()  # pytest keeps recent temp dirs: leave no 100 MB behind
    shutil.rmtree(isolated_env)


# ---- wrong JSON shapes and unknown roles on import ------------------------------------------

BAD_MESSAGES = [
    pytest.param(b"", "is empty", id="empty"),
    pytest.param(b"   \n\n", "is empty", id="blank"),
    pytest.param(b"null", "not a JSON object", id="null"),
    pytest.param(b"42", "not a JSON object", id="number"),
    pytest.param(b'"user: hi"', "not a JSON object", id="string"),
    pytest.param(b"[1, 2]", "message 0 is not a JSON object", id="array-of-numbers"),
    pytest.param(b'[[{"role": "user", "content": "x"}]]', "not a JSON object", id="nested"),
    pytest.param(b'{"messages": 5}', "role", id="messages-not-a-list"),
    pytest.param(b'[{"content": "x"}]', "role", id="no-role"),
    pytest.param(b'[{"role": "robot", "content": "x"}]', "role", id="unknown-role"),
    pytest.param(b'[{"role": "USER", "content": "x"}]', "role", id="role-upper-case"),
    pytest.param(b'[{"role": null, "content": "x"}]', "role", id="role-null"),
    pytest.param(b'[{"role": "user"}]', "needs content", id="no-content"),
    pytest.param(b'[{"role": "user", "content": 5}]', "content", id="content-number"),
    pytest.param(b'[{"role": "user", "content": {"a": 1}}]', "content", id="content-object"),
    pytest.param(b'[{"role": "tool", "content": "x"}]', "tool_call_id", id="tool-without-id"),
    pytest.param(b'[{"role": "assistant", "tool_calls": "f()"}]', "tool_calls", id="calls-str"),
    pytest.param(
        b'[{"role": "assistant", "tool_calls": [{"id": "c"}]}]', "function", id="call-no-fn"
    ),
    pytest.param(b'[{"role": "user", "content": "x", "tokens": -1}]', "tokens", id="neg-tokens"),
    pytest.param(
        b'[{"role": "user", "content": "ok"}, {"role": "wizard", "content": "x"}]',
        "message 1",
        id="second-bad",
    ),
    pytest.param(b'{"role": "user", "content": "ok"}\n{"role": "user", "con', "line 2", id="torn"),
]


@pytest.mark.parametrize(("data", "says"), BAD_MESSAGES)
def test_msg_import_refuses_wrong_shapes(
    run: Run, isolated_env: Path, session: str, data: bytes, says: str
) -> None:
    refuses_and_writes_nothing(
        run, isolated_env, "msg", "import", "-", input=data, code=5, says=says
    )


@pytest.mark.parametrize(("data", "says"), BAD_MESSAGES)
def test_msg_import_replace_refuses_wrong_shapes(
    run: Run, isolated_env: Path, session: str, data: bytes, says: str
) -> None:
    refuses_and_writes_nothing(
        run, isolated_env, "msg", "import", "-", "--replace", input=data, code=5, says=says
    )


def export_of(run: Run) -> dict[str, Any]:
    result = run("session", "export")
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def _with(document: dict[str, Any], path: str, value: object) -> bytes:
    """The document with the value at a dotted path replaced (a list index is a number)."""
    copy = json.loads(json.dumps(document))
    node: Any = copy
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return json.dumps(copy).encode()


BAD_EXPORTS: list[tuple[str, object, str]] = [
    ("session", [], "session"),
    ("session", None, "session"),
    ("session.id", 5, "session.id"),
    ("session.id", "../escape", "'..'"),
    ("session.id", "a/b", "not valid"),
    ("session.turn_count", -3, "turn_count"),
    ("slots", {}, "slots"),
    ("slots", [], "no 'default' slot"),
    ("slots.0.id", "../../outside", "'..'"),
    ("slots.0.id", "a\x00b", "not valid"),
    ("slots.0.config.mode", "writeonly", "mode"),
    ("slots.0.messages", [{"role": "robot", "content": "x"}], "role"),
    ("slots.0.messages", [{"role": "user", "content": 5}], "content"),
    ("slots.0.messages", [{"role": "user"}], "needs content"),
    ("slots.0.messages", "hello", "messages"),
    ("kind", "agctl.slot", "kind"),
    ("session.current_slot", "elsewhere", "current slot 'elsewhere' is not exported"),
]


@pytest.mark.parametrize(
    ("path", "value", "says"), BAD_EXPORTS, ids=[f"{p}={v!r}"[:40] for p, v, _ in BAD_EXPORTS]
)
def test_session_import_refuses_wrong_shapes(
    run: Run, isolated_env: Path, session: str, path: str, value: object, says: str
) -> None:
    document = export_of(run)
    data = _with(document, "session.id", "imported")
    data = _with(json.loads(data), path, value)
    refuses_and_writes_nothing(
        run, isolated_env, "session", "import", "-", input=data, code=None, says=says
    )


@pytest.mark.parametrize(
    "data",
    [b"", b"[]", b"null", b'"session"', b"42", b"{}", b'{"session": {"id": "x"}}', b"{not json"],
)
def test_session_import_refuses_documents_that_are_not_exports(
    run: Run, isolated_env: Path, session: str, data: bytes
) -> None:
    refuses_and_writes_nothing(
        run, isolated_env, "session", "import", "-", input=data, code=5, says="<stdin>"
    )


def test_session_import_refuses_duplicate_slots_and_an_existing_id(
    run: Run, isolated_env: Path, session: str
) -> None:
    document = export_of(run)
    slots = document["slots"]
    assert isinstance(slots, list)
    twice = json.loads(_with(document, "slots", [*slots, *slots]))
    twice["session"]["id"] = "twice"
    refuses_and_writes_nothing(
        run, isolated_env, "session", "import", "-", input=json.dumps(twice).encode(), code=5
    )
    refuses_and_writes_nothing(
        run, isolated_env, "session", "import", "-", input=json.dumps(document).encode(), code=4
    )


def test_an_integer_beyond_64_bits_on_import_is_refused_or_handled(
    run: Run, isolated_env: Path, session: str
) -> None:
    document = json.loads(_with(export_of(run), "session.id", "huge"))
    document["slots"][0]["messages"][0]["usage"] = {"prompt_tokens": 10**30}
    before = files(isolated_env)
    imported = run("session", "import", "-", "--use", input=json.dumps(document).encode())
    if imported.exit_code != 0:
        assert_refused(imported, code=5)
        assert changed(before, files(isolated_env)) == set()
        return
    for args in (
        ("msg", "list", "--json"),
        ("ckpt", "create"),
        ("slot", "derive", "branch"),
        ("turn", "send", "hi"),
    ):
        result = run(*args)
        assert result.exit_code == 0 or result.stderr.startswith("agctl: error: "), args


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


def test_a_session_export_from_a_future_major_version_is_refused(
    run: Run, isolated_env: Path, session: str
) -> None:
    document = export_of(run)
    data = _with(json.loads(_with(document, "session.id", "future")), "schema_version", "3.0")
    result = refuses_and_writes_nothing(
        run, isolated_env, "session", "import", "-", input=data, code=5, says="3.0"
    )
    assert "2.0" in result.stderr


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


def test_session_import_under_a_hostile_id_is_refused(
    run: Run, isolated_env: Path, session: str
) -> None:
    data = json.dumps(export_of(run)).encode()
    for hostile in ("../escape", "a/b", "a:b", "a\x00b", "a\nb", "x" * 10_000):
        refuses_and_writes_nothing(
            run, isolated_env, "session", "import", "-", "--as", hostile, input=data, code=2
        )


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


# ---- a slot file replaced by a symlink out of the data dir ----------------------------------

THROUGH_THE_LINK = [
    ("msg", "list"),
    ("msg", "get", "0"),
    ("slot", "show"),
    ("slot", "show", "--view"),
    ("slot", "list"),
    ("session", "show"),
    ("session", "export"),
    ("msg", "export"),
    ("msg", "append", "user", "x"),
    ("msg", "edit", "0", "x"),
    ("msg", "rm", "0"),
    ("msg", "pop"),
    ("msg", "clear"),
    ("msg", "retain", "user"),
    ("msg", "import", "-", "--replace"),
    ("slot", "mode", "readonly"),
    ("slot", "set", "auto_compress", "false"),
    ("slot", "derive", "branch"),
    ("slot", "merge", "default", "--into", "default"),
    ("ctx", "compress", "--strategy", "truncate", "--keep-recent", "0", "--min-tokens", "0"),
    ("turn", "send", "hi"),
    ("turn", "replay", "-"),
    ("ckpt", "create"),
    ("ckpt", "rollback", "{ckpt}"),
]


@pytest.mark.parametrize("args", THROUGH_THE_LINK, ids=[" ".join(a) for a in THROUGH_THE_LINK])
def test_a_slot_symlinked_out_of_the_data_dir_is_neither_read_nor_written(
    run: Run,
    isolated_env: Path,
    tmp_path: Path,
    checkpoint: str,
    args: tuple[str, ...],
) -> None:
    slot_file = isolated_env / "sessions" / "s" / "slots" / "default.json"
    target = tmp_path / "outside" / "victim.json"
    target.parent.mkdir()
    target.write_bytes(slot_file.read_bytes().replace(b"hello", b"secret-outside"))
    slot_file.unlink()
    slot_file.symlink_to(target)
    original = target.read_bytes()
    stdin = b'[{"role": "user", "content": "x"}]' if "import" in args else b'{"input": "x"}\n'
    argv = [checkpoint if a == "{ckpt}" else a for a in args]
    result = refuses_and_writes_nothing(
        run, isolated_env, *argv, input=stdin, code=5, says="symbolic link"
    )
    assert "secret-outside" not in result.stderr
    assert target.read_bytes() == original
    assert slot_file.is_symlink()


def test_a_dangling_slot_symlink_is_refused_and_never_creates_its_target(
    run: Run, isolated_env: Path, tmp_path: Path, session: str
) -> None:
    link = isolated_env / "sessions" / session / "slots" / "evil.json"
    target = tmp_path / "planted.json"
    link.symlink_to(target)
    for args in (
        ("msg", "list", "--slot", "evil"),
        ("msg", "append", "user", "x", "--slot", "evil"),
    ):
        refuses_and_writes_nothing(run, isolated_env, *args, code=5, says="symbolic link")
    assert not target.exists()


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


# ---- secrets ---------------------------------------------------------------------------------

ENV_KEY = "sk-env-hostile-Jd83KsQp1Wm5Xt7ZaB4c"
PROFILE_KEY = "sk-prof-hostile-Pq92LsMx4Vn6Yt8RcD5e"
MODEL = "fake-model"


def fragments(secret: str, size: int = 10) -> list[bytes]:
    """Every `size`-character piece of the secret (the mask shows 3 + 4 characters)."""
    return [secret[i : i + size].encode() for i in range(len(secret) - size + 1)]


def assert_secret_not_shown(secret: str, outputs: list[Result]) -> None:
    pieces = fragments(secret)
    for number, result in enumerate(outputs):
        for stream, data in (("stdout", result.stdout_bytes), ("stderr", result.stderr_bytes)):
            assert not any(piece in data for piece in pieces), f"output {number}: {stream}"


def assert_secret_nowhere(
    secret: str, root: Path, outputs: list[Result], allowed: Collection[Path] = ()
) -> None:
    """No piece of the secret in any file under `root` (but `allowed`) or any output."""
    pieces = fragments(secret)
    scanned = [p for p in root.rglob("*") if p.is_file() and p not in allowed]
    assert scanned, "nothing was written at all"
    for path in scanned:
        data = path.read_bytes()
        assert not any(piece in data for piece in pieces), f"{path} holds the key"
    assert_secret_not_shown(secret, outputs)


@pytest.mark.parametrize("source", ["env", "profile"])
def test_an_api_key_reaches_no_file_and_no_output(
    run: Run,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    isolated_env: Path,
    source: str,
) -> None:
    key = ENV_KEY if source == "env" else PROFILE_KEY
    outputs: list[Result] = []

    def step(*args: str, code: int = 0, input: bytes | None = None) -> Result:
        result = run(*args, input=input)
        assert result.exit_code == code, (args, result.output)
        outputs.append(result)
        return result

    cassette = tmp_path / "out" / "turns.cassette"
    cassette.parent.mkdir()
    transcript = tmp_path / "chat.jsonl"
    transcript.write_text('{"input": "first replayed"}\n{"input": "second replayed"}\n')
    with FakeOpenAI(api_key=key) as server:
        if source == "env":
            monkeypatch.setenv("AGCTL_PROVIDER", "openai")
            monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
            monkeypatch.setenv("AGCTL_MODEL", MODEL)
            monkeypatch.setenv("AGCTL_API_KEY", key)
        else:
            step(
                "profile", "add", "work", "--base-url", server.base_url, "--model", MODEL,
                "--api-key", key, "--default",
            )  # fmt: skip
            step("profile", "add", "piped", "--base-url", server.base_url, "--api-key", "-",
                 input=key.encode())  # fmt: skip
            step("profile", "list")
            step("profile", "list", "--json")
        step("config", "set", "max_retries", "1")
        step("session", "new", "s", "--system", "Be brief.")
        step("-v", "turn", "send", "plain", "--record", str(cassette))
        step("-vv", "turn", "send", "streamed", "--stream", "--record", str(cassette))
        step("turn", "send", "as json", "--json")
        step("turn", "send", "as lines", "--jsonl", "--stream")
        server.fail("status", status=429, message=f"slow down, {key}", retry_after=0.01)
        step("-vv", "turn", "send", "after a 429")
        server.fail("status", status=401, message=f"Incorrect API key provided: {key}")
        refused = step("-vv", "turn", "send", "refused", "--record", str(cassette), code=6)
        assert "Incorrect API key provided" in refused.stderr
        server.fail("status", status=400, message=f"bad request (key {key})")
        step("-v", "turn", "send", "--resume-draft", "--stream", "--jsonl", code=6)
        step("-v", "turn", "send", "--resume-draft")
        step("-vv", "turn", "replay", str(transcript), "--record", str(cassette))
        step("turn", "send", "dry", "--dry-run")
        step("-vv", "turn", "send", "dry", "--dry-run", "--json")
        assert all(r.headers["authorization"] == f"Bearer {key}" for r in server.requests)
    shown = step("config", "show")
    assert str(mask(key)) in shown.stdout
    step("config", "show", "--json")
    step("-vv", "session", "show", "--json")
    step("slot", "show", "--view", "--json")
    step("session", "export", "-o", str(tmp_path / "out" / "session.json"))
    step("msg", "export", "--format", "jsonl", "-o", str(tmp_path / "out" / "messages.jsonl"))
    step("session", "export")
    listing = step("ckpt", "list", "--json")
    ids = [row["id"] for row in json.loads(listing.stdout)]
    assert len(ids) >= 5
    step("ckpt", "create", "--label", "after the turns")
    step("ckpt", "show", ids[-1], "--messages", "--json")
    step("ckpt", "show", ids[0])
    step("ckpt", "diff", ids[-1])
    step("ckpt", "diff", ids[-1], ids[0], "--json")
    step("-v", "ckpt", "rollback", ids[-1])
    step("-v", "ckpt", "fork", ids[0], "--id", "forked")
    step("-v", "turn", "send", "offline now", "--cassette", str(cassette), code=6)
    step("turn", "replay", str(transcript), "--cassette", str(cassette), "-s", "forked", code=6)
    step("ckpt", "prune", "--keep", "2")

    assert cassette.stat().st_size > 0 and (tmp_path / "out" / "session.json").exists()
    config_file = tmp_path / "xdg-config" / "agctl" / "config.json"
    allowed: set[Path] = set()
    if source == "profile":
        assert key.encode() in config_file.read_bytes()
        assert config_file.stat().st_mode & 0o777 == 0o600
        allowed = {config_file}
    assert_secret_nowhere(key, tmp_path, outputs, allowed)
    assert store.load_session("forked").turn_count > 0


def test_a_key_echoed_in_a_malformed_reply_is_not_leaked_even_in_part(
    run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with FakeOpenAI() as server:
        monkeypatch.setenv("AGCTL_PROVIDER", "openai")
        monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
        monkeypatch.setenv("AGCTL_MODEL", MODEL)
        monkeypatch.setenv("AGCTL_API_KEY", ENV_KEY)
        assert run("session", "new", "s").exit_code == 0
        server.fail("garbage", body=b"<html>" + b"x" * 170 + ENV_KEY.encode() + b"</html>")
        result = run("turn", "send", "hi", "--no-stream")
    assert_refused(result, code=6, says="malformed response")
    assert_secret_nowhere(ENV_KEY, tmp_path, [result])


@pytest.mark.parametrize(
    "header",
    [f"Authorization Bearer {ENV_KEY}", f"api-key={ENV_KEY}"],
    ids=["space", "equals"],
)
def test_a_malformed_secret_header_is_refused_without_echoing_it(
    run: Run, tmp_path: Path, header: str
) -> None:
    result = run("profile", "add", "az", "--base-url", "http://x/v1", "--header", header)
    assert result.exit_code == 2
    assert "--header" in result.stderr
    assert_secret_not_shown(ENV_KEY, [result])
