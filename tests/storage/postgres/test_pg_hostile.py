"""Hostile ids and values on PostgreSQL: quotes, backslashes, format markers, SQL, NUL,
RTL text, emoji and a 10 MB message round-trip exactly, through parameters only; ids
that are not ids are refused; a schema name that needs quoting works. A structural test
reads the backend's source: no statement is built by formatting values into it."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from backend_docs import snapshot, user
from pgserver import PgStore

import agctl.storage.postgres
from agctl.base.errors import InvalidId
from agctl.context.models import Draft, Message, Session, Slot
from agctl.providers.offline import OfflineProvider
from agctl.storage.postgres import schema as pg_schema
from agctl.storage.postgres.backend import PostgresBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.turn.send import TurnOptions, send_turn

MARKER = "DROP TABLE x"
HOSTILE = [
    "it's",
    'say "hi"',
    "back\\slash \\x00 \\\\",
    "%s %% %(name)s $1",
    "{s} {0} {{s}}",
    f"'); {MARKER}; --",
    "nul \x00 inside",
    "\u05e9\u05dc\u05d5\u05dd \u202eRTL override\u202c \u0645\u0631\u062d\u0628\u0627",
    "emoji \U0001f469\u200d\U0001f4bb \U0001f389 \U0001f3f3\ufe0f\u200d\U0001f308",
]
ALL_OF_THEM = " | ".join(HOSTILE)
OFFLINE = TurnOptions(model="offline")


class Statements:
    """Every statement the backend sends, as text, and every parameter it binds."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.params: list[Any] = []

    def record(self, query: Any, params: Any) -> None:
        if isinstance(query, bytes):
            text = query.decode()
        else:
            text = query if isinstance(query, str) else query.as_string(None)
        self.texts.append(text)
        self.params.extend(params or ())

    def bound(self, value: str) -> bool:
        encoded = value.encode()
        return any(
            (isinstance(p, bytes) and encoded in p) or (isinstance(p, str) and value in p)
            for p in self.params
        )


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Statements:
    seen = Statements()
    execute = psycopg.Cursor.execute

    def recording(self: Any, query: Any, params: Any = None, **options: Any) -> Any:
        seen.record(query, params)
        return execute(self, query, params, **options)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    return seen


def hostile_session(session_id: str = "s") -> tuple[Session, list[Slot]]:
    session = Session(
        id=session_id,
        title=ALL_OF_THEM,
        system_prompt=ALL_OF_THEM,
        memory={value: value for value in HOSTILE},
        x_note=HOSTILE,  # an unknown field, kept verbatim
    )
    slot = Slot(id="default", messages=[user(value) for value in HOSTILE])
    return session, [slot]


def test_hostile_values_round_trip_exactly_through_parameters_only(
    open_backend: Callable[..., PostgresBackend], statements: Statements
) -> None:
    backend = open_backend()
    session, slots = hostile_session()
    backend.create_session(session, slots)
    with backend.transaction("s") as tx:
        slot = tx.load_slot("s", "default")
        slot.messages.append(Message(role="assistant", content=ALL_OF_THEM, name="it's"))
        tx.append_messages(slot, 1)
        tx.put_slot(Slot(id="other", messages=[user(ALL_OF_THEM)]))
        tx.put_draft(Draft(prompt=ALL_OF_THEM, slot="default", error=ALL_OF_THEM))
        tx.checkpoint_log().append(lambda offset: ALL_OF_THEM.encode() + b"\n")
        tx.set_removed_checkpoints(["it's", "%s"])
        tx.write_cache("heads", ALL_OF_THEM.encode())

    fresh = open_backend()
    stored = snapshot(fresh)
    assert stored == snapshot(backend)
    loaded = fresh.load_session("s")
    assert (loaded.title, loaded.system_prompt) == (ALL_OF_THEM, ALL_OF_THEM)
    assert loaded.memory == {value: value for value in HOSTILE}
    assert loaded.model_dump()["x_note"] == HOSTILE
    texts = [m.text() for m in fresh.load_slot("s", "default").messages]
    assert texts == [*HOSTILE, ALL_OF_THEM]
    assert fresh.load_slot("s", "default").messages[-1].name == "it's"
    assert fresh.load_draft("s", "default").prompt == ALL_OF_THEM
    assert fresh.checkpoint_log("s").open().read() == ALL_OF_THEM.encode() + b"\n"
    assert fresh.removed_checkpoints("s") == {"it's", "%s"}
    assert fresh.cache("s", "heads") == ALL_OF_THEM.encode()
    # The values went to the server as parameters, and no statement's text holds one.
    assert statements.bound(ALL_OF_THEM) and statements.bound("it's")
    assert not any(MARKER in text or "nul \x00" in text for text in statements.texts)


def test_hostile_prompts_go_through_turns_and_checkpoints_exactly(
    open_backend: Callable[..., PostgresBackend],
) -> None:
    store = Store(backend=open_backend())
    store.create_session("s", title=ALL_OF_THEM, system_prompt=ALL_OF_THEM)
    for value in HOSTILE:
        send_turn(store, "s", value, OfflineProvider(), OFFLINE)
    live = store.load_slot("s").messages
    assert [m.text() for m in live if m.role == "user"] == HOSTILE
    checkpointer = Checkpointer(store)
    newest = checkpointer.load("s", checkpointer.ids("s")[0])
    assert checkpointer.state("s", newest).slots["default"].messages == live

    checkpointer.rollback("s", checkpointer.ids("s")[1])  # after the next-to-last turn
    again = Store(backend=open_backend())
    assert again.load_slot("s").messages == live[:-2]
    assert again.load_session("s").title == ALL_OF_THEM


def test_a_10_mb_message_round_trips_and_is_checkpointed(
    open_backend: Callable[..., PostgresBackend],
) -> None:
    big = ("x" * 1023 + "\x00") * 5 * 1024 + ALL_OF_THEM + "é" * (5 << 19)  # about 10 MB
    assert len(big.encode()) > 10_000_000
    store = Store(backend=open_backend())
    store.create_session("s")
    slot = store.load_slot("s")
    with store.transaction("s"):
        store.append_messages("s", slot, [user(big)])
    checkpointer = Checkpointer(store)
    kept = checkpointer.create("s", label="with the big one").id
    with store.transaction("s"):
        store.append_messages("s", store.load_slot("s"), [user("after")])

    checkpointer.rollback("s", kept)

    messages = Store(backend=open_backend()).load_slot("s").messages
    assert [m.text() for m in messages] == [big]


HOSTILE_IDS = [
    "it's",
    'a"b',
    "a\\b",
    "%s",
    "{s}",
    "'); DROP TABLE sessions; --",
    "nul\x00id",
    "a b",
    "../x",
    "\u202eabc",
    "\U0001f389",
    "",
]


@pytest.mark.parametrize("bad", HOSTILE_IDS, ids=range(len(HOSTILE_IDS)))
def test_hostile_ids_are_refused_and_nothing_is_stored(
    open_backend: Callable[..., PostgresBackend], statements: Statements, bad: str
) -> None:
    backend = open_backend()
    backend.create_session(Session(id="ok"), [Slot(id="default")])
    before = snapshot(backend, "ok")
    sent = len(statements.texts)
    attempts: list[Callable[[], object]] = [
        lambda: backend.create_session(Session(id=bad), [Slot(id="default")]),
        lambda: backend.create_session(Session(id="new"), [Slot(id=bad)]),
        lambda: backend.load_session(bad),
        lambda: backend.load_slot("ok", bad),
        lambda: backend.transaction(bad).__enter__(),
        lambda: backend.checkpoint_log(bad),
        lambda: backend.set_current_session(bad),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidId):
            attempt()
    assert len(statements.texts) == sent  # refused before a statement was sent
    with backend.transaction("ok") as tx:
        sent = len(statements.texts)
        for write in (
            lambda: tx.put_slot(Slot(id=bad)),
            lambda: tx.put_draft(Draft(prompt="p", slot=bad)),
            lambda: tx.delete_slot(bad),
        ):
            with pytest.raises(InvalidId):
                write()
        assert len(statements.texts) == sent
    assert backend.session_ids() == ["ok"]
    assert snapshot(backend, "ok") == before


def test_a_schema_name_that_needs_quoting_works(
    pg_store: PgStore, tmp_path: Path, statements: Statements
) -> None:
    schemas = ['team "a" b', "team 'b'; DROP SCHEMA x; --"]
    backends = [
        PostgresBackend(pg_store.dsn, schema=schema, local_dir=tmp_path / str(number))
        for number, schema in enumerate(schemas)
    ]
    try:
        stores = [Store(backend=backend) for backend in backends]
        for number, store in enumerate(stores):
            store.create_session(f"team-{number}")
            send_turn(store, f"team-{number}", "hello", OfflineProvider(), OFFLINE)
            store.set_current_session(f"team-{number}")
        for number, store in enumerate(stores):
            assert store.session_ids() == [f"team-{number}"]  # each team its own
            assert store.current_session_id() == f"team-{number}"
            assert len(Checkpointer(store).ids(f"team-{number}")) == 2
            assert store.backend.version() == pg_schema.VERSION  # type: ignore[attr-defined]
        with psycopg.connect(pg_store.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'team %%' ORDER BY 1"
            ).fetchall()
        assert [row[0] for row in rows] == sorted(schemas)
    finally:
        for backend in backends:
            backend.close()


# ---- the source: statements are constants, schemas identifiers, values parameters -------

EXECUTES = {"execute", "executemany", "copy"}
SOURCES = sorted(Path(agctl.storage.postgres.__file__).parent.glob("*.py"))


def _is_sql(node: ast.AST, kind: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == kind
    )


def _is_sql_identifier(node: ast.expr) -> bool:
    """sql.Identifier(...), or sql.Literal of one's text (nextval's sequence name)."""
    if _is_sql(node, "Identifier"):
        return True
    return _is_sql(node, "Literal") and any(
        _is_sql(inner, "Identifier") for inner in ast.walk(node)
    )


def _formatting(node: ast.expr) -> bool:
    """Whether an expression builds a string from parts: an f-string, % or + on strings,
    or str.format."""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.Add):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    )


def _function_params(tree: ast.Module) -> dict[ast.AST, set[str]]:
    params: dict[ast.AST, set[str]] = {}
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef):
            names = {a.arg for a in [*function.args.args, *function.args.kwonlyargs]}
            for inner in ast.walk(function):
                params.setdefault(inner, set()).update(names)
    return params


def unsafe_statements(source: str) -> list[str]:
    """The places in `source` where a statement could carry a value in its text."""
    tree = ast.parse(source)
    params = _function_params(tree)
    # Statements written out whole at module level (NAME = "SELECT ..."), never formatted.
    constants = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in EXECUTES and node.args:
            query = node.args[0]
            ok = (
                (isinstance(query, ast.Constant) and isinstance(query.value, str))
                or (  # a prepared text of the backend's: self._sql[name]
                    isinstance(query, ast.Subscript)
                    and isinstance(query.value, ast.Attribute)
                    and query.value.attr == "_sql"
                )
                or (  # schema.statement(text, schema): the schema as an identifier
                    isinstance(query, ast.Call)
                    and getattr(query.func, "id", getattr(query.func, "attr", "")) == "statement"
                    and not _formatting(query.args[0])
                )
                or (isinstance(query, ast.Name) and query.id in params.get(node, set()))
                or (isinstance(query, ast.Name) and query.id in constants)
            )
            if not ok:
                problems.append(f"line {node.lineno}: {ast.unparse(query)}")
        if name == "format" and isinstance(func, ast.Attribute):
            receiver = func.value
            via_sql = isinstance(receiver, ast.Call) and getattr(receiver.func, "attr", "") == "SQL"
            pieces = [*node.args, *(keyword.value for keyword in node.keywords)]
            if not via_sql or not all(_is_sql_identifier(piece) for piece in pieces):
                problems.append(f"line {node.lineno}: {ast.unparse(node)}")
        if name == "SQL" and node.args and _formatting(node.args[0]):
            problems.append(f"line {node.lineno}: {ast.unparse(node)}")
    return problems


def statement_texts() -> Iterator[str]:
    from agctl.storage.postgres import statements

    yield from statements.SQL.values()
    yield pg_schema.META
    for _, texts in pg_schema.MIGRATIONS:
        yield from texts


def test_no_statement_of_the_backend_is_built_by_formatting_values() -> None:
    assert [path.name for path in SOURCES] == [
        "__init__.py",
        "backend.py",
        "connection.py",
        "listing.py",
        "log.py",
        "migrations.py",
        "reads.py",
        "schema.py",
        "statements.py",
        "tx.py",
    ]
    for path in SOURCES:
        assert unsafe_statements(path.read_text()) == [], path.name
    for text in statement_texts():
        # Placeholders are %s only; {s} (the schema) and {revs} (its sequence) the fields.
        fields = text.replace("{s}", "").replace("{revs}", "").replace("'{{}}'", "")
        assert "{" not in fields, text
        assert "'{s}" not in text, text  # the identifier never inside a string literal
        assert "%" not in text.replace("%s", ""), text


def test_the_structural_check_catches_values_formatted_into_statements() -> None:
    bad = textwrap.dedent(
        """
        def load(conn, session_id, schema):
            conn.execute(f"SELECT doc FROM sessions WHERE id = '{session_id}'")
            conn.execute("SELECT doc FROM sessions WHERE id = '%s'" % session_id)
            conn.execute("SELECT doc FROM s WHERE id = '{}'".format(session_id))
            conn.execute("SELECT doc FROM s WHERE id = '" + session_id + "'")
            query = "SELECT " + session_id
            conn.execute(query)
            conn.execute(sql.SQL("SELECT {v}").format(v=sql.Literal(session_id)))
            conn.execute(sql.SQL(f"SELECT {session_id}"))
        """
    )
    flagged = {int(problem.split(":")[0].split()[1]) for problem in unsafe_statements(bad)}
    assert flagged == {3, 4, 5, 6, 8, 9, 10}
    good = "def f(conn, x):\n    conn.execute('SELECT %s', [x])\n"
    assert unsafe_statements(good) == []
