"""Only the file backend's layout knows the data dir's paths (issue 12's seam, first
step): no other module joins a path with a literal name, or names one of its files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agctl.storage.file import layout

PACKAGE = Path(__file__).resolve().parents[3] / "agctl"
LAYOUT = PACKAGE / "storage" / "file" / "layout.py"
# Paths that are not in the data dir: the user's config file, the demo's own config, the
# demo's scratch files (in a temp dir of their own), a project's hooks file, a probe set's
# files (`eval probes --out DIR`), a project's MCP servers, the templates beside the config.
NOT_THE_DATA_DIR = {
    *("config.json", "demo-config.json", "script.json", "runs.log", "hooks.json"),
    *("transcript.jsonl", "probes.jsonl", "mcp.json", "templates"),
}
FILE_NAMES = {
    layout.SESSION,
    layout.LOCK,
    layout.CURRENT,
    layout.TURN_JOURNAL,
    layout.LEGACY_DRAFT,
    layout.HEADS,
    layout.REMOVED,
    layout.INDEX,
    layout.RESTORE_JOURNAL,
    layout.RESTORE_JOURNAL.rpartition("/")[2],
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def path_building(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            right = node.right
            if isinstance(right, ast.JoinedStr) or (
                isinstance(right, ast.Constant)
                and isinstance(right.value, str)
                and right.value not in NOT_THE_DATA_DIR
            ):
                found.append((node.lineno, ast.unparse(node)))
        elif (
            isinstance(node, ast.Constant)
            and node.value in FILE_NAMES
            and id(node) not in docstrings
        ):
            found.append((node.lineno, repr(node.value)))
    return found


def test_nothing_outside_the_layout_builds_a_data_dir_path() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {code}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != LAYOUT
        for line, code in path_building(path.read_text())
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "code",
    ['d / "slots"', 'd / f"{slot}.json"', 'open("heads.json")', 'name = "session.json"'],
)
def test_the_scan_sees_path_building(code: str) -> None:
    assert path_building(code)


def test_the_layout_is_todays_layout(tmp_path: Path) -> None:
    """The names are the ones data dirs already hold (a format guarantee)."""
    session = layout.session_dir(tmp_path, "s")
    assert session == tmp_path / "sessions" / "s"
    assert layout.session_document(session) == session / "session.json"
    assert layout.slot_document(session, "default") == session / "slots" / "default.json"
    assert layout.draft_document(session, "b") == session / "drafts" / "b.json"
    assert layout.checkpoint_log(session) == session / "checkpoints" / "log"
    assert layout.checkpoint_index(session) == session / "checkpoints" / "index.jsonl"
    assert layout.checkpoint_heads(session) == session / "checkpoints" / "heads.json"
    assert layout.removed_checkpoints(session) == session / "checkpoints" / "removed.json"
    assert layout.journal(session, layout.RESTORE_JOURNAL) == (
        session / "checkpoints" / "restoring.json"
    )
    assert layout.journal(session, layout.JOURNAL) == session / "journal"
    slot = layout.slot_document(session, "default")
    assert layout.slot_log(slot) == session / "slots" / "default.log"
    assert layout.current_pointer(tmp_path) == tmp_path / "current-session"
    assert layout.document_ids(["b.json", ".a.json.tmp", "a.json", "notes"]) == ["a", "b"]
