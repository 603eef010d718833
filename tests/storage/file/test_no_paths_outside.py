"""No test pokes the data dir's files but the file backend's own (issue 12): a test of the
library or the CLI that builds a path into the data dir is tied to today's layout and
cannot run over another backend.

The file backend's tests (tests/storage/) and the tests of real processes (tests/process/:
kill -9, races, planted files, hostile documents) poke files on purpose. tests/helpers.py
is the one helper that knows where things are, from agctl/storage/file/layout.py (the
byte-for-byte "nothing was written" check, data_dir_files, and draft_file).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agctl.storage.file import layout

TESTS = Path(__file__).resolve().parents[2]
MAY_POKE = (TESTS / "storage", TESTS / "process")
HELPERS = TESTS / "helpers.py"
# The names of the data dir's files: one of them in a string is a path into it.
FILE_NAMES = {
    layout.SESSION,
    layout.LOCK,
    layout.CURRENT,
    layout.JOURNAL,
    layout.TURN_JOURNAL,
    layout.LEGACY_DRAFT,
    layout.HEADS,
    layout.REMOVED,
    layout.INDEX,
    layout.RESTORE_JOURNAL.rpartition("/")[2],
}
# Its folders: a path when joined with `/` or inside a string with a slash; a bare "slots"
# is also a key of the export and diff documents, so it alone is not one.
FOLDERS = {layout.SESSIONS, layout.SLOTS, layout.DRAFTS, layout.CHECKPOINTS}
# The file Store's and the helpers' ways to a session's folder.
PATH_FUNCTIONS = {"session_dir", "sessions_dir", "checkpoints_dir"}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def _joins_a_folder(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Div)
        and isinstance(node.right, ast.Constant)
        and node.right.value in FOLDERS
    )


def _names_a_path_function(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id in PATH_FUNCTIONS) or (
        isinstance(node, ast.Attribute) and node.attr in PATH_FUNCTIONS
    )


def _imports_the_layout(node: ast.AST) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == layout.__name__


def data_dir_paths(source: str) -> list[tuple[int, str]]:
    """(line, code) of every place the source builds a path into the data dir."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            # A path has two names at least: "/slots" alone is the chat's command.
            parts = {part for part in node.value.split("/") if part}
            if id(node) not in docstrings and (
                node.value in FILE_NAMES or (len(parts) > 1 and parts & (FILE_NAMES | FOLDERS))
            ):
                found.append((node.lineno, repr(node.value)))
        elif _joins_a_folder(node) or _names_a_path_function(node) or _imports_the_layout(node):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(set(found))


def scanned() -> list[Path]:
    return [
        path
        for path in sorted(TESTS.rglob("*.py"))
        if path != HELPERS and not any(path.is_relative_to(d) for d in MAY_POKE)
    ]


def test_no_test_outside_the_file_backends_own_pokes_its_files() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line}: {code}"
        for path in scanned()
        for line, code in data_dir_paths(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_the_scan_covers_the_library_and_cli_tests() -> None:
    folders = {path.parent.name for path in scanned()}
    assert {"lib", "cli"} <= folders
    assert TESTS / "conftest.py" in scanned()


@pytest.mark.parametrize(
    "code",
    [
        'root / "sessions" / sid',
        'directory / "slots" / f"{slot}.json"',
        'store.session_dir(sid) / "x"',
        "store.sessions_dir.iterdir()",
        'checkpoints_dir(store, sid) / "log"',
        'after.pop("sessions/s/drafts/default.json")',
        'docs["slots/default.json"]',
        'p.name not in (".lock", "journal")',
        'open("heads.json")',
        '(data_dir / "current-session").read_text()',
        "from agctl.storage.file.layout import RESTORE_JOURNAL",
    ],
)
def test_the_scan_sees_a_path_into_the_data_dir(code: str) -> None:
    assert data_dir_paths(code)


@pytest.mark.parametrize(
    "code",
    [
        'diff["slots"]["changed"]',
        'document["checkpoints"]',
        'tmp_path / "log"',
        'tmp_path / "out" / "export.json"',
        "data_dir_files(store.root, sid)",
        "from agctl.storage.file.backend import FileLog",
        'def f():\n    """Every file in session.json and slots/."""',
        'chat.handle("/slots")',
    ],
)
def test_the_scan_lets_other_paths_and_keys_be(code: str) -> None:
    assert data_dir_paths(code) == []
