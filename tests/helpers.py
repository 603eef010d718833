"""Helpers the tests share that are not fixtures: documents as a store reads them, the data
dir's bytes (what "nothing was written" compares), where the file backend keeps things
(for its own tests, which poke files on purpose), the checks of a CLI result and the small
sessions, turns and drafts several test files build. The tests outside tests/storage/ and
tests/process/ learn the layout from here only (tests/storage/file/test_no_paths_outside.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import agctl
from agctl.base.errors import AgctlError, ProviderError
from agctl.config.specs import ToolSpec
from agctl.context.models import (
    ContextBudget,
    Draft,
    Message,
    Session,
    Slot,
    ToolCall,
    ToolCallFunction,
)
from agctl.context.tokens import MESSAGE_OVERHEAD, estimate_text
from agctl.providers.base import (
    ChatRequest,
    Event,
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from agctl.providers.offline import OfflineProvider, ScriptedReply
from agctl.storage.file import layout
from agctl.storage.memory import MemoryBackend
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import SessionState
from agctl.store.sessions import SessionNode
from agctl.turn.send import TurnOptions, TurnResult, send_turn
from agctl.turn.steps import CallRecord


def checkpoints_dir(store: Store, session_id: str) -> Path:
    """The file backend's folder of a session's checkpoint log and caches."""
    return layout.checkpoints_dir(store.session_dir(session_id))


def stored_documents(where: Store | Path, session_id: str) -> dict[str, Any]:
    """The session document and every slot, as the store reads them (parsed, without
    the backend's revisions), keyed "session" and "slot:<id>"."""
    store = where if isinstance(where, Store) else Store(where)
    documents = {"session": store.load_session(session_id).model_dump(mode="json")}
    for slot in store.list_slots(session_id):
        documents[f"slot:{slot.id}"] = slot.model_dump(mode="json")
    return documents


def data_dir_files(root: Path, session_id: str | None = None) -> dict[str, bytes]:
    """Every file of a data dir (or of one session in it) as bytes, by its path relative to
    the data dir: taking the lock or emptying the redo journal writes no data, so they are
    left out."""
    top = root if session_id is None else layout.session_dir(root, session_id)
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(top.rglob("*"))
        if path.is_file() and path.name not in (layout.LOCK, layout.JOURNAL)
    }


# A library test that also needs the data dir (it runs the command line or a child process
# over it, or compares its bytes) runs over the file store alone (tests/lib/conftest.py).
file_only = pytest.mark.parametrize("store", ["file"], indirect=True)


def draft_file(session_id: str, slot_id: str = "default") -> str:
    """The key of a slot's draft among data_dir_files."""
    return layout.draft_document(layout.session_dir(Path(), session_id), slot_id).as_posix()


class ProcessDied(BaseException):
    """A death runs no handler (an exception would, and a handler might finish the work)."""


@contextlib.contextmanager
def dying_after_one_change() -> Iterator[None]:
    """The next commit of the file backend dies after its commit point, with only the
    first of its changes applied: what kill -9 at that moment leaves."""
    from agctl.storage.file.journal import Journal

    original = Journal._apply
    applied: list[object] = []

    def dies(self: Journal, op: list[Any], temp: Path | None) -> None:
        if applied:
            raise ProcessDied
        applied.append(op)
        original(self, op, temp)

    Journal._apply = dies  # type: ignore[method-assign]
    try:
        with pytest.raises(ProcessDied):
            yield
    finally:
        Journal._apply = original  # type: ignore[method-assign]


# ---- results of the command line (the `run` fixture) -------------------------------------

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT, EXIT_DATA, EXIT_PROVIDER = range(7)


def ok(result: Result) -> Result:
    """Assert success with no traceback on stderr (a hint may stand there)."""
    assert result.exit_code == EXIT_OK, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def exited_zero(result: Result) -> Result:
    """Assert the exit code 0 alone, whatever stderr says."""
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def fails(result: Result, code: int, *needles: str) -> Result:
    """A clean failure: the exit code, agctl's message on stderr (after the lines of the
    tool calls the turn answered, if any), nothing on stdout."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.strip() and "Traceback" not in result.stderr
    if code != EXIT_USAGE:  # usage errors may come from Click itself
        lines = result.stderr.splitlines(keepends=True)
        while lines and lines[0].startswith("tool ") and " → " in lines[0]:
            lines.pop(0)
        assert "".join(lines).startswith("agctl: error: "), result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
    return result


def fails_with_message(result: Result, code: int, *needles: str) -> Result:
    """A clean failure whatever its message starts with: the code, a message on stderr,
    nothing on stdout."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.strip(), "an error must say what went wrong"
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr
    return result


def as_json(result: Result) -> Any:
    """The stdout of a successful run, parsed."""
    return json.loads(ok(result).stdout)


def send(run: Callable[..., Result], prompt: str, *args: str) -> dict[str, Any]:
    """`agctl turn send PROMPT --json`, its report parsed."""
    result: dict[str, Any] = as_json(run("turn", "send", prompt, "--json", *args))
    return result


def turns_with_checkpoints(
    run: Callable[..., Result], data_dir: Path, session_id: str
) -> dict[int, tuple[str, dict[str, Any]]]:
    """Three turns sent on the command line: turn number -> (its checkpoint id, the
    documents after it)."""
    seen = {}
    for number in range(1, 4):
        result = send(run, f"prompt {number}")
        assert result["turn"] == number
        seen[number] = (result["checkpoint"], stored_documents(data_dir, session_id))
    return seen


def session_with_history(run: Callable[..., Result]) -> None:
    """Session "s" with three turns, a labelled checkpoint and a message after them."""
    exited_zero(run("session", "new", "s"))
    for text in ("one", "two", "three"):
        exited_zero(run("turn", "send", text))
    exited_zero(run("ckpt", "create", "--label", "mine"))
    exited_zero(run("msg", "append", "user", "after the checkpoints"))


def new_first_session(run: Callable[..., Result]) -> str:
    """A current session 's1' with a system prompt and an empty default slot."""
    ok(run("session", "new", "s1", "--system", "Be terse.", "--title", "First"))
    return "s1"


def append_four_messages(run: Callable[..., Result]) -> None:
    """Four messages, user and assistant in turn, in the current session's default slot."""
    for role, text in [
        ("user", "u0"),
        ("assistant", "a1"),
        ("user", "u2"),
        ("assistant", "a3"),
    ]:
        ok(run("msg", "append", role, text))


# ---- the store directly ---------------------------------------------------------------


def user(text: str) -> Message:
    return Message(role="user", content=text)


def append(store: Store, sid: str, text: str, slot: str | None = None) -> int:
    return store.update_slot(sid, slot, lambda s: s.append(user(text)))


def texts(store: Store, sid: str, slot: str | None = None) -> list[str]:
    return [m.text() for m in store.load_slot(sid, slot).messages]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def make_family(store: Store) -> Store:
    """root -> a -> c, root -> b, and lone; root is the current session."""
    store.create_session("root", title="Root")
    store.create_session("a", parent_id="root")
    store.create_session("b", parent_id="root")
    store.create_session("c", parent_id="a")
    store.create_session("lone")
    store.set_current_session("root")
    return store


ForestShape = list[tuple[str, "ForestShape"]]


def forest_shape(nodes: list[SessionNode]) -> ForestShape:
    """A session forest as (id, children) pairs, to compare with a literal."""
    return [(n.id, forest_shape(n.children)) for n in nodes]


# ---- turns, drafts and checkpoints of session "s" ---------------------------------------

SID = "s"


def served_env(base_url: str) -> dict[str, str]:
    """This process's environment for a real agctl that talks to the fake server at
    `base_url` (no OpenAI key or setting of the user's leaks in)."""
    import os

    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    environ.update(
        AGCTL_PROVIDER="openai",
        AGCTL_BASE_URL=base_url,
        AGCTL_MODEL="fake-model",
        PYTHONIOENCODING="utf-8",
    )
    return environ


def agctl_in(
    env: dict[str, str], *args: str, session: str = SID, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """A real `python -m agctl -s SESSION ARGS...` with `env`, stdin empty, output kept."""
    return subprocess.run(
        [sys.executable, "-m", "agctl", "-s", session, *args],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


class BrokenProvider:
    """A provider that fails before its first token: the turn keeps a draft."""

    name = "broken"

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        raise ProviderError("down")
        yield TextDelta("")  # pragma: no cover


def fail_turn(store: Store, prompt: str, slot: str | None = None) -> Draft:
    """A turn that fails, and the draft it leaves."""
    with pytest.raises(ProviderError):
        send_turn(store, SID, prompt, BrokenProvider(), TurnOptions(model="offline", slot=slot))
    return store.load_draft(SID, slot or "default")


def succeed_turn(store: Store, prompt: str, slot: str | None = None) -> None:
    send_turn(store, SID, prompt, OfflineProvider(), TurnOptions(model="offline", slot=slot))


def turn(store: Store, prompt: str, *, sid: str = SID, checkpoint: bool = True) -> TurnResult:
    options = TurnOptions(model="offline", checkpoint=checkpoint)
    return send_turn(store, sid, prompt, OfflineProvider(), options)


def documents(where: Store | Path, sid: str = SID) -> dict[str, Any]:
    """The session document and every slot, parsed (see stored_documents)."""
    return stored_documents(where, sid)


def dumped(state: SessionState) -> dict[str, Any]:
    return {
        "session": state.session.model_dump(mode="json"),
        "slots": {slot_id: slot.model_dump(mode="json") for slot_id, slot in state.slots.items()},
    }


def dumped_live(store: Store, sid: str = SID) -> dict[str, Any]:
    """The session's live state, dumped as a checkpoint's is."""
    return dumped(Checkpointer(store).live_state(sid))


def dumped_at(store: Store, identifier: str, sid: str = SID) -> dict[str, Any]:
    """The state a checkpoint holds, dumped."""
    keeper = Checkpointer(store)
    return dumped(keeper.state(sid, keeper.load(sid, identifier)))


def add_said(store: Store, session_id: str, *texts: str, slot: str | None = None) -> None:
    """Append `texts` to a slot, user and assistant in turn."""
    messages = [
        Message(role="user" if i % 2 == 0 else "assistant", content=text)
        for i, text in enumerate(texts)
    ]
    store.update_slot(session_id, slot, lambda s: s.extend(messages))


def searched_sessions(store: Store) -> Store:
    """Three sessions to search: "hello" in two slots of a-session (one immutable zone)
    and in b-session, none in c-session."""
    for sid in ("b-session", "a-session", "c-session"):
        store.create_session(sid)
    add_said(store, "a-session", "hello world", "nothing", "HELLO again")
    store.create_slot("a-session", "plan", immutable=[Message(role="system", content="hello ro")])
    add_said(store, "a-session", "a plan: hello", slot="plan")
    add_said(store, "b-session", "bye", "say hello")
    return store


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    """Wait (boundedly) for `condition`, a handshake a real process gives: a file, a line."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def process_dead(pid: int) -> bool:
    """Whether process `pid` is gone, or a zombie no one has reaped yet (it runs nothing
    any more; a container's PID 1 may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


@dataclass
class FakePostgres:
    """What stands in for agctl.storage.postgres while it is written beside this work: the
    sessions of each (DSN, schema) in one MemoryBackend shared by the commands of a test,
    every opening recorded, and an error to raise instead when `refuse` is set."""

    opened: list[dict[str, Any]] = field(default_factory=list)
    databases: dict[tuple[str, str], MemoryBackend] = field(default_factory=dict)
    refuse: AgctlError | None = None
    closed: int = 0  # how many times a backend was closed (its connections released)

    def backend(
        self,
        dsn: str,
        *,
        schema: str,
        local_dir: Path,
        auto_migrate: bool = True,
        connect_patience: float | None = None,
        shared_owner: str | None = None,
    ) -> MemoryBackend:
        self.opened.append({"dsn": dsn, "schema": schema, "local_dir": local_dir})
        if self.refuse is not None:
            raise self.refuse
        return self.databases.setdefault((dsn, schema), _ClosingBackend(self))


class _ClosingBackend(MemoryBackend):
    """A MemoryBackend that counts its close() calls, as PostgresBackend has one."""

    def __init__(self, fake: FakePostgres) -> None:
        super().__init__()
        self.fake = fake

    def close(self) -> None:
        self.fake.closed += 1


def install_fake_postgres(monkeypatch: pytest.MonkeyPatch) -> FakePostgres:
    """Make `import agctl.storage.postgres.backend` give a FakePostgres's PostgresBackend
    (the factory imports it by that name, after psycopg, which is installed)."""
    fake = FakePostgres()
    package = types.ModuleType("agctl.storage.postgres")
    package.__path__ = []
    module = types.ModuleType("agctl.storage.postgres.backend")
    module.PostgresBackend = fake.backend  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agctl.storage.postgres", package)
    monkeypatch.setitem(sys.modules, "agctl.storage.postgres.backend", module)
    return fake


# A message that tries to leave the page it is shown in (a script, a comment, an attribute,
# a bidi override that would flip what follows, a NUL).
HOSTILE_TEXT = (
    '</script><script>window.pwned = 1; document.title = "pwned"</script>'
    '<!-- <img src=x onerror="window.pwned = 2"> ]]> \u202eevil\u2028\u2029\0 \'q\' "qq" &amp;'
)


def conversation_with_tools(store: Store, sid: str = SID) -> str:
    """A session whose default slot holds a system prompt, the hostile message, an assistant
    tool call, its result and an answer: what the pages must show, fold and keep as text."""
    from agctl.context.models import ToolCall, ToolCallFunction

    store.create_session(sid, system_prompt="You are terse.")
    call = ToolCall(id="call_1", function=ToolCallFunction(name="lookup", arguments='{"q": "x"}'))
    messages = [
        user(HOSTILE_TEXT),
        Message(role="assistant", content=None, tool_calls=[call]),
        Message(role="tool", tool_call_id="call_1", content="lookup said: forty-two"),
        Message(role="assistant", content="The answer is forty-two."),
    ]
    store.update_slot(sid, None, lambda slot: slot.extend(messages))
    return sid


# ---- shared by the library's tests (tests/lib/) --------------------------------------


def msg(role: str, content: str) -> Message:
    return Message.model_validate({"role": role, "content": content})


def add(store: Store, sid: str, slot: str | None, *messages: Message) -> None:
    store.update_slot(sid, slot, lambda s: s.messages.extend(messages))


def dumps(messages: list[Message]) -> list[dict[str, object]]:
    return [m.model_dump(mode="json") for m in messages]


LONG = [
    "We need to decide how the storage layer writes JSON documents: atomically, with a "
    "temp file in the same directory, an fsync, a rename and a directory fsync after it.",
    "Agreed. The lock should be a separate .lock file held across the whole "
    "read-modify-write, never the data file itself, so that readers never need a lock.",
    "What about checkpoints? Copying every slot on every turn is too slow once a session "
    "has a few thousand messages, so we want something proportional to the change only.",
    "Store messages content-addressed in an append-only log; a checkpoint is then a small "
    "record pointing at the tips of each zone, and a fork copies nothing at all.",
    "And compression folds the older messages into a summary in the compressed zone, "
    "keeping the most recent ones verbatim so that the model sees the latest exchange.",
    "Right, and the originals stay in the checkpoint taken just before the compression, "
    "so nothing is ever lost: a rollback brings every folded message back exactly.",
    "Then the budget: the window minus the reserve is what a request may use, and the "
    "breakdown shows each zone with its tokens so people can see where they all went.",
    "The estimator counts ASCII at four characters a token and CJK at one a character, "
    "plus four tokens of overhead per message; provider-reported usage wins when known.",
    "Merging a branch back copies what it added since the derive, or one summary of it, "
    "and records the source, the strategy and the hashes so a second merge adds nothing.",
    "Good. Let us write the tests first: exact arithmetic, the threshold, context full, "
    "tool groups, scripts, merges, and the command line output for all of it as well.",
]


ADD = """
import json, os, sys, time
args = json.load(sys.stdin)
deadline = time.monotonic() + 30
while "after" in args and time.monotonic() < deadline:  # until that run is logged
    if os.path.exists(sys.argv[1]):
        with open(sys.argv[1]) as logged:
            if any(json.loads(line)["a"] == args["after"] for line in logged):
                break
    time.sleep(0.01)
else:
    if "after" in args:
        sys.exit(1)
with open(sys.argv[1], "a") as runs:
    runs.write(json.dumps(args) + "\\n")
print(args["a"] + args["b"])
"""


class Adder:
    """A ToolBox with one tool, `add`, run as a process that logs each run to a file."""

    def __init__(self, tmp_path: Path) -> None:
        self.program = tmp_path / "add.py"
        self.program.write_text(ADD)
        self.runs = tmp_path / "runs.jsonl"

    def definitions(self) -> list[dict[str, Any]]:
        schema = {"type": "object", "properties": {"a": {"type": "number"}}}
        return [{"type": "function", "function": {"name": "add", "parameters": schema}}]

    def begin_turn(self) -> None:
        pass

    def end_turn(self) -> None:
        pass

    def run(self, call: ToolCall) -> tuple[str, CallRecord]:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, str(self.program), str(self.runs)],
            input=call.function.arguments,
            capture_output=True,
            text=True,
            check=False,
        )
        record = CallRecord(
            call.id,
            call.function.name,
            call.function.arguments,
            exit=done.returncode,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
        return done.stdout.strip() or f"error: exit {done.returncode}", record

    def ran(self) -> list[dict[str, Any]]:
        if not self.runs.exists():
            return []
        return [json.loads(line) for line in self.runs.read_text().splitlines()]


def calls(*arguments: dict[str, Any], prefix: str = "c") -> ScriptedReply:
    return ScriptedReply(
        tool_calls=[
            {"id": f"{prefix}{n}", "name": "add", "arguments": json.dumps(a)}
            for n, a in enumerate(arguments)
        ]
    )


class Watching(OfflineProvider):
    """The offline provider, keeping each request; fails at request `fail_at`."""

    def __init__(self, script: list[Any], fail_at: int | None = None) -> None:
        def scripted(item: Any) -> Any:
            if isinstance(item, list):
                return [scripted(step) for step in item]
            return ScriptedReply(content=item) if isinstance(item, str) else item

        super().__init__([scripted(turn) for turn in script])
        self.requests: list[ChatRequest] = []
        self.fail_at = fail_at

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.requests.append(request)
        if len(self.requests) == self.fail_at:
            raise ProviderError("the model went away")
        return super().stream(request)


HOSTILE = st.sampled_from(
    [
        "</script>",
        "</SCRIPT >",
        "<!--",
        "-->",
        "]]>",
        "<script>",
        '"',
        "'",
        "&amp;",
        "\0",
        "\u2028",
        "\u2029",
        "\u202e",
        "\u200f",
        "<\\/script>",
        "\\u003c",
        "x" * 10_000,
    ]
)
TEXT = st.one_of(st.text(), st.lists(st.one_of(HOSTILE, st.text()), max_size=6).map("".join))


SYSTEM = "You are terse."


class RecordingOffline(OfflineProvider):
    """The offline provider, remembering every request it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ChatRequest] = []

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        self.requests.append(request)
        return super().stream(request)


def cost(text: str) -> int:
    """Tokens of one plain text message: the overhead plus the estimate of its text."""
    return MESSAGE_OVERHEAD + estimate_text(text)


def tool_call(*calls: tuple[str, str, str]) -> Message:
    """An assistant message calling tools, each given as (id, name, arguments)."""
    return Message(
        role="assistant",
        tool_calls=[
            ToolCall(id=i, function=ToolCallFunction(name=n, arguments=a)) for i, n, a in calls
        ],
    )


def tool_result(call_id: str, content: str) -> Message:
    return Message(role="tool", content=content, tool_call_id=call_id)


LEADING = "Project: agctl. Answer precisely."
KEEP = 4
PROMPT_AT_LIMIT = "q" * 40  # 10 tokens; one more character is one more token


def window_for_limit(limit: int) -> int:
    """The smallest window whose auto budget leaves exactly `limit` tokens for a request."""
    return next(w for w in range(limit, 2 * limit) if w - ContextBudget.auto(w).reserve == limit)


def threshold_session(store: Store, **settings: object) -> tuple[list[Message], int]:
    """A session whose request with PROMPT_AT_LIMIT is exactly the limit of the window."""
    store.create_session("s", system_prompt=SYSTEM)
    original = [msg("system", LEADING)] + [
        msg("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(LONG)
    ]
    add(store, "s", None, *original)
    if settings:
        store.configure_session("s", {k: v for k, v in settings.items() if k != "slot"})
        if "slot" in settings:
            store.configure_slot("s", None, {"auto_compress": settings["slot"]})
    request = cost(SYSTEM) + sum(cost(m.text()) for m in original) + cost(PROMPT_AT_LIMIT)
    return original, window_for_limit(request)


OPTIONS = TurnOptions(model="offline")


def append_user(store: Store, text: str, slot: str | None = None) -> None:
    message = Message(role="user", content=text)
    store.update_slot(SID, slot, lambda target: target.append(message))


def edit(store: Store, index: int, text: str, slot: str | None = None) -> None:
    store.update_slot(SID, slot, lambda target: target.edit(index, text))


class ToolCallProvider:
    """Replies with reasoning and one tool call, as a reasoning model calling a tool would."""

    name = "tool-call"

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        yield ReasoningDelta("The tide table has the answer.")
        yield ToolCallDelta(0, id="call_7", name="lookup")
        yield ToolCallDelta(0, arguments='{"q": "tides"}')
        yield Usage(prompt_tokens=40, completion_tokens=9)
        yield Finish("tool_calls")


def hand_edit(store: Store, slot_id: str | None, change: Any) -> None:
    """Rewrite the JSON of the session document (slot_id None) or of a slot, as another tool
    or a newer agctl would: none of agctl's rules run and no checkpoint is taken."""
    with store.transaction(SID) as tx:
        if slot_id is None:
            session = tx.load_session(SID).model_dump(mode="json")
            change(session)
            tx.put_session(Session.model_validate(session))
        else:
            slot = tx.load_slot(SID, slot_id).model_dump(mode="json")
            change(slot)
            tx.put_slot(Slot.model_validate(slot))


SECRET = "Tr0ub4dor&3"


def tool_spec(**fields: Any) -> ToolSpec:
    """A tool's definition: `true`, named "t", with `fields` over the defaults."""
    return ToolSpec.model_validate({"name": "t", "command": ["true"], **fields})


# ---- request bodies as hypothesis draws them (context/test_cache.py, providers/test_body.py) --

# Few examples, the same each run: the cache's properties run real turns on a real store.
WARM_SETTINGS = settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

utf8_texts = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=40
)


# ---- the session graph: labels a user could write, and what a drawing must be ---------

HOSTILE_TEXTS = [
    'say "hi"',
    "a]b[c",
    "x --> y",
    "%% comment",
    "</script><script>alert(1)</script>",
    "nul\x00byte",
    "\u202eRTL override\u202c עברית العربية",
    "\x1b[2Jescape\x07",
    "back\\slash \\N \\G \\n",
    "#quot; & <b>bold</b> `tick` | pipe {brace}",
    "line\nbreak\u2028sep",
    "多字节的中文名字" * 20,
    "n" * 10_000,
]


def hostile_graph(session_ids: list[str], texts: list[str]) -> dict[str, Any]:
    """A graph shaped as the model makes them, with user text in every field it could be."""
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []

    def add(kind: str, session: str, **fields: Any) -> str:
        node = {"id": f"n{len(nodes)}", "kind": kind, "session": session, **fields}
        nodes.append(node)
        return str(node["id"])

    previous = None
    for index, session in enumerate(session_ids):
        said = texts[index % len(texts)]
        top = add(
            "session",
            session,
            slot=None,
            label=session,
            title=said,
            parent=None,
            current=index == 0,
            orphan=index == 2,
            missing=False,
            created_at=None,
        )
        slot = add(
            "slot",
            session,
            slot=session,
            label=session,
            mode="full",
            messages=3,
            tokens=10,
            current=True,
            depth=0,
            source="new",
            created_at="x",
            turns=[{"zone": "messages", "role": "user", "text": said, "tokens": 1}],
        )
        mark = add(
            "checkpoint",
            session,
            slot=session,
            label=said or "x",
            checkpoint=session[:8],
            turn=1,
            checkpoint_label=said,
            auto=False,
            created_at="x",
        )
        edges.append(
            {"from": top, "to": slot, "kind": "derived", "strategy": said, "dashed": False}
        )
        edges.append({"from": mark, "to": slot, "kind": "merged", "strategy": said, "dashed": True})
        if previous is not None:
            edges.append(
                {"from": previous, "to": top, "kind": "forked", "strategy": None, "dashed": False}
            )
        previous = mark
    current = {"session": session_ids[0], "slot": session_ids[0]}
    return {"version": 1, "current": current, "nodes": nodes, "edges": edges}


def check_text(drawn: str) -> None:
    """Every line of a text drawing fits its width and is printable."""
    from agctl.graph import text

    for line in drawn.splitlines():
        assert text.display_width(line) <= text.WIDTH, repr(line)
        assert line.isprintable(), repr(line)


def accepted_by_graphviz(document: str) -> str:
    """The SVG that Graphviz draws of `document`, which it must accept without an error."""
    result = subprocess.run(
        ["dot", "-Tsvg"], input=document.encode(), capture_output=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b"Error" not in result.stderr, result.stderr.decode(errors="replace")
    return result.stdout.decode()


# ---- real agctl processes over the test's data dir (the hardening and hostile suites) ----

SOURCE_ROOT = str(Path(agctl.__file__).resolve().parents[1])


def agctl_process(
    env: dict[str, str], *args: str, umask: int | None = None, timeout: float = 60, **kw: Any
) -> subprocess.CompletedProcess[str]:
    def setup() -> None:
        if umask is not None:
            os.umask(umask)

    return subprocess.run(
        [sys.executable, "-m", "agctl", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=setup,
        check=False,
        **kw,
    )


@pytest.fixture
def env(isolated_env: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AGCTL_", "OPENAI_"))}
    environ["AGCTL_DATA_DIR"] = str(isolated_env)
    environ["PYTHONPATH"] = SOURCE_ROOT + os.pathsep + environ.get("PYTHONPATH", "")
    return environ


# ---- refusals that write nothing (the hostile suites) ----
# A refusal means: a non-zero exit code, one `agctl: error: ...` message on stderr, no
# traceback, and the data dir's files byte for byte as they were (lock files aside: taking a
# lock is not writing data).

Run = Callable[..., Result]


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root` by relative path: its bytes, or its target for a symlink."""
    found: dict[str, bytes] = {}
    if not root.exists():
        return found
    for path in sorted(root.rglob("*")):
        if path.name in (".lock", "journal"):
            continue
        if path.is_symlink():
            found[str(path.relative_to(root))] = b"symlink -> " + os.readlink(path).encode()
        elif path.is_file():
            found[str(path.relative_to(root))] = path.read_bytes()
    return found


def changed(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    return {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


def assert_refused(result: Result, *, code: int | None = None, says: str = "") -> None:
    """A clear error: a non-zero exit, an `agctl: error:` line, no traceback, nothing on stdout."""
    assert result.exit_code != 0, result.output
    if code is not None:
        assert result.exit_code == code, result.stderr
    assert result.stderr.startswith("agctl: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert says in result.stderr


def refuses_and_writes_nothing(
    run: Run,
    data_dir: Path,
    *args: str,
    input: bytes | None = None,
    code: int | None = None,
    says: str = "",
) -> Result:
    before = files(data_dir)
    result = run(*args, input=input)
    assert_refused(result, code=code, says=says)
    assert changed(before, files(data_dir)) == set()
    return result


def bench_module(monkeypatch: pytest.MonkeyPatch, name: str) -> types.ModuleType:
    """bench/<name>.py loaded as `bench_<name>`, with bench/ importable (its siblings'
    imports), for as long as the test runs."""
    bench = Path(__file__).resolve().parent.parent / "bench"
    monkeypatch.syspath_prepend(str(bench))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", bench / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look it up
    spec.loader.exec_module(module)
    return module
