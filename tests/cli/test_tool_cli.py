"""`agctl tool`: adding, listing, showing, removing and running tools by hand."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import as_json, fails, ok

from agctl.config.file import ConfigFile

Run = Callable[..., Result]

COUNT = [sys.executable, "-c", "import json,sys; print(len(json.load(sys.stdin)['text'].split()))"]
TEXT_SCHEMA = json.dumps(
    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
)


def add_count(run: Run, *extra: str) -> Result:
    return run(
        "tool", "add", "count", "--description", "Count words", "--parameters", TEXT_SCHEMA,
        *extra, "--", *COUNT,
    )  # fmt: skip


def test_add_keeps_the_tool_in_the_config(run: Run) -> None:
    ok(add_count(run, "--approve", "auto", "--timeout", "5", "--env-allow", "PROJECT_*"))
    spec = ConfigFile().load().tools["count"]
    assert spec.command == COUNT and spec.approve == "auto" and spec.timeout_s == 5
    assert spec.env_allow == ["PROJECT_*"] and spec.parameters == json.loads(TEXT_SCHEMA)


def test_add_refuses_a_second_tool_of_a_name_unless_forced(run: Run) -> None:
    ok(add_count(run))
    fails(add_count(run), 4, "already exists")
    assert as_json(ok(add_count(run, "--force", "--json")))["replaced"] is True


def test_add_to_a_profile(run: Run) -> None:
    ok(run("profile", "add", "work", "--preset", "ollama"))
    ok(add_count(run, "--profile", "work"))
    config = ConfigFile().load()
    assert config.tools == {} and set(config.profiles["work"].tools) == {"count"}
    rows = as_json(ok(run("tool", "list", "--profile", "work", "--json")))
    assert [(row["name"], row["source"]) for row in rows] == [("count", "profile work")]
    assert as_json(ok(run("tool", "list", "--json"))) == []
    fails(add_count(run, "--profile", "nobody"), 3, "profile 'nobody' not found")


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--parameters", "{oops"], 2, "not valid JSON"),
        (["--parameters", '{"type": "object", "required": 3}'], 2, "not a valid JSON Schema"),
        (["--parameters", '{"type": "string"}'], 2, "type 'object'"),
        (["--timeout", "0"], 2, "timeout_s"),
        (["--max-output", "1"], 2, "max_output"),
    ],
)
def test_add_refuses_a_bad_definition(run: Run, args: list[str], code: int, needle: str) -> None:
    result = run("tool", "add", "t", "--description", "d", *args, "--", "true")
    fails(result, code, needle)
    assert "Traceback" not in result.output
    assert ConfigFile().load().tools == {}


def test_add_refuses_a_name_that_is_no_function_name(run: Run) -> None:
    fails(run("tool", "add", "a.b", "--description", "d", "--", "true"), 2, "function name")


def test_add_needs_a_command(run: Run) -> None:
    fails(run("tool", "add", "t", "--description", "d"), 2, "COMMAND")


def test_add_refuses_a_cwd_in_the_data_dir(run: Run, isolated_env: Path) -> None:
    result = run("tool", "add", "t", "--description", "d", "--cwd", str(isolated_env), "--", "ls")
    fails(result, 2, "inside agctl's data dir")


def test_list_and_show(run: Run) -> None:
    ok(add_count(run))
    listed = ok(run("tool", "list")).stdout
    assert "count" in listed and "ask" in listed and "config" in listed
    shown = as_json(ok(run("tool", "show", "count", "--json")))
    assert shown["command"] == COUNT and shown["source"] == "config"
    text = ok(run("tool", "show", "count")).stdout
    assert "approve      ask" in text and "None" not in text
    fails(run("tool", "show", "nope"), 3, "tool 'nope' not found (tools: count)")


def test_list_and_show_show_hidden_and_control_characters_escaped(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the table's last column is not cut
    tools_file = tmp_path / "tools.json"
    command = ["sh", "\u202ekcehc.sh", "\x1b]0;pwned\x07"]
    tools_file.write_text(json.dumps([{"name": "x", "command": command}]))
    for args in (["list"], ["show", "x"]):
        text = ok(run("tool", *args, "--tools-file", str(tools_file))).stdout
        assert "sh $'\\u202ekcehc.sh' $'\\x1b]0;pwned\\x07'" in text
        assert not {"\u202e", "\x1b", "\x07"} & set(text)


def test_a_tools_file_adds_and_overrides(run: Run, tmp_path: Path) -> None:
    ok(add_count(run))
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([{"name": "count", "command": ["echo", "7"]}]))
    shown = as_json(ok(run("tool", "show", "count", "--tools-file", str(tools_file), "--json")))
    assert shown["command"] == ["echo", "7"] and shown["source"] == f"file {tools_file}"
    result = ok(run("tool", "test", "count", "--tools-file", str(tools_file)))
    assert result.stdout == "7\n"


def test_a_bad_tools_file_is_exit_5(run: Run, tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([{"name": "x", "command": ["true"], "timeout_s": "soon"}]))
    fails(run("tool", "list", "--tools-file", str(tools_file)), 5, "item 1 (tool 'x'): timeout_s")


def test_rm(run: Run) -> None:
    ok(add_count(run))
    assert as_json(ok(run("tool", "rm", "count", "--json"))) == {
        "removed": "count",
        "profile": None,
    }
    fails(run("tool", "rm", "count"), 3, "not found")


def test_test_runs_the_tool_and_prints_its_result(run: Run) -> None:
    ok(add_count(run))
    assert ok(run("tool", "test", "count", "--args", '{"text": "one two three"}')).stdout == "3\n"
    data = as_json(ok(run("tool", "test", "count", "--args", '{"text": "a b"}', "--json")))
    assert data["exit"] == 0 and data["result"] == "2\n" and data["output_bytes"] == 2


def test_test_of_a_failing_tool_shows_the_outcome_and_exits_1(run: Run) -> None:
    ok(run("tool", "add", "f", "--description", "d", "--", "sh", "-c", "echo why >&2; exit 4"))
    result = run("tool", "test", "f")
    assert result.exit_code == 1
    assert result.stdout == "error: exit 4\nwhy\n"
    data = json.loads(run("tool", "test", "f", "--json").stdout)
    assert data["exit"] == 4 and data["result"] == "error: exit 4\nwhy"


def test_test_of_a_missing_program_exits_1(run: Run) -> None:
    ok(run("tool", "add", "m", "--description", "d", "--", "agctl-no-such-program"))
    result = run("tool", "test", "m")
    assert result.exit_code == 1 and "cannot run agctl-no-such-program" in result.stdout


def test_test_with_bad_arguments_runs_nothing(run: Run, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}})
    ok(run("tool", "add", "touch", "--description", "d", "--parameters", schema, "--",
           "touch", str(marker)))  # fmt: skip
    fails(run("tool", "test", "touch", "--args", '{"n": "x"}'), 2, "do not match its schema")
    fails(run("tool", "test", "touch", "--args", "{oops"), 2, "not valid JSON")
    fails(run("tool", "test", "touch", "--args", "[1]"), 2, "must be a JSON object")
    assert not marker.exists()
    ok(run("tool", "test", "touch", "--args", '{"n": 1}'))
    assert marker.exists()


def test_test_never_sees_agctl_credentials(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted")
    monkeypatch.setenv("AGCTL_API_KEY", "planted")
    ok(run("tool", "add", "env", "--description", "d", "--env-allow", "*", "--", "env"))
    assert "planted" not in ok(run("tool", "test", "env")).stdout
