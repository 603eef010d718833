"""JSON lines (search hits, stream events, replayed turns) are printed by one function,
App.emit_line: one compact object a line, whatever the payload holds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agctl.cli.app import App, json_text

CLI = Path(__file__).resolve().parents[2] / "agctl" / "cli"


def test_emit_line_prints_one_object_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    app = App()
    app.emit_line({"type": "hit", "text": "two\nlines", "n": None})
    app.emit_line({1: "a non-string key"})
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [
        {"type": "hit", "text": "two\nlines", "n": None},
        {"1": "a non-string key"},
    ]
    assert lines[0] == '{"type":"hit","text":"two\\nlines","n":null}'


def test_a_name_that_is_not_utf8_is_escaped_not_a_traceback() -> None:
    name = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
    line = json_text({"file": name})
    assert "\n" not in line
    assert json.loads(line) == {"file": name}
    assert json.loads(json_text({"file": name}, indent=True)) == {"file": name}


def test_no_command_writes_json_by_hand() -> None:
    """Before: search and turn each called orjson.dumps and echoed the result. Only
    agctl/cli/output.py renders JSON."""
    written_by_hand = [
        f"{path.name}:{number}"
        for path in sorted(CLI.glob("*.py"))
        if path.name != "output.py"  # the one renderer
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\b(orjson|json)\.dumps?\(", line)
    ]
    assert written_by_hand == []
