"""`agctl session graph`: the wiring — formats, locale, -o FILE, --json, the Mermaid size
warning, and the errors (the drawing itself is tests/lib/graph/test_render.py's)."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import fails_with_message, ok

from agctl.graph.document import GraphDocument
from agctl.store import Store
from tests.graph_scenario import build_scenario

Run = Callable[..., Result]


@pytest.fixture
def scenario(store: Store) -> dict[str, str]:
    return build_scenario(store)


@pytest.mark.usefixtures("scenario")
def test_text_lanes_in_a_utf8_locale_and_ascii_otherwise(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.delenv("LC_CTYPE", raising=False)
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    drawn = ok(run("session", "graph")).stdout
    assert drawn.startswith("*─┬─╮ consult Consultation\n")
    assert "╭─◆" in drawn
    monkeypatch.setenv("LANG", "C")
    assert ok(run("session", "graph")).stdout.isascii()
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    ascii_drawn = ok(run("session", "graph", "--ascii")).stdout
    assert ascii_drawn.isascii() and ascii_drawn.startswith("*-+-. consult")


@pytest.mark.usefixtures("scenario")
def test_json_is_the_model_and_matches_its_schema(run: Run) -> None:
    model = json.loads(ok(run("session", "graph", "--all", "--checkpoints", "--json")).stdout)
    assert model == json.loads(
        ok(run("session", "graph", "--all", "--checkpoints", "--format", "json")).stdout
    )
    GraphDocument.model_validate(model)
    schema = json.loads(ok(run("schema", "graph")).stdout)
    assert {"version", "current", "nodes", "edges"} <= set(schema["properties"])


@pytest.mark.usefixtures("scenario")
def test_mermaid_and_dot_on_stdout(run: Run) -> None:
    mermaid = ok(run("session", "graph", "--format", "mermaid")).stdout
    assert mermaid.splitlines()[:2] == ["%% agctl session graph v1", "flowchart LR"]
    drawn = ok(run("session", "graph", "what-if", "--format", "dot")).stdout
    assert drawn.startswith('digraph "agctl session graph v1" {')
    assert '"cluster_0"' in drawn and '"cluster_1"' not in drawn


@pytest.mark.usefixtures("scenario")
def test_output_file_is_written_whole_and_private(run: Run, tmp_path: Path) -> None:
    target = tmp_path / "graph.dot"
    result = ok(run("session", "graph", "--format", "dot", "-o", str(target)))
    assert result.stdout == f"wrote {target} (dot, 10 nodes)\n"
    assert target.read_text().startswith("digraph")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name != "graph.dot" and p.name != "data"]
    report = json.loads(ok(run("session", "graph", "-o", str(target), "--json")).stdout)
    assert report == {"file": str(target), "format": "text", "nodes": 10, "edges": 6}
    assert target.read_text().startswith("*")


@pytest.mark.usefixtures("scenario")
def test_output_is_the_users_file_as_every_other_o_writes_it(run: Run, tmp_path: Path) -> None:
    """Through a link (as to /dev/stdout) into the file it names; a file of theirs keeps
    its mode (as `msg export -o` and `session export -o` do)."""
    target = tmp_path / "picture.mmd"
    target.write_text("old")
    target.chmod(0o644)
    link = tmp_path / "latest.mmd"
    link.symlink_to(target)
    ok(run("session", "graph", "--format", "mermaid", "-o", str(link)))
    assert link.is_symlink()
    assert target.read_text().startswith("%% agctl session graph v1")
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_mermaid_past_its_limit_warns_and_suggests_html(
    run: Run, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_scenario(store)
    monkeypatch.setattr("agctl.graph.mermaid.MAX_TEXT", 500)
    result = ok(run("session", "graph", "--format", "mermaid"))
    assert result.stdout.startswith("%% agctl session graph v1")
    assert "agctl: warning: the Mermaid graph has" in result.stderr
    assert "past Mermaid's default limit of 500" in result.stderr
    assert "--format html" in result.stderr
    assert ok(run("session", "graph", "--format", "dot")).stderr == ""


def test_errors_name_what_to_give(run: Run, store: Store) -> None:
    store.create_session("lone")
    store.set_current_session(None)
    fails_with_message(run("session", "graph"), 2, "session")
    fails_with_message(run("session", "graph", "lone", "--all"), 2, "not both")
    fails_with_message(run("session", "graph", "nothing"), 3, "nothing")
    assert "lone" in ok(run("session", "graph", "--all")).stdout
