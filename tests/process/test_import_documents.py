"""`msg import` and `session import` of hostile documents: wrong JSON shapes, unknown roles,
documents that are not exports, duplicate slots, an existing or hostile id, integers beyond
64 bits, an export from a future major version; each a clear error that writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import assert_refused, changed, files, refuses_and_writes_nothing

Run = Callable[..., Result]


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


def test_a_session_export_from_a_future_major_version_is_refused(
    run: Run, isolated_env: Path, session: str
) -> None:
    document = export_of(run)
    data = _with(json.loads(_with(document, "session.id", "future")), "schema_version", "3.0")
    result = refuses_and_writes_nothing(
        run, isolated_env, "session", "import", "-", input=data, code=5, says="3.0"
    )
    assert "2.0" in result.stderr


def test_session_import_under_a_hostile_id_is_refused(
    run: Run, isolated_env: Path, session: str
) -> None:
    data = json.dumps(export_of(run)).encode()
    for hostile in ("../escape", "a/b", "a:b", "a\x00b", "a\nb", "x" * 10_000):
        refuses_and_writes_nothing(
            run, isolated_env, "session", "import", "-", "--as", hostile, input=data, code=2
        )
