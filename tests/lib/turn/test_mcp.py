"""Tools from MCP servers (agctl.turn.mcp): the names they are offered by, a server's
definition, and the client against the suite's real MCP server (tests/mcp_server.py) over
stdio: listing, calls, errors, caps, the scrubbed environment, and a replay's definitions
taken from a cassette."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agctl.base.errors import McpServerError, NotFound, UsageError
from agctl.config.file import Config, ConfigFile
from agctl.config.specs import McpServerSpec
from agctl.turn.mcp import (
    McpClient,
    RecordedMcpTools,
    expanded_headers,
    function_name,
    new_server,
    parameter_summary,
    split_name,
)

SERVER = str(Path(__file__).parents[2] / "mcp_server.py")


def suite(**fields: object) -> McpServerSpec:
    return new_server("suite", [sys.executable, SERVER], None, (), **fields)


@pytest.fixture
def client() -> McpClient:
    made = McpClient({"suite": suite()})
    yield made
    made.close()


def test_a_tool_is_offered_as_server__tool_when_that_is_a_function_name() -> None:
    assert function_name("files", "read_file") == "files__read_file"
    assert split_name("files__read_file") == ("files", "read_file")
    assert split_name("files__a__b") == ("files", "a__b")  # a server's name has no '_'
    assert function_name("files", "read.file") is None  # '.' is no function name
    assert function_name("files", "x" * 60) is None  # over 64
    assert split_name("plain") is None and split_name("__x") is None


def test_a_server_has_a_command_or_a_url_and_a_name_without_underscores() -> None:
    assert suite().command == [sys.executable, SERVER]
    with pytest.raises(UsageError, match="not both"):
        new_server("s", ["x"], "http://127.0.0.1/mcp", ())
    with pytest.raises(UsageError, match="not both"):
        new_server("s", [], None, ())
    with pytest.raises(UsageError, match="no '_'"):
        new_server("my_server", ["x"], None, ())
    with pytest.raises(UsageError, match="not http"):
        new_server("s", [], "file:///etc/passwd", ())
    with pytest.raises(UsageError, match="for an HTTP server"):
        new_server("s", ["x"], None, ("X-A: b",))
    with pytest.raises(UsageError, match="'Name: value'"):
        new_server("s", [], "http://127.0.0.1/mcp", ("no colon",))


def test_header_variables_are_read_when_it_connects_never_kept() -> None:
    spec = new_server("s", [], "http://h/mcp", ("Authorization: Bearer ${TOKEN}",))
    assert spec.headers == {"Authorization": "Bearer ${TOKEN}"}
    assert expanded_headers(spec, {"TOKEN": "t0k"}) == {"Authorization": "Bearer t0k"}
    with pytest.raises(UsageError, match=r"needs \$\{TOKEN\}"):
        expanded_headers(spec, {})


def test_an_unset_header_variable_is_the_users_error_as_it_is() -> None:
    web = new_server("web", [], "http://127.0.0.1:9/mcp", ("Authorization: Bearer ${MYTOK}",))
    client = McpClient({"web": web}, environ={})
    try:
        with pytest.raises(UsageError, match=r"needs \$\{MYTOK\}") as raised:
            client.tools("web")
        assert raised.value.hint is None  # not 'check it with agctl mcp tools web'
    finally:
        client.close()


def test_a_projects_server_reads_no_secret_into_its_headers() -> None:
    header = ("Authorization: Bearer ${OPENAI_API_KEY}",)
    spec = new_server("web", [], "http://h/mcp", header, env_allow=["OPENAI_*"])
    environ = {"OPENAI_API_KEY": "sk-real", "LANG": "C"}
    assert expanded_headers(spec, environ) == {"Authorization": "Bearer sk-real"}  # the user's
    with pytest.raises(UsageError, match=r"may not read \$\{OPENAI_API_KEY\}"):
        expanded_headers(spec, environ, project=True)
    lang = new_server("web", [], "http://h/mcp", ("Accept-Language: ${LANG}",))
    assert expanded_headers(lang, environ, project=True) == {"Accept-Language": "C"}
    client = McpClient({"web": spec}, environ=environ, cwds={"web": Path.cwd()})
    try:
        with pytest.raises(UsageError, match="may not read"):
            client.tools("web")
    finally:
        client.close()


def test_servers_are_kept_in_the_config(tmp_path: Path) -> None:
    store = ConfigFile(tmp_path / "config.json")
    assert store.add_mcp_server(suite()) is False
    assert store.load().mcp_servers["suite"].command == [sys.executable, SERVER]
    assert store.add_mcp_server(suite(approve="auto"), replace=True) is True
    assert (
        Config.model_validate_json((tmp_path / "config.json").read_bytes())
        .mcp_servers["suite"]
        .approve
        == "auto"
    )
    assert store.remove_mcp_server("suite").name == "suite"
    with pytest.raises(NotFound, match="servers: none"):
        store.remove_mcp_server("suite")


def test_parameters_on_one_line() -> None:
    schema = {"properties": {"a": {"type": "integer"}, "b": {}}, "required": ["a"]}
    assert parameter_summary(schema) == "a: integer, b?: any"


def test_the_client_lists_and_calls_the_suite_server(client: McpClient) -> None:
    names = [tool.function for tool in client.tools("suite")]
    assert names[:3] == ["suite__echo", "suite__add", "suite__fail"]
    spec = client.spec("suite__add")
    assert spec.approve == "ask" and spec.command == [sys.executable, SERVER]
    run = client.call(spec, {"a": 2, "b": 40})
    assert (run.result_text, run.exit_code, run.ok) == ("42", 0, True)
    failed = client.call(client.spec("suite__fail"), {"reason": "no luck"})
    assert failed.exit_code == 1 and failed.result_text.startswith("error: ")
    with pytest.raises(NotFound, match="has no tool 'nope'"):
        client.spec("suite__nope")


def test_a_big_result_is_cut_to_the_servers_cap() -> None:
    client = McpClient({"suite": suite(max_output=1000)})
    try:
        run = client.call(client.spec("suite__big"), {"size": 100_000})
    finally:
        client.close()
    assert run.truncated and len(run.result_text.encode()) <= 1000
    assert "bytes cut" in run.result_text and run.output_bytes == 100_000
    assert run.result_text.startswith("abcdefghij")


def test_the_server_gets_the_scrubbed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUITE_API_TOKEN", "sekrit")
    monkeypatch.setenv("SUITE_SETTING", "kept")
    monkeypatch.setenv("SUITE_OTHER", "dropped")
    client = McpClient({"suite": suite(env_allow=["SUITE_*"])})
    try:
        seen = json.loads(client.call(client.spec("suite__env"), {}).result_text)
    finally:
        client.close()
    assert seen.get("SUITE_SETTING") == "kept" and seen.get("SUITE_OTHER") == "dropped"
    assert "SUITE_API_TOKEN" not in seen and "AGCTL_DATA_DIR" not in seen


def test_a_server_that_cannot_start_is_an_error_naming_it() -> None:
    client = McpClient({"gone": new_server("gone", ["/nonexistent/mcp-server"], None, ())})
    try:
        with pytest.raises(McpServerError, match="MCP server 'gone' could not connect"):
            client.tools("gone")
    finally:
        client.close()


def test_a_replay_takes_the_definitions_from_the_cassette(tmp_path: Path) -> None:
    offered = {
        "type": "function",
        "function": {
            "name": "suite__echo",
            "description": "Give the text back.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    }
    line = {
        "schema_version": "2.0",
        "hash": "0" * 64,
        "request": {"model": "m", "messages": [], "params": {"tools": [offered]}},
        "events": [],
    }
    cassette = tmp_path / "c.jsonl"
    cassette.write_text(json.dumps(line) + "\n")
    recorded = RecordedMcpTools({"suite": suite()}, cassette)
    spec = recorded.spec("suite__echo")
    assert (spec.description, spec.parameters) == (
        "Give the text back.",
        offered["function"]["parameters"],
    )
    assert list(recorded.every_spec()) == ["suite__echo"]
    with pytest.raises(NotFound, match="no recorded request offers MCP tool 'suite__add'"):
        recorded.spec("suite__add")
    unconfigured = RecordedMcpTools({}, cassette)  # a CI job's replay: no server at all
    assert unconfigured.serves("suite__echo") and not unconfigured.serves("suite__add")
    assert unconfigured.spec("suite__echo").parameters == offered["function"]["parameters"]
    assert unconfigured.spec("suite__echo").approve == "ask"  # a server's default


def test_a_projects_servers_file_is_checked_whole() -> None:
    from agctl.base.errors import InvalidInput
    from agctl.turn.mcp import parse_servers_file

    parsed = parse_servers_file(b'{"web": {"url": "http://127.0.0.1:9/mcp"}}')
    assert parsed["web"].name == "web" and parsed["web"].approve == "ask"
    for bad, why in (
        (b"[]", "not a JSON object"),
        (b"{", "not JSON"),
        (b'{"web": {"url": "ftp://x"}}', "not http"),
        (b'{"a_b": {"command": ["x"]}}', "no '_'"),
        (b'{"web": {"name": "other", "url": "http://h/mcp"}}', "its key"),
    ):
        with pytest.raises(InvalidInput, match=why):
            parse_servers_file(bad)
