"""Tools as data: their definitions, where they live, checked calls, the scrubbed
environment and the approval rules (the runs themselves: tests/process/test_tool_runs.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI
from helpers import tool_spec as spec
from pydantic import ValidationError

from agctl.base.errors import AlreadyExists, ApprovalNeeded, InvalidInput, NotFound, UsageError
from agctl.config.file import Config, ConfigFile, Profile
from agctl.context.models import ToolCall, ToolCallFunction
from agctl.turn.tools import (
    DENIED,
    Answer,
    LiveTools,
    ToolSpec,
    _cut,
    approval,
    argument_variables,
    arguments_problem,
    check_call,
    definitions,
    load_tools_file,
    new_tool,
    scrubbed_env,
    spec_from,
    tool_argv,
    tool_cwd,
    tool_registry,
    tool_sources,
)

NUMBER_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0}, "tag": {"type": "string"}},
    "required": ["n"],
    "additionalProperties": False,
}


# ---- definitions --------------------------------------------------------------------------


def test_spec_from_checks_the_schema_itself() -> None:
    with pytest.raises(UsageError, match=r"not a valid JSON Schema.*properties/n/type"):
        spec_from(
            {"name": "t", "command": ["true"], "parameters": {"properties": {"n": {"type": "nu"}}}}
        )


def test_spec_from_refuses_an_unknown_field() -> None:
    """A typo must not silently mean the default (`aprove: deny` would be `ask`)."""
    with pytest.raises(UsageError, match="unknown field 'aprove'"):
        spec_from({"name": "t", "command": ["true"], "aprove": "deny"})


def test_a_new_tool_is_checked_and_never_set_to_run_in_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    monkeypatch.chdir(tmp_path)
    fields = {"name": "t", "command": ["true"], "timeout_s": None, "cwd": "work"}
    made = new_tool(fields, data_dir=data_dir)
    assert (made.name, made.command, made.cwd) == ("t", ["true"], "work")
    assert new_tool({**fields, "cwd": None}, data_dir=data_dir).cwd is None
    with pytest.raises(UsageError, match="inside agctl's data dir"):
        new_tool({**fields, "cwd": "data"}, data_dir=data_dir)
    with pytest.raises(UsageError, match="unknown field 'aprove'"):
        new_tool({**fields, "aprove": "deny"}, data_dir=data_dir)


def test_definitions_are_openai_function_tools_in_order() -> None:
    tools = [spec(name="b", description="B", parameters=NUMBER_SCHEMA), spec(name="a")]
    assert definitions(tools) == [
        {
            "type": "function",
            "function": {"name": "b", "description": "B", "parameters": NUMBER_SCHEMA},
        },
        {
            "type": "function",
            "function": {
                "name": "a",
                "description": "",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]


def test_definitions_refuse_a_hand_edited_invalid_schema() -> None:
    broken = spec(parameters={"type": "object", "required": "n"})
    with pytest.raises(InvalidInput, match="tool 't': parameters: not a valid JSON Schema"):
        definitions([broken])


# ---- where tools live ---------------------------------------------------------------------


def test_an_old_config_file_loads_and_is_written_without_tools(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"schema_version": "1.0", "profiles": {"p": {"model": "m"}}}))
    store = ConfigFile(path)
    config = store.load()
    assert config.tools == {} and config.profiles["p"].tools == {}
    store.save(config)
    written = json.loads(path.read_text())
    assert "tools" not in written and "tools" not in written["profiles"]["p"]
    assert written["schema_version"] == "1.0"


def test_a_config_tool_takes_its_name_from_its_key() -> None:
    config = Config.model_validate({"tools": {"now": {"command": ["date"]}}})
    assert config.tools["now"].name == "now"
    with pytest.raises(ValidationError, match="its name is its key"):
        Config.model_validate({"tools": {"now": {"name": "then", "command": ["date"]}}})


def test_the_profile_overrides_the_config_and_the_file_overrides_both(tmp_path: Path) -> None:
    config = Config(
        tools={"a": spec(name="a", description="config"), "b": spec(name="b")},
        profiles={"p": Profile(tools={"a": spec(name="a", description="profile")})},
    )
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps([{"name": "b", "command": ["false"], "description": "file"}]))
    assert tool_registry(config, None, None)["a"].description == "config"
    assert tool_registry(config, "p", None)["a"].description == "profile"
    assert tool_registry(config, "ollama", None)["a"].description == "config"  # a preset
    registry = tool_registry(config, "p", tools_file)
    assert registry["b"].description == "file"
    assert tool_sources(config, "p", tools_file) == {
        "a": "profile p",
        "b": f"file {tools_file}",
    }


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        ('{"name": "x"}', "must be a JSON array of tools, not an object"),
        ("[3]", "item 1: a tool must be a JSON object, not a number"),
        ('[{"name": "ok", "command": ["true"]}, {"name": "x"}]', "item 2 (tool 'x'): command"),
        ('[{"name": "x", "command": ["true"], "timeout_s": -1}]', "item 1 (tool 'x'): timeout_s"),
        (
            '[{"name": "x", "command": ["true"], "parameters": {"required": 3}}]',
            "parameters: not a valid JSON Schema",
        ),
        (
            '[{"name": "x", "command": ["a"]}, {"name": "x", "command": ["b"]}]',
            "item 2 (tool 'x'): defined twice (also item 1)",
        ),
    ],
)
def test_a_bad_tools_file_is_exit_5_naming_the_item_and_field(
    tmp_path: Path, content: str, needle: str
) -> None:
    path = tmp_path / "tools.json"
    path.write_text(content)
    with pytest.raises(InvalidInput) as caught:
        load_tools_file(path)
    assert caught.value.exit_code == 5
    assert needle in str(caught.value) and str(path) in str(caught.value)


def test_a_missing_tools_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="no such file"):
        load_tools_file(tmp_path / "absent.json")


def test_tools_are_added_and_removed_in_the_config_or_a_profile(tmp_path: Path) -> None:
    store = ConfigFile(tmp_path / "config.json")
    assert store.add_tool(spec(name="a")) is False
    with pytest.raises(AlreadyExists, match="already exists"):
        store.add_tool(spec(name="a"))
    assert store.add_tool(spec(name="a", description="new"), replace=True) is True
    with pytest.raises(NotFound, match="profile 'p' not found"):
        store.add_tool(spec(name="a"), profile="p")
    store.add_profile("p", Profile(model="m"))
    store.add_tool(spec(name="b"), profile="p")
    config = store.load()
    assert config.tools["a"].description == "new" and set(config.profiles["p"].tools) == {"b"}
    store.remove_tool("b", profile="p")
    with pytest.raises(NotFound):
        store.remove_tool("b", profile="p")
    store.remove_tool("a")
    assert store.load().tools == {}


def test_config_set_reaches_a_tools_field(tmp_path: Path) -> None:
    store = ConfigFile(tmp_path / "config.json")
    store.add_tool(spec(name="a"))
    store.set("tools.a.timeout_s", "5")
    assert store.load().tools["a"].timeout_s == 5
    with pytest.raises(UsageError, match="unknown field 'timeout'"):
        store.set("tools.a.timeout", "5")


# ---- checking a model's call --------------------------------------------------------------


def test_a_valid_call_gives_its_arguments() -> None:
    tool = spec(parameters=NUMBER_SCHEMA)
    assert check_call(tool, "t", '{"n": 3, "tag": "x"}') == {"n": 3, "tag": "x"}
    assert check_call(spec(), "t", "") == {}


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ('{"n": 3', "are not valid JSON"),
        ("[1]", "must be a JSON object, not an array"),
        ('"n"', "must be a JSON object, not a string"),
        ("{}", "do not match its schema: 'n' is a required property"),
        ('{"n": -1}', "at $.n: -1 is less than the minimum of 0"),
        ('{"n": 1, "x": 2}', "Additional properties are not allowed"),
        ('{"n": "1", "tag": 2}', "(and 1 more)"),
    ],
)
def test_a_bad_call_gives_an_error_text(arguments: str, needle: str) -> None:
    result = check_call(spec(parameters=NUMBER_SCHEMA), "t", arguments)
    assert isinstance(result, str)
    assert result.startswith("error: the arguments of tool 't' ")
    assert needle in result


def test_an_unknown_tool_gives_an_error_text() -> None:
    assert check_call(None, "rm_rf", "{}") == "error: unknown tool 'rm_rf'"


# ---- environment, argv, cwd --------------------------------------------------------------


def test_the_environment_is_scrubbed() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TZ": "UTC",
        "TMPDIR": "/tmp",
        "TERM": "xterm",
        "EDITOR": "vi",
        "PROJECT_ROOT": "/src",
        "PROJECT_API_KEY": "k",
        "project_token": "t",
        "AGCTL_X": "a",
        "AGCTL_DATA_DIR": "/d",
        "OPENAI_BASE_URL": "u",
        "MY_PASSWD": "p",
        "AWS_CREDENTIALS": "c",
        "TOOL_ARG_N": "stale",
    }
    allowed = scrubbed_env(
        spec(env_allow=["PROJECT_*", "project_*", "AGCTL_*", "*_BASE_URL"]), environ
    )
    assert allowed == {
        "PATH": "/bin",
        "HOME": "/home/u",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TZ": "UTC",
        "TMPDIR": "/tmp",
        "TERM": "xterm",
        "PROJECT_ROOT": "/src",
    }


def test_env_mode_variables() -> None:
    arguments = {"n": 3, "flag": True, "none": None, "text": "a b", "my-key": "v", "list": [1],
                 "nul": "a\x00b"}  # fmt: skip
    assert argument_variables(arguments) == {
        "AGCTL_TOOL_ARGS": json.dumps(arguments, separators=(",", ":")),
        "TOOL_ARG_N": "3",
        "TOOL_ARG_FLAG": "true",
        "TOOL_ARG_NONE": "null",
        "TOOL_ARG_TEXT": "a b",
        "TOOL_ARG_MY_KEY": "v",
    }


def test_argv_mode_appends_the_json() -> None:
    assert tool_argv(spec(command=["x", "-v"], args="argv"), {"a": 1}) == ["x", "-v", '{"a":1}']
    assert tool_argv(spec(command=["x", "-v"]), {"a": 1}) == ["x", "-v"]


def test_the_cwd_is_relative_to_where_agctl_started_and_never_the_data_dir(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "any" / "folder").mkdir(parents=True)  # anywhere inside it
    assert tool_cwd(spec(), started_in=tmp_path, data_dir=data_dir) == tmp_path
    assert tool_cwd(spec(cwd="sub"), started_in=tmp_path, data_dir=data_dir) == tmp_path / "sub"
    assert tool_cwd(spec(cwd="/etc"), started_in=tmp_path, data_dir=data_dir) == Path("/etc")
    for where in (spec(cwd="data/any/folder"), spec(cwd=str(data_dir))):
        with pytest.raises(UsageError, match="inside agctl's data dir"):
            tool_cwd(where, started_in=tmp_path, data_dir=data_dir)
    with pytest.raises(UsageError, match="inside agctl's data dir"):
        tool_cwd(spec(), started_in=data_dir / "any", data_dir=data_dir)
    (tmp_path / "link").symlink_to(data_dir)
    with pytest.raises(UsageError, match="inside agctl's data dir"):
        tool_cwd(spec(cwd="link"), started_in=tmp_path, data_dir=data_dir)


# ---- the cut the model sees ---------------------------------------------------------------


def test_a_long_result_keeps_its_head_and_tail_and_marks_the_cut() -> None:
    data = b"H" * 1000 + b"m" * 5000 + b"T" * 1000
    text, truncated = _cut(data, data[-1024:], len(data), 1024)
    assert truncated
    head, marker, tail = text.split("\n")
    assert head == "H" * len(head) and tail == "T" * len(tail) and len(head) == len(tail)
    assert marker == f"[... {len(data) - 2 * len(head)} bytes cut ...]"
    assert len(text.encode()) <= 1024
    assert _cut(b"short", b"short", 5, 1024) == ("short", False)


def test_a_cut_never_splits_a_character() -> None:
    data = "é".encode() * 2000
    text, truncated = _cut(data, data[-300:], len(data), 300)
    assert truncated and "\ufffd" not in text
    assert len(text.encode()) <= 300


# ---- approval -----------------------------------------------------------------------------


def asked(answer: Answer, calls: list[tuple[str, dict[str, Any], list[str]]]) -> Any:
    def ask(tool: ToolSpec, arguments: dict[str, Any], argv: list[str]) -> Answer:
        calls.append((tool.name, arguments, argv))
        return answer

    return ask


@pytest.mark.parametrize("mode", [None, "auto", "never"])
def test_a_deny_tool_never_runs(mode: Any) -> None:
    calls: list[Any] = []
    assert approval(spec(approve="deny"), mode, asked(True, calls), {}) == "deny"
    assert calls == []


@pytest.mark.parametrize("approve", ["auto", "ask", "deny"])
def test_approve_never_refuses_every_call(approve: Any) -> None:
    assert approval(spec(approve=approve), "never", None, {}) == "deny"


def test_an_auto_tool_runs_without_asking_even_with_no_terminal() -> None:
    assert approval(spec(approve="auto"), None, None, {}) == "run"


def test_an_ask_tool_asks_with_its_name_arguments_and_resolved_argv() -> None:
    calls: list[Any] = []
    tool = spec(approve="ask", command=["sh", "-c", "x"], args="argv")
    assert approval(tool, None, asked("no", calls), {"a": 1}) == "deny"
    assert approval(tool, None, asked("yes", calls), {"a": 1}) == "run"
    assert approval(tool, None, asked("always", calls), {"a": 1}) == "run"
    name, arguments, argv = calls[0]
    assert (name, arguments) == ("t", {"a": 1})
    assert argv[0].endswith("/sh") and argv[1:] == ["-c", "x", '{"a":1}']
    assert approval(tool, "auto", asked("no", calls), {}) == "run"
    assert len(calls) == 3


def test_an_ask_tool_with_no_terminal_is_left_for_later() -> None:
    with pytest.raises(ApprovalNeeded, match="no terminal") as caught:
        approval(spec(approve="ask"), None, None, {})
    assert caught.value.exit_code == 9
    assert (caught.value.tool, caught.value.reason) == ("t", "there is no terminal to ask on")


def call_of(call_id: str) -> ToolCall:
    return ToolCall(id=call_id, function=ToolCallFunction(name="t", arguments="{}"))


def test_an_answer_given_in_advance_decides_its_call_and_a_denial_wins_over_auto(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    tool = spec(approve="auto", command=["sh", "-c", f"echo x >> {marker}"])
    tools = LiveTools({"t": tool}, approve="auto", answers={"c1": "no"}, cwd=tmp_path)
    text, record = tools.run(call_of("c1"))
    assert (text, record.outcome) == (DENIED, "denied") and not marker.exists()
    asked = spec(approve="ask", command=tool.command)
    tools = LiveTools({"t": asked}, answers={"c2": "yes"}, cwd=tmp_path)
    assert tools.run(call_of("c2"))[1].outcome == "ran" and marker.read_text() == "x\n"
    with pytest.raises(ApprovalNeeded):
        tools.run(call_of("c3"))  # no answer given for it, and no terminal


def test_always_lasts_for_the_rest_of_the_turn_only(tmp_path: Path) -> None:
    questions: list[Any] = []
    tools = LiveTools({"t": spec(approve="ask")}, ask=asked("always", questions), cwd=tmp_path)
    tools.begin_turn()
    assert [tools.run(call_of(f"c{n}"))[1].outcome for n in range(3)] == ["ran"] * 3
    assert len(questions) == 1
    tools.begin_turn()
    tools.run(call_of("c4"))
    assert len(questions) == 2, "a new turn asks again"


def test_the_denied_text_is_what_the_issue_names() -> None:
    assert DENIED == "error: denied by the user's approval policy"


def test_loading_the_config_with_tools_does_not_import_jsonschema(tmp_path: Path) -> None:
    """A turn that offers no tool must not pay for jsonschema (about 100 ms)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"tools": {"t": {"command": ["true"]}}}))
    code = (
        "import sys; from agctl.config.file import ConfigFile; from pathlib import Path; "
        f"c = ConfigFile(Path({str(path)!r})).load(); assert c.tools['t'].name == 't'; "
        "print('jsonschema' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_arguments_against_a_ref_not_within_the_parameters_are_refused_never_fetched() -> None:
    with FakeOpenAI() as server:
        for ref, to in ((f"{server.base_url}/a.json", f"{server.base_url}/a.json"), ("#/x", "/x")):
            parameters = {"type": "object", "properties": {"a": {"$ref": ref}}}
            assert arguments_problem(spec(parameters=parameters), {"a": 1}) == (
                f"cannot be checked: the tool's parameters refer to {to!r}, not within them"
            )
        assert server.requests == []
