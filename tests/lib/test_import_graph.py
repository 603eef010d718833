"""The house is a stack (ARCHITECTURE.md): no module imports one above it, and only the
file backend (and TAB completion, for speed) knows the data dir's layout. A type is a
dependency: an import under `if TYPE_CHECKING:` ties two modules as one that runs does."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "agctl"
# Above storage/file/, who may import it: the facade, the factory that opens the chosen
# backend, the doctor that runs the file backend's checks, TAB completion (the layout,
# fast) and the PostgreSQL backend, which keeps its current-session pointer in this
# machine's data dir (the layout's store_pointer).
# TAB completion and a shared store's listing read the data dir's layout directly; the
# drafts a shared store could not take, and the price sheets, are kept in the local data dir.
LAYOUT_USERS = {
    "agctl.cli.complete",
    "agctl.storage.postgres.listing",
    "agctl.storage.local_drafts",
    "agctl.context.price_sheets",
    # The chat's history of each session, on this machine (the facade removes a
    # destroyed session's).
    "agctl.chat.lines",
    "agctl.store.facade",
}
FILE_BACKEND_USERS = {
    "agctl.store.facade",
    "agctl.storage.factory",
    "agctl.reports.checkup",
    *LAYOUT_USERS,
}


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph(package: Path = PACKAGE, *, typing_imports: bool = True) -> dict[str, set[str]]:
    """Module -> the agctl modules it imports, at any depth of the file (an import inside
    a function still ties the two); with `typing_imports`, those under `if TYPE_CHECKING:` too,
    since a type is a dependency (without, the graph of what runs)."""
    known = modules(package)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        typing_only = (
            set()
            if typing_imports
            else {
                id(sub)
                for node in ast.walk(tree)
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                for sub in ast.walk(node)
            }
        )
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                submodules = [f"{node.module}.{a.name}" for a in node.names]
                if all(sub in known for sub in submodules):
                    graph[name].update(submodules)
                elif node.module in known:
                    graph[name].add(node.module)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name in known)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def closing_edges(graph: dict[str, set[str]], loop: set[str]) -> list[tuple[str, str]]:
    """The edges that lead back to a module on the path of a depth-first walk of the loop,
    started from the module the most of the loop import (the one they climb back to):
    without them its modules form no loop."""
    importers = {name: sum(name in graph[other] for other in loop) for name in loop}
    closing: list[tuple[str, str]] = []
    done: set[str] = set()
    path: list[str] = []

    def walk(node: str) -> None:
        path.append(node)
        for other in sorted(graph[node] & loop):
            if other in path:
                closing.append((node, other))
            elif other not in done:
                walk(other)
        path.pop()
        done.add(node)

    for start in sorted(loop, key=lambda name: (-importers[name], name)):
        if start not in done:
            walk(start)
    return sorted(closing)


def described(loop: set[str]) -> str:
    """A loop's modules and the edges that close it, each marked when only a type needs it."""
    run_time = import_graph(typing_imports=False)
    edges = [
        f"  {importer} -> {imported}" + ("" if imported in run_time[importer] else " (type only)")
        for importer, imported in closing_edges(import_graph(), loop)
    ]
    return "\n".join([f"loop of {len(loop)}: {', '.join(sorted(loop))}; closed by", *edges])


def test_the_import_graph_has_no_cycle_type_only_imports_counted() -> None:
    """A type is a dependency: the rules once took `store: Store` (imported for its type
    only) while the facade forwarded to them, one knot of 14 modules (issue 26)."""
    loops = cycles(import_graph())
    assert not loops, "\n".join(described(loop) for loop in loops)


def test_nothing_that_runs_imports_in_a_loop() -> None:
    """Before the storage seam: store, turns, compress and drafts imported each other
    (recovery from two operation journals ran inside Store.lock)."""
    assert cycles(import_graph(typing_imports=False)) == []


def test_only_the_file_backend_knows_the_layout() -> None:
    graph = import_graph()
    inside = "agctl.storage.file"
    users = {
        name
        for name, targets in graph.items()
        if not name.startswith(inside) and any(t.startswith(inside) for t in targets)
    }
    assert users <= FILE_BACKEND_USERS, users - FILE_BACKEND_USERS
    layout_users = {
        name
        for name, targets in graph.items()
        if not name.startswith(inside) and f"{inside}.layout" in targets
    }
    assert layout_users == LAYOUT_USERS


def test_storage_knows_nothing_of_the_domain() -> None:
    """Nothing in storage/ knows what a turn, a checkpoint or a compression is."""
    graph = import_graph()
    domain = (
        "agctl.turn.send",
        "agctl.store.checkpoints",
        "agctl.turn.compress",
        "agctl.turn.merge",
        "agctl.store.facade",
        "agctl.store.sessions",
        "agctl.store.slots",
        "agctl.store.drafts",
        "agctl.turn.transcripts",
        "agctl.cli",
    )
    offenders = {
        name: sorted(t for t in targets if t.startswith(domain))
        for name, targets in graph.items()
        if name.startswith("agctl.storage")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_library_never_imports_the_command_line() -> None:
    graph = import_graph()
    offenders = {
        name: sorted(t for t in targets if t == "agctl.cli" or t.startswith("agctl.cli."))
        for name, targets in graph.items()
        if not (name == "agctl.cli" or name.startswith("agctl.cli."))
        and name != "agctl.__main__"  # `python -m agctl` runs the command line
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_checkpoints_package_is_a_stack_under_its_init() -> None:
    """Its __init__ only re-exports: a module of the package importing it back would tie
    the package into a knot (ARCHITECTURE.md: records at the bottom)."""
    graph = import_graph()
    inside = {name for name in graph if name.startswith("agctl.store.checkpoints.")}
    assert "agctl.store.checkpoints.records" in inside
    assert {name for name in inside if "agctl.store.checkpoints" in graph[name]} == set()
    assert {
        t
        for t in graph["agctl.store.checkpoints.records"]
        if t.startswith("agctl.store.checkpoints")
    } == set()


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_the_edges_that_close_a_loop_are_named() -> None:
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": {"b"}, "e": {"a"}}
    assert closing_edges(graph, {"a", "b", "c", "d"}) == [("a", "b"), ("d", "b")]


def test_a_type_only_import_ties_two_modules(tmp_path: Path) -> None:
    package = tmp_path / "agctl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from agctl.b import B\n"
    )
    (package / "b.py").write_text("def f():\n    import agctl.a\n")
    assert cycles(import_graph(package)) == [{"agctl.a", "agctl.b"}]
    assert cycles(import_graph(package, typing_imports=False)) == []


# Above the store's facade: the modules that may take a Store (a turn and its loop,
# interchange, reports, evaluations, the server, the graph and pages, the chat, the CLI,
# and the facade itself).
ABOVE_THE_FACADE = (
    "agctl.turn",
    "agctl.chat",
    "agctl.evals",
    "agctl.serve",
    "agctl.interchange",
    "agctl.reports",
    "agctl.graph",
    "agctl.pages",
    "agctl.cli",
    "agctl.store.facade",
    "agctl.store.checkpointer",
)


def names_the_store(path: Path) -> bool:
    """Whether a module imports the Store, for its type or to use it."""
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module in {"agctl", "agctl.store", "agctl.store.facade"}
        and any(alias.name == "Store" for alias in node.names)
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_only_what_stands_above_the_facade_names_the_store() -> None:
    """The rules below it take the unit of work, the backend or a reader (issue 26: 125
    `store: Store` parameters in 32 modules had the rules call back up into it)."""
    naming = {name for name, path in modules().items() if names_the_store(path)}
    faces = {"agctl", "agctl.store"}  # `from agctl import Store`, re-exported
    below = {name for name in naming - faces if not name.startswith(ABOVE_THE_FACADE)}
    assert below == set()
    assert "agctl.turn.send" in naming  # the check sees a Store where there is one
