"""Session trees: tree, children, parent, orphans."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import Result

Run = Callable[..., Result]


@pytest.fixture
def family(run: Run) -> None:
    for args in (
        ("root", "--title", "Root"),
        ("a", "--parent", "root", "--no-use"),
        ("b", "--parent", "root", "--no-use"),
        ("c", "--parent", "a", "--no-use"),
        ("lone", "--no-use"),
    ):
        assert run("session", "new", *args).exit_code == 0


def test_tree_draws_the_hierarchy(run: Run, family: None) -> None:
    assert run("session", "tree").stdout.splitlines() == [
        "* root  (Root)",
        "├── a",
        "│   └── c",
        "└── b",
        "lone",
    ]
    assert run("session", "tree", "a").stdout.splitlines() == ["a", "└── c"]


def test_tree_json_is_nested(run: Run, family: None) -> None:
    forest = json.loads(run("session", "tree", "--json").stdout)
    assert [t["id"] for t in forest] == ["root", "lone"]
    root = forest[0]
    assert [c["id"] for c in root["children"]] == ["a", "b"]
    assert root["children"][0]["children"][0] == {
        "id": "c",
        "title": None,
        "orphan": False,
        "looped": False,
        "current": False,
        "children": [],
    }
    assert json.loads(run("session", "tree", "a", "--json").stdout)["id"] == "a"


def test_children_and_parent(run: Run, family: None) -> None:
    assert run("session", "children", "root").stdout == "a\nb\n"
    assert json.loads(run("session", "children", "lone", "--json").stdout) == []
    assert run("session", "parent", "c").stdout == "a\n"
    assert json.loads(run("session", "parent", "root", "--json").stdout) == {"parent": None}


def test_orphans_after_their_parent_is_destroyed(run: Run, family: None) -> None:
    refused = run("session", "rm", "a")
    assert refused.exit_code == 4 and "children: c" in refused.stderr
    done = json.loads(run("session", "rm", "a", "--orphan", "--json").stdout)
    assert done == {"destroyed": ["a"], "orphaned": ["c"]}
    assert run("session", "parent", "c").stdout == ""
    assert "c  (orphan)" in run("session", "tree").stdout.splitlines()
    listing = {r["id"]: r for r in json.loads(run("session", "list", "--json").stdout)}
    assert listing["c"]["orphan"] is True and listing["c"]["parent_id"] == "a"


def test_recursive_destroy_takes_the_subtree(run: Run, family: None) -> None:
    done = json.loads(run("session", "rm", "root", "--recursive", "--json").stdout)
    assert sorted(done["destroyed"]) == ["a", "b", "c", "root"]
    assert run("session", "tree").stdout == "lone\n"
