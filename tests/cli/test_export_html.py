"""`session export --format html`: the page goes to the file or stdout; the JSON export and
its options stay as they were, and options of one format are refused with the other."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from click.testing import Result
from helpers import HOSTILE_TEXT, SID, conversation_with_tools, fails, ok
from pagesparse import parse_page

from agctl.store import Store


def test_export_html_writes_the_page_to_a_private_file(
    run: Callable[..., Result], store: Store, tmp_path: Path
) -> None:
    conversation_with_tools(store)
    target = tmp_path / "chat.html"
    ok(run("-s", SID, "session", "export", "--format", "html", "-o", str(target)))
    assert target.stat().st_mode & 0o777 == 0o600
    parsed = parse_page(target.read_text())
    assert parsed.data()["messages"][1]["text"] == HOSTILE_TEXT


def test_export_html_of_a_slot_redacted_to_stdout(run: Callable[..., Result], store: Store) -> None:
    conversation_with_tools(store)
    ok(run("-s", SID, "slot", "new", "side"))
    ok(run("-s", SID, "msg", "append", "--slot", "side", "user", "side secret"))
    result = ok(run("-s", SID, "session", "export", "--format", "html", "--slot", "side"))
    assert parse_page(result.output).data()["messages"][1]["text"] == "side secret"
    redacted = ok(run("session", "export", SID, "--format", "html", "--slot", "side", "--redact"))
    assert "side secret" not in redacted.output
    assert parse_page(redacted.output).data()["slot"] == "side"


def test_export_json_stays_the_default(run: Callable[..., Result], store: Store) -> None:
    conversation_with_tools(store)
    document = json.loads(ok(run("session", "export", SID)).output)
    assert document["kind"] == "agctl.session"
    assert document == json.loads(ok(run("session", "export", SID, "--format", "json")).output)


def test_options_of_the_other_format_are_refused(run: Callable[..., Result], store: Store) -> None:
    conversation_with_tools(store)
    fails(run("session", "export", SID, "--redact"), 2, "--format html")
    fails(run("session", "export", SID, "--slot", "default"), 2, "--format html")
    fails(run("session", "export", SID, "--format", "html", "--checkpoints"), 2, "--format json")
    fails(run("session", "export", SID, "--format", "html", "--slot", "nope"), 3, "nope")


def test_session_graph_html_carries_what_a_click_shows(
    run: Callable[..., Result], store: Store, tmp_path: Path
) -> None:
    from graph_scenario import build_scenario

    build_scenario(store)
    target = tmp_path / "graph.html"
    ok(run("session", "graph", "--all", "--checkpoints", "--format", "html", "-o", str(target)))
    data = parse_page(target.read_text()).data()
    assert "Draft the migration plan." in [m["text"] for m in data["details"]["messages"]]
    drawn = [n["id"] for n in data["graph"]["nodes"] if n["kind"] == "checkpoint"]
    assert sorted(data["details"]["checkpoints"]) == sorted(drawn)
    redacted = ok(run("session", "graph", "--all", "--format", "html", "--redact")).output
    assert "Draft the migration plan." not in redacted
