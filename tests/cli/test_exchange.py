"""Import and export (messages, whole sessions), `agctl schema`, and the output conventions
`--quiet`, `--no-color` and NO_COLOR."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from helpers import data_dir_files, stored_documents

from agctl.base.vocab import SCHEMA_NAMES
from agctl.cli import cli
from agctl.interchange.formats import SessionExport, export_session, import_session
from agctl.store import Store
from agctl.turn.transcripts import parse_transcript

Run = Callable[..., Result]

EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT, EXIT_DATA = 2, 3, 4, 5

WEATHER: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "content": "18C, sunny", "tool_call_id": "call_1", "name": "weather"},
    {"role": "assistant", "content": "It is 18C and sunny."},
]


# ---- helpers ---------------------------------------------------------------------------


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def fails(result: Result, code: int, *needles: str) -> Result:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.startswith("agctl: error: ")
    for needle in needles:
        assert needle in result.stderr
    return result


def documents(data_dir: Path, session: str) -> dict[str, Any]:
    """Every stored document of a session, parsed: the session's and each slot's."""
    return stored_documents(data_dir, session)


def nothing_written(data_dir: Path) -> bool:
    """No session, and not one file in the data dir."""
    return not Store(data_dir).list_sessions() and not data_dir_files(data_dir)


@pytest.fixture
def chat(run: Run) -> str:
    """Session 's': a system prompt, memory, a weather chat with a tool call in 'default',
    a derived slot with a turn of its own, an empty slot, and checkpoints."""
    ok(run("session", "new", "s", "--system", "Be brief.", "--title", "Weather"))
    ok(run("msg", "import", "-", input=json.dumps(WEATHER)))
    ok(run("memory", "set", "city", "Paris"))
    ok(run("slot", "derive", "branch"))
    ok(run("turn", "send", "And tomorrow?", "--slot", "branch"))
    ok(run("slot", "new", "empty"))
    ok(run("ckpt", "create", "--label", "by hand"))
    return "s"


# ---- msg export ------------------------------------------------------------------------


def test_markdown_export(run: Run, chat: str) -> None:
    result = ok(run("msg", "export", "--format", "markdown"))
    assert result.stdout == (
        "### user\n"
        "\n"
        "Weather in Paris?\n"
        "\n"
        "### assistant\n"
        "\n"
        "Let me check.\n"
        "\n"
        '`→ weather({"city": "Paris"})`\n'
        "\n"
        "### tool (weather)\n"
        "\n"
        "18C, sunny\n"
        "\n"
        "### assistant\n"
        "\n"
        "It is 18C and sunny.\n"
    )


def test_text_export(run: Run, chat: str) -> None:
    result = ok(run("msg", "export", "--format", "text"))
    assert result.stdout == (
        "user: Weather in Paris?\n"
        "\n"
        "assistant: Let me check.\n"
        '→ weather({"city": "Paris"})\n'
        "\n"
        "tool: 18C, sunny\n"
        "\n"
        "assistant: It is 18C and sunny.\n"
    )


@pytest.mark.parametrize("fmt", ["markdown", "text"])
def test_a_tool_call_without_text_exports_cleanly(fmt: str, run: Run) -> None:
    ok(run("session", "new", "s"))
    only_call = [WEATHER[0], {**WEATHER[1], "content": None}]
    ok(run("msg", "import", "-", input=json.dumps(only_call)))
    out = ok(run("msg", "export", "--format", fmt)).stdout
    assert '→ weather({"city": "Paris"})' in out
    assert "\n\n\n" not in out
    assert all(line == line.rstrip() for line in out.splitlines())


@pytest.mark.parametrize("fmt", ["openai", "markdown", "text", "jsonl"])
def test_json_makes_export_print_the_openai_array(fmt: str, run: Run, chat: str) -> None:
    result = ok(run("msg", "export", "--format", fmt, "--json"))
    assert json.loads(result.stdout) == WEATHER


def test_export_to_a_symlink_writes_its_target(run: Run, tmp_path: Path) -> None:
    assert run("session", "new", "s").exit_code == 0
    assert run("msg", "append", "user", "hi").exit_code == 0
    target = tmp_path / "dotfiles" / "chat.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert run("msg", "export", "-o", str(link)).exit_code == 0
    assert link.is_symlink()
    assert json.loads(target.read_text()) == [{"role": "user", "content": "hi"}]


# ---- session export and import ---------------------------------------------------------


def test_export_to_stdout_and_to_a_file_are_the_same(run: Run, chat: str, tmp_path: Path) -> None:
    to_stdout = ok(run("session", "export")).stdout
    target = tmp_path / "s.json"
    assert ok(run("session", "export", "s", "-o", str(target))).stdout == ""
    assert target.read_text() == to_stdout
    document = json.loads(to_stdout)
    assert document["kind"] == "agctl.session"
    assert document["session"]["id"] == "s"
    assert document["session"]["memory"] == {"city": "Paris"}
    assert [slot["id"] for slot in document["slots"]] == ["branch", "default", "empty"]


def test_import_into_a_fresh_data_dir_gives_an_identical_session(
    run: Run, chat: str, tmp_path: Path, isolated_env: Path
) -> None:
    exported = tmp_path / "s.json"
    ok(run("session", "export", "-o", str(exported)))
    other = tmp_path / "other"
    result = ok(run("--data-dir", str(other), "session", "import", str(exported)))
    assert result.stdout == "imported session s\n"

    assert documents(other, "s") == documents(isolated_env, "s")
    for slot in ("default", "branch", "empty"):
        mine = ok(run("msg", "list", "--json", "--slot", slot, "-s", "s")).stdout
        theirs = ok(
            run("--data-dir", str(other), "msg", "list", "--json", "--slot", slot, "-s", "s")
        ).stdout
        assert json.loads(theirs) == json.loads(mine)
    for command in (["memory", "list"], ["slot", "list"], ["ctx", "show", "next"]):
        mine = ok(run(*command, "--json", "-s", "s")).stdout
        theirs = ok(run("--data-dir", str(other), *command, "--json", "-s", "s")).stdout
        assert json.loads(theirs) == json.loads(mine), command
    again = ok(run("--data-dir", str(other), "session", "export", "s")).stdout
    assert json.loads(again)["session"] == json.loads(exported.read_text())["session"]
    assert json.loads(again)["slots"] == json.loads(exported.read_text())["slots"]


def test_import_reads_stdin(run: Run, chat: str, tmp_path: Path, isolated_env: Path) -> None:
    exported = ok(run("session", "export")).stdout
    other = tmp_path / "other"
    ok(run("--data-dir", str(other), "session", "import", "-", input=exported))
    assert documents(other, "s") == documents(isolated_env, "s")


def test_an_existing_id_is_refused_unless_imported_as_another(
    run: Run, chat: str, tmp_path: Path, isolated_env: Path
) -> None:
    exported = tmp_path / "s.json"
    ok(run("session", "export", "-o", str(exported)))
    before = documents(isolated_env, "s")
    fails(run("session", "import", str(exported)), EXIT_CONFLICT, "'s' already exists", "--as")
    assert documents(isolated_env, "s") == before

    result = ok(run("session", "import", str(exported), "--as", "copy", "--no-use", "--json"))
    assert json.loads(result.stdout) == {"session": "copy"}
    copied = documents(isolated_env, "copy")
    assert copied["session"] == {**before["session"], "id": "copy"}
    assert {k: v for k, v in copied.items() if k != "session"} == {
        k: v for k, v in before.items() if k != "session"
    }
    assert json.loads(ok(run("session", "show", "--json")).stdout)["id"] == "s"
    fails(run("session", "import", str(exported), "--as", "copy"), EXIT_CONFLICT, "'copy'")
    ok(run("session", "import", str(exported), "--as", "third"))  # selected, as session new
    assert json.loads(ok(run("session", "show", "--json")).stdout)["id"] == "third"


def _break(document: dict[str, Any], how: str) -> dict[str, Any] | list[Any]:
    broken = copy.deepcopy(document)
    slots = broken["slots"]
    if how == "bad slot":
        slots[1]["messages"][0]["role"] = "bot"
    elif how == "slot not an object":
        slots[0] = "default"
    elif how == "missing session":
        del broken["session"]
    elif how == "missing slots":
        del broken["slots"]
    elif how == "wrong kind":
        broken["kind"] = "agctl.slot"
    elif how == "duplicate slot ids":
        slots.append(copy.deepcopy(slots[0]))
    elif how == "current slot not exported":
        broken["session"]["current_slot"] = "gone"
    elif how == "no default slot":
        broken["slots"] = [s for s in slots if s["id"] != "default"]
        broken["session"]["current_slot"] = "branch"
    elif how == "newer session schema":
        broken["session"]["schema_version"] = "9.0"
    elif how == "an array":
        return [broken]
    return broken


CORRUPTIONS = {
    "bad slot": "slots.1.messages.0.role",
    "slot not an object": "slots.0",
    "missing session": "session: Field required",
    "missing slots": "slots: Field required",
    "wrong kind": "kind",
    "duplicate slot ids": "two slots with the same id",
    "current slot not exported": "current slot 'gone' is not exported",
    "no default slot": "no 'default' slot",
    "newer session schema": "schema version 9.0",
    "an array": "not a session export",
}


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_a_corrupted_export_is_refused_and_writes_nothing(
    how: str, run: Run, chat: str, tmp_path: Path
) -> None:
    document = json.loads(ok(run("session", "export")).stdout)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_break(document, how)))
    other = tmp_path / "other"
    result = run("--data-dir", str(other), "session", "import", str(bad))
    fails(result, EXIT_DATA, CORRUPTIONS[how])
    assert nothing_written(other)


@pytest.mark.parametrize("data", ["", "not json", '{"kind": "agctl.session"'])
def test_an_import_that_is_not_json_is_refused(data: str, run: Run, tmp_path: Path) -> None:
    fails(run("session", "import", "-", input=data), EXIT_DATA, "<stdin>")
    assert nothing_written(tmp_path / "data")


@pytest.mark.parametrize("where", ["slot", "session"])
def test_an_invalid_id_inside_an_export_is_a_data_error(
    where: str, run: Run, chat: str, tmp_path: Path
) -> None:
    document = json.loads(ok(run("session", "export")).stdout)
    if where == "slot":
        document["slots"][0]["id"] = "../evil"
    else:
        document["session"]["id"] = "../evil"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    other = tmp_path / "other"
    fails(run("--data-dir", str(other), "session", "import", str(bad)), EXIT_DATA, "../evil")
    assert nothing_written(other)


def test_an_export_of_a_newer_major_version_is_refused(run: Run, chat: str, tmp_path: Path) -> None:
    document = json.loads(ok(run("session", "export")).stdout)
    document["schema_version"] = "9.0"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    other = tmp_path / "other"
    fails(run("--data-dir", str(other), "session", "import", str(bad)), EXIT_DATA, "9.0", "2.0")
    assert nothing_written(other)


def test_the_export_lists_the_checkpoints(run: Run, chat: str) -> None:
    document = json.loads(ok(run("session", "export")).stdout)
    listed = json.loads(ok(run("ckpt", "list", "--json")).stdout)
    assert len(listed) == 3  # before turn 1, after turn 1, by hand
    assert [
        (c["id"], c["turn_index"], c["label"], c["auto"], c["slot_count"], c["message_count"])
        for c in document["checkpoints"]
    ] == [(c["id"], c["turn"], c["label"], c["auto"], c["slots"], c["messages"]) for c in listed]


def test_library_round_trip(store: Store, tmp_path: Path) -> None:
    store.create_session("s", system_prompt="sys")
    store.memory_set("s", "k", "v")
    exported = export_session(store, "s")
    assert isinstance(exported, SessionExport)
    other = Store(tmp_path / "other")
    imported = import_session(other, exported.model_dump_json().encode(), source="x.json")
    assert imported.id == "s"
    assert other.load_session("s").model_dump() == store.load_session("s").model_dump()
    assert [s.model_dump() for s in other.list_slots("s")] == [
        s.model_dump() for s in store.list_slots("s")
    ]


# ---- schema ----------------------------------------------------------------------------


def test_every_stored_document_has_a_schema() -> None:
    assert {"session", "slot", "message", "checkpoint", "cassette", "transcript"} <= set(
        SCHEMA_NAMES
    )


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_prints_a_json_schema(name: str, run: Run) -> None:
    schema = json.loads(ok(run("schema", name)).stdout)
    assert isinstance(schema, dict)
    assert isinstance(schema["properties"], dict) and schema["properties"]
    assert schema.get("type", "object") == "object"


JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "array": (list,),
    "number": (int, float),
    "integer": (int,),
    "null": (type(None),),
    "object": (dict,),
    "boolean": (bool,),
}


def _allowed_types(spec: dict[str, Any]) -> tuple[type, ...]:
    """The Python types a property's JSON Schema admits (`type`, or `anyOf` of types)."""
    return tuple(t for option in spec.get("anyOf", [spec]) for t in JSON_TYPES[option["type"]])


def test_the_transcript_schema_describes_a_real_line(run: Run) -> None:
    line = {
        "input": "Summarise.",
        "expect": "A summary.",
        "slot": "default",
        "model": "gpt-test",
        "system": "Be terse.",
        "scratch": ["note"],
        "temperature": 0.5,
        "max_tokens": 64,
        "expect_tools": [{"name": "search", "arguments": {"q": "x"}}],
        "expect_schema": "summary, words int",
    }
    parse_transcript(json.dumps(line).encode())  # a line the replay accepts
    schema = json.loads(ok(run("schema", "transcript")).stdout)
    assert set(line) == set(schema["properties"])
    assert schema["required"] == ["input"]
    assert schema["additionalProperties"] is False
    for key, value in line.items():
        assert isinstance(value, _allowed_types(schema["properties"][key])), key


def test_schemas_name_the_keys_of_real_documents(
    run: Run, chat: str, isolated_env: Path, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.cassette"
    ok(run("turn", "send", "hello", "--record", str(cassette)))
    stored = documents(isolated_env, "s")
    real = {
        "session": stored["session"],
        "slot": stored["slot:default"],
        "message": stored["slot:default"]["messages"][-1],
        "cassette": json.loads(cassette.read_text().splitlines()[0]),
        "export": json.loads(ok(run("session", "export")).stdout),
    }
    for name, document in real.items():
        schema = json.loads(ok(run("schema", name)).stdout)
        assert set(schema.get("required", [])) <= set(document), name
        assert set(document) <= set(schema["properties"]), name


def test_an_unknown_schema_name_is_a_usage_error(run: Run) -> None:
    result = run("schema", "bogus")
    assert result.exit_code == EXIT_USAGE
    assert "bogus" in result.stderr and result.stdout == ""


# ---- --quiet ---------------------------------------------------------------------------


def test_quiet_silences_confirmations_only(run: Run) -> None:
    assert ok(run("-q", "session", "new", "s")).stdout == "s\n"
    assert ok(run("msg", "append", "user", "loud")).stdout != ""
    for command in (
        ["msg", "append", "user", "hello"],
        ["msg", "edit", "0", "hi"],
        ["slot", "new", "b"],
        ["slot", "use", "default"],
        ["memory", "set", "k", "v"],
        ["session", "set", "title", "T"],
    ):
        result = ok(run("-q", *command))
        assert result.stdout == "" and result.stderr == "", command
    assert ok(run("-q", "msg", "get", "0")).stdout == "hi\n"
    assert ok(run("-q", "memory", "get", "k")).stdout == "v\n"
    listed = ok(run("-q", "msg", "list")).stdout
    assert [line.split()[-1] for line in listed.splitlines()[1:]] == ["hi", "hello"]
    assert "s" in ok(run("--quiet", "session", "list")).stdout


def test_quiet_still_prints_errors(run: Run) -> None:
    ok(run("-q", "session", "new", "s"))
    fails(run("-q", "msg", "get", "9"), EXIT_NOT_FOUND, "out of range")
    fails(run("-q", "memory", "get", "nope"), EXIT_NOT_FOUND, "nope")


def test_quiet_json_still_prints_json(run: Run) -> None:
    ok(run("-q", "session", "new", "s"))
    appended = json.loads(ok(run("-q", "--json", "msg", "append", "user", "yo")).stdout)
    assert (appended["index"], appended["role"], appended["content"]) == (0, "user", "yo")
    assert json.loads(ok(run("-q", "memory", "set", "k", "v", "--json")).stdout)
    assert json.loads(ok(run("--quiet", "--json", "slot", "new", "b")).stdout)


# ---- color -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env", "colored"),
    [
        (["demo"], {}, True),
        (["--no-color", "demo"], {}, False),
        (["demo"], {"NO_COLOR": "1"}, False),
    ],
    ids=["forced", "--no-color", "NO_COLOR"],
)
def test_no_color(
    args: list[str], env: dict[str, str], colored: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(cli, args, color=True, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert ("\x1b[" in result.stdout) is colored
    assert "\x1b[" not in result.stderr
    assert "$ agctl session new legal-aid" in result.stdout
