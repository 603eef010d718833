"""Issue 10, the storage side: private modes, planted files, integrity, bounded waits,
leftovers — each with real files and real processes.

Every test here failed before its fix (the docstring of each says what happened then).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from helpers import checkpoints_dir, dying_after_one_change

import agctl
from agctl.base.errors import CorruptDocument, DataError, SlotChanged
from agctl.context.models import Message
from agctl.providers.base import ChatRequest, Event, Finish, TextDelta
from agctl.reports.checkup import diagnose
from agctl.storage.encoding import encode_record
from agctl.storage.file.backend import FileLog
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import checkpoint_offset
from agctl.store.checkpoints.pack import Log
from agctl.turn.send import TurnOptions, send_turn

Run = Callable[..., Result]
SID = "s"
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


@pytest.fixture
def session(run: Run) -> str:
    assert run("session", "new", SID, "--system", "be brief").exit_code == 0
    assert run("-s", SID, "turn", "send", "hello").exit_code == 0
    return SID


def walk(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    for path in [root, *sorted(root.rglob("*"))]:
        yield path, os.lstat(path)


# ---- other local users ---------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o022])
def test_everything_is_private_whatever_the_umask(
    env: dict[str, str], isolated_env: Path, tmp_path: Path, umask: int
) -> None:
    """Before: under umask 000 the dirs were 0777 and the checkpoint index 0666."""
    steps = [
        ("session", "new", SID),
        ("-s", SID, "msg", "append", "user", "hi"),
        ("-s", SID, "turn", "send", "hello"),
        ("-s", SID, "slot", "derive", "side"),
        ("-s", SID, "ckpt", "create", "--label", "x"),
        ("-s", SID, "turn", "send", "again", "--slot", "side"),
        ("-s", SID, "turn", "undo"),
        ("-s", SID, "memory", "set", "k", "v"),
        ("session", "use", SID),
    ]
    for args in steps:
        done = agctl_process(env, *args, umask=umask)
        assert done.returncode == 0, (args, done.stderr)
    exported = tmp_path / "export.json"
    done = agctl_process(env, "session", "export", SID, "-o", str(exported), umask=umask)
    assert done.returncode == 0, done.stderr
    assert agctl_process(env, "session", "import", str(exported), "--as", "copy").returncode == 0
    fork = agctl_process(env, "-s", SID, "ckpt", "list", "--json", umask=umask)
    first = json.loads(fork.stdout)[-1]["id"]
    assert agctl_process(env, "-s", SID, "ckpt", "fork", first, umask=umask).returncode == 0
    seen_files = set()
    for path, info in walk(isolated_env):
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            assert mode == 0o700, (path, oct(mode))
        else:
            assert stat.S_ISREG(info.st_mode), path
            assert mode == 0o600, (path, oct(mode))
            seen_files.add(path.name)
    assert {"log", "index.jsonl", "heads.json", "session.json", ".lock"} <= seen_files


def test_a_loose_data_dir_is_warned_about_once(env: dict[str, str], isolated_env: Path) -> None:
    """Before: a 0755 data dir was used silently."""
    isolated_env.mkdir(mode=0o755)
    os.chmod(isolated_env, 0o755)
    first = agctl_process(env, "session", "new", SID)
    assert first.returncode == 0
    assert first.stderr.count("open to other users") == 1
    assert str(isolated_env) in first.stderr and "755" in first.stderr
    again = agctl_process(env, "session", "list")
    assert again.returncode == 0 and "open to other users" not in again.stderr
    os.chmod(isolated_env, 0o775)  # looser still: said again, once
    assert "775" in agctl_process(env, "session", "list").stderr
    assert "open to" not in agctl_process(env, "session", "list").stderr
    os.chmod(isolated_env, 0o700)
    assert agctl_process(env, "session", "list").stderr == ""


# ---- planted links, FIFOs and devices --------------------------------------------------------

SESSION_FILES = [
    "session.json",
    "slots/default.json",
    "checkpoints/log",
    "checkpoints/index.jsonl",
    "checkpoints/heads.json",
    "checkpoints/removed.json",
    "drafts/default.json",
    ".lock",
]
COMMANDS = [
    ("msg", "append", "user", "more"),
    ("turn", "send", "next"),
    ("ckpt", "list"),
    ("ckpt", "create"),
    ("turn", "undo"),
    ("msg", "list"),
    ("turn", "send", "--resume-draft"),
]


def _planted_session(store: Store, isolated_env: Path) -> Path:
    keeper = Checkpointer(store)
    first = keeper.ids(SID)[-1]
    keeper.remove(SID, [keeper.ids(SID)[0]])
    assert first
    from agctl.context.models import Draft

    store.save_draft(SID, Draft(prompt="p", slot="default"))
    return isolated_env / "sessions" / SID


@pytest.mark.parametrize("name", SESSION_FILES)
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_no_file_under_a_session_is_reached_through_a_symlink(
    run: Run,
    store: Store,
    isolated_env: Path,
    tmp_path: Path,
    session: str,
    name: str,
    dangling: bool,
) -> None:
    """Before: a link in place of the checkpoint log made a turn append the conversation
    to the link's target (and a dangling link created it)."""
    directory = _planted_session(store, isolated_env)
    planted = directory / name
    target = tmp_path / "outside" / "victim"
    target.parent.mkdir()
    if not dangling:
        target.write_bytes(planted.read_bytes() if planted.exists() else b"{}")
    original = target.read_bytes() if target.exists() else None
    if planted.exists():
        planted.unlink()
    planted.symlink_to(target)
    refused = 0
    for args in COMMANDS:
        result = run("-s", SID, *args)
        assert "Traceback" not in result.stderr
        assert result.exit_code in (0, 3, 5), (args, result.stderr)
        if result.exit_code == 5:
            refused += 1
            assert str(planted) in result.stderr, result.stderr
            assert "symbolic link" in result.stderr
    assert refused, "a planted link was used without a word"
    assert planted.is_symlink()
    if original is None:
        assert not target.exists(), "a dangling link created its target"
    else:
        assert target.read_bytes() == original


@pytest.mark.parametrize("name", ["slots", "checkpoints"])
def test_a_linked_directory_under_a_session_is_refused(
    run: Run, isolated_env: Path, tmp_path: Path, session: str, name: str
) -> None:
    directory = isolated_env / "sessions" / SID / name
    elsewhere = tmp_path / f"elsewhere-{name}"
    directory.rename(elsewhere)
    directory.symlink_to(elsewhere)
    before = sorted(p.name for p in elsewhere.iterdir())
    reads = ("msg", "append", "user", "x") if name == "slots" else ("ckpt", "list")
    for args in (reads, ("turn", "send", "y"), ("ckpt", "create")):
        result = run("-s", SID, *args)
        assert result.exit_code == 5, (args, result.output)
        assert str(directory) in result.stderr and "symbolic link" in result.stderr
    assert sorted(p.name for p in elsewhere.iterdir()) == before


def test_a_linked_session_directory_is_refused(
    run: Run, isolated_env: Path, tmp_path: Path, session: str
) -> None:
    directory = isolated_env / "sessions" / SID
    elsewhere = tmp_path / "elsewhere"
    directory.rename(elsewhere)
    directory.symlink_to(elsewhere)
    result = run("-s", SID, "msg", "append", "user", "x")
    assert result.exit_code == 5 and "symbolic link" in result.stderr


@pytest.mark.parametrize("name", ["slots/default.json", "session.json", "checkpoints/log"])
def test_a_fifo_in_place_of_a_document_is_refused_without_hanging(
    env: dict[str, str], isolated_env: Path, session: str, name: str
) -> None:
    """Before: a FIFO in place of a slot file made every reader hang."""
    path = isolated_env / "sessions" / SID / name
    path.unlink()
    os.mkfifo(path, 0o600)
    reads = ("ckpt", "list") if name.endswith("log") else ("msg", "list")
    for args in (reads, ("turn", "send", "x"), ("ckpt", "create")):
        done = agctl_process(env, "-s", SID, *args, timeout=20)
        assert done.returncode == 5, (args, done.stderr)
        assert str(path) in done.stderr and "FIFO" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_checkpoint_log_that_is_a_directory_is_a_clear_error(
    run: Run, isolated_env: Path, session: str
) -> None:
    log = isolated_env / "sessions" / SID / "checkpoints" / "log"
    log.rename(log.with_name("old-log"))
    log.mkdir()
    for args in (("ckpt", "list"), ("turn", "send", "x"), ("ckpt", "verify")):
        result = run("-s", SID, *args)
        assert result.exit_code == 5, (args, result.output)
        assert str(log) in result.stderr and "directory" in result.stderr


# ---- journals planted by someone else --------------------------------------------------------


def _fake_rollback_journal(store: Store, isolated_env: Path) -> tuple[Path, str]:
    keeper = Checkpointer(store)
    oldest = keeper.ids(SID)[-1]
    journal = isolated_env / "sessions" / SID / "checkpoints" / "restoring.json"
    journal.write_text(json.dumps({"checkpoint": oldest}))
    return journal, oldest


def _planted_redo_journal(isolated_env: Path) -> Path:
    """A redo journal whose one pending record would empty the default slot."""
    from agctl.storage.file import journal as redo

    journal = isolated_env / "sessions" / SID / "journal"
    slot = {"id": "default", "messages": []}
    record = {"ops": [["put", "slots/default.json", redo.pack_data(json.dumps(slot).encode())]]}
    journal.write_bytes(redo._header(redo._header_size(), redo._BOOT) + encode_record(record))
    return journal


@pytest.mark.parametrize("kind", ["redo", "legacy"])
@pytest.mark.parametrize("how", ["group-writable", "world-writable", "other-owner"])
def test_a_planted_journal_is_not_applied(
    run: Run, store: Store, isolated_env: Path, session: str, how: str, kind: str
) -> None:
    """Before: any restoring.json found was replayed, rolling the session back."""
    assert run("-s", SID, "msg", "append", "user", "kept").exit_code == 0
    if kind == "redo":
        journal = _planted_redo_journal(isolated_env)
    else:
        journal, _ = _fake_rollback_journal(store, isolated_env)
    if how == "group-writable":
        os.chmod(journal, 0o620)
    elif how == "world-writable":
        os.chmod(journal, 0o666)
    else:
        if os.geteuid() != 0:
            pytest.skip("optional: changing a file's owner needs root")
        os.chmod(journal, 0o600)
        os.chown(journal, 65534, 65534)
    before = [m.text() for m in store.load_slot(SID).messages]
    result = run("-s", SID, "msg", "append", "user", "x")
    assert result.exit_code == 5
    assert str(journal) in result.stderr and "not applied" in result.stderr
    assert [m.text() for m in store.load_slot(SID).messages] == before
    findings = diagnose(store, fix=True)
    assert [f.kind for f in findings if f.kind == "journal"] == ["journal"]
    assert not journal.exists()
    assert run("-s", SID, "msg", "append", "user", "x").exit_code == 0


def test_a_trusted_journal_naming_a_file_outside_the_session_is_refused(
    run: Run, store: Store, isolated_env: Path, session: str
) -> None:
    from agctl.storage.file import journal as redo

    journal = isolated_env / "sessions" / SID / "journal"
    target = isolated_env / "planted"
    record = {"ops": [["put", "../../planted", redo.pack_data(b"owned")]]}
    journal.write_bytes(redo._header(redo._header_size(), redo._BOOT) + encode_record(record))
    os.chmod(journal, 0o600)
    result = run("-s", SID, "msg", "append", "user", "x")
    assert result.exit_code == 5, result.output
    assert "may not change" in result.stderr
    assert not target.exists()


def test_a_rollback_cut_after_its_commit_point_is_finished_before_a_turn_builds_its_view(
    store: Store, isolated_env: Path, session: str
) -> None:
    """Before: a turn read the half-restored slot without the lock and sent it."""
    store.update_slot(SID, None, lambda s: s.messages.append(Message(role="user", content="X")))
    keeper = Checkpointer(store)
    with dying_after_one_change():
        keeper.rollback(SID, keeper.ids(SID)[-1])
    assert store.pending_recovery(SID)
    seen: list[list[str]] = []

    class Spy:
        name = "spy"

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            seen.append([str(m.get("content")) for m in request.messages])
            yield TextDelta("ok")
            yield Finish("stop")

    send_turn(store, SID, "after", Spy(), TurnOptions(model="m"))
    assert not store.pending_recovery(SID)
    assert "X" not in seen[0] and "hello" not in seen[0]  # the baseline had neither
    assert seen[0][-1] == "after"


# ---- integrity of the checkpoint log ---------------------------------------------------------


@pytest.fixture
def small_log(store: Store) -> tuple[Store, list[str]]:
    store.create_session(SID)
    keeper = Checkpointer(store)
    ids = []
    for turn in range(3):
        store.update_slot(
            SID, None, lambda s, t=turn: s.messages.append(Message(role="user", content=f"m{t}"))
        )
        store.update_session(SID, lambda s: setattr(s, "turn_count", s.turn_count + 1))
        store.memory_set(SID, f"k{turn}", "v")
        ids.append(keeper.create(SID, label=f"c{turn}").id)
    return store, ids


def _state(keeper: Checkpointer, identifier: str) -> Any:
    state = keeper.state(SID, keeper.load(SID, identifier))
    return (
        state.session.model_dump(mode="json"),
        {k: v.model_dump(mode="json") for k, v in state.slots.items()},
    )


def test_no_one_byte_change_of_the_log_restores_a_different_state(
    small_log: tuple[Store, list[str]],
) -> None:
    """Before: a changed byte at about a quarter of the offsets rolled back to a different
    state (turn count, current slot, cost) with exit 0."""
    store, ids = small_log
    keeper = Checkpointer(store)
    log = checkpoints_dir(keeper.store, SID) / "log"
    pristine = log.read_bytes()
    expected = {i: _state(keeper, i) for i in ids}
    silent: list[int] = []
    undetected: list[int] = []
    for offset in range(len(pristine)):
        mutated = bytearray(pristine)
        mutated[offset] = (mutated[offset] + 1 + offset % 7) % 256 or 1
        log.write_bytes(bytes(mutated))
        for identifier in ids:
            try:
                if _state(keeper, identifier) != expected[identifier]:
                    silent.append(offset)
            except DataError:
                pass
            except Exception as exc:
                silent.append(offset)
                print(offset, type(exc), exc)
        if keeper.verify(SID).ok:
            undetected.append(offset)
    log.write_bytes(pristine)
    assert not silent, f"{len(silent)} offsets restored a different state: {silent[:20]}"
    assert not undetected, f"ckpt verify missed {len(undetected)} offsets: {undetected[:20]}"
    assert keeper.verify(SID).ok


def test_a_mismatch_names_the_checkpoint_and_exits_5(
    run: Run, isolated_env: Path, session: str
) -> None:
    log = isolated_env / "sessions" / SID / "checkpoints" / "log"
    raw = log.read_bytes()
    checkpoint = json.loads(run("-s", SID, "ckpt", "list", "--json").stdout)[0]["id"]
    start = checkpoint_offset(checkpoint)
    end = raw.index(b"\n", start)
    index = raw.index(b'"turn_count":1', start, end) + len('"turn_count":')
    log.write_bytes(raw[:index] + b"7" + raw[index + 1 :])
    result = run("-s", SID, "ckpt", "rollback", checkpoint)
    assert result.exit_code == 5
    assert f"byte {start}" in result.stderr or checkpoint in result.stderr
    verify = run("-s", SID, "ckpt", "verify", "--json")
    assert verify.exit_code == 5
    report = json.loads(verify.stdout)
    assert not report["ok"] and any(str(start) in p for p in report["problems"])


def test_a_log_written_before_checksums_stays_readable_and_is_reported(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orjson

    from agctl.store.checkpoints import pack

    def legacy(value: Any) -> bytes:  # as agctl 0.1 wrote lines: no header, no checksum
        return b"" if value == pack.HEADER else orjson.dumps(value) + b"\n"

    store.create_session(SID)
    keeper = Checkpointer(store)
    with monkeypatch.context() as patch:
        patch.setattr(pack, "encode_record", legacy)
        keeper.create(SID, label="old")
    assert b"\t" not in (checkpoints_dir(keeper.store, SID) / "log").read_bytes()
    keeper.create(SID, label="new")
    assert Log(FileLog(checkpoints_dir(keeper.store, SID) / "log")).checked() is False
    assert [s.label for s in keeper.summaries(SID)] == ["new", "old"]
    assert keeper.state(SID, keeper.load(SID, keeper.ids(SID)[-1])).session.id == SID
    report = keeper.verify(SID)
    assert report.ok and not report.checksums and report.unverifiable == report.records > 0
    notices = [f for f in diagnose(store) if f.kind == "unverifiable"]
    assert len(notices) == 1 and notices[0].notice


def test_the_index_and_heads_follow_a_log_cut_short_and_grown_again(
    small_log: tuple[Store, list[str]],
) -> None:
    """Before: `ckpt list` kept showing checkpoints that no longer existed."""
    store, ids = small_log
    keeper = Checkpointer(store)
    log = checkpoints_dir(keeper.store, SID) / "log"
    first_end = next(s.end for s in keeper.summaries(SID) if s.id == ids[0])
    with open(log, "r+b") as handle:
        handle.truncate(first_end)
    store.update_slot(SID, None, lambda s: s.messages.append(Message(role="user", content="n")))
    grown = [keeper.create(SID, label=f"g{i}").id for i in range(3)]
    listed = [s.id for s in keeper.summaries(SID)]
    assert listed == list(reversed([ids[0], *grown]))
    assert {s.label for s in keeper.summaries(SID)} == {"c0", "g0", "g1", "g2"}
    live = keeper.live_state(SID)
    rebuilt = keeper.state(SID, keeper.load(SID, grown[-1]))
    assert [m.text() for m in rebuilt.slots["default"].messages] == [
        m.text() for m in live.slots["default"].messages
    ]
    assert keeper.verify(SID).ok


# ---- a turn whose slot changed under it -----------------------------------------------------


class Meddler:
    """A provider that, while 'answering', runs another agctl process against the slot."""

    name = "meddler"

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.env = env
        self.args = args

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        done = agctl_process(self.env, "-s", SID, *self.args)
        assert done.returncode == 0, done.stderr
        yield TextDelta("the answer")
        yield Finish("stop")


@pytest.mark.parametrize(
    "args",
    [
        ("msg", "clear"),
        ("msg", "edit", "0", "changed"),
        ("msg", "pop"),
        ("slot", "mode", "focused"),
        ("ckpt", "rollback", "{first}"),
    ],
    ids=["clear", "edit", "pop", "mode", "rollback"],
)
def test_a_turn_is_refused_when_its_slot_changed_while_the_model_answered(
    store: Store, env: dict[str, str], session: str, args: tuple[str, ...]
) -> None:
    """Before: the reply, computed from the old context, landed on the new state (exit 0)."""
    first = Checkpointer(store).ids(SID)[-1]
    args = tuple(first if a == "{first}" else a for a in args)
    with pytest.raises(SlotChanged) as caught:
        send_turn(store, SID, "question", Meddler(env, *args), TurnOptions(model="m"))
    assert caught.value.exit_code == 4
    texts = [m.text() for m in store.load_slot(SID).messages]
    assert "the answer" not in texts and "question" not in texts
    draft = store.load_draft(SID, "default")
    assert draft.prompt == "question"
    assert draft.reply is not None and draft.reply.text() == "the answer"


def test_a_turn_appended_by_another_process_meanwhile_is_kept_in_order(
    store: Store, env: dict[str, str], session: str
) -> None:
    result = send_turn(
        store,
        SID,
        "question",
        Meddler(env, "turn", "send", "other turn"),
        TurnOptions(model="m"),
    )
    texts = [m.text() for m in store.load_slot(SID).messages]
    assert texts[-4] == "other turn" and texts[-2:] == ["question", "the answer"]
    assert result.turn == 2 and store.load_session(SID).turn_count == 3


def test_a_refused_turn_exits_4_on_the_command_line(
    run: Run, env: dict[str, str], isolated_env: Path, session: str, tmp_path: Path
) -> None:
    """Through the CLI: a `msg clear` (another process) while the model answers."""
    from fake_openai import FakeOpenAI

    cleared: list[subprocess.CompletedProcess[str]] = []
    agctl = [sys.executable, "-m", "agctl", "-s", SID]
    with FakeOpenAI() as server:
        server.before_reply(
            lambda: cleared.append(
                subprocess.run([*agctl, "msg", "clear"], env=env, capture_output=True, text=True)
            )
        )
        child_env = {**env, "AGCTL_BASE_URL": server.base_url, "AGCTL_PROVIDER": "openai"}
        child_env["AGCTL_MODEL"] = "m"
        turn = subprocess.Popen(
            [*agctl, "turn", "send", "question"],
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _out, err = turn.communicate(timeout=60)
    assert server.errors == [] and [c.returncode for c in cleared] == [0], cleared
    assert turn.returncode == 4, err
    assert "changed while the model was answering" in err
    draft = json.loads((isolated_env / "sessions" / SID / "drafts" / "default.json").read_text())
    assert draft["prompt"] == "question" and draft["reply"]["content"]
    assert draft["reply"]["content"] in err  # shown, and kept in the draft
    assert json.loads(run("-s", SID, "msg", "list", "--json").stdout) == []


# ---- parent chains that loop -----------------------------------------------------------------


def test_walks_over_a_looping_parent_chain_end(
    env: dict[str, str], run: Run, isolated_env: Path
) -> None:
    """Data written by hand (or by an older agctl) may loop: tree and rm still end."""
    for sid in ("a", "b", "c"):
        assert run("session", "new", sid).exit_code == 0
    for sid, parent in (("a", "b"), ("b", "a"), ("c", "c")):
        path = isolated_env / "sessions" / sid / "session.json"
        document = json.loads(path.read_text())
        document["parent_id"] = parent
        path.write_text(json.dumps(document))
    tree = agctl_process(env, "session", "tree", "--json", timeout=20)
    assert tree.returncode == 0, tree.stderr
    shown = {node["id"]: node["looped"] for node in json.loads(tree.stdout)}
    assert shown == {"a": True, "b": True, "c": True}
    listed = agctl_process(env, "session", "list", timeout=20)
    assert "a (loop)" in listed.stdout and "(gone)" not in listed.stdout
    alone = agctl_process(env, "session", "rm", "c", timeout=20)  # its own parent
    assert alone.returncode == 0, alone.stderr
    removed = agctl_process(env, "session", "rm", "a", "--recursive", timeout=20)
    assert removed.returncode == 0, removed.stderr


# ---- bounded waits ---------------------------------------------------------------------------

HOLDER = """
import sys, time
from pathlib import Path
from agctl.store import Store
store = Store(sys.argv[1])
with store.lock("s"):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_writer_waits_at_most_lock_timeout_and_names_the_holder(
    env: dict[str, str], isolated_env: Path, session: str
) -> None:
    """Before: a stopped writer holding the lock blocked every other writer forever."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(isolated_env)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        started = time.monotonic()
        done = agctl_process(
            {**env, "AGCTL_LOCK_TIMEOUT": "0.5"},
            "-v",
            "-s",
            SID,
            "msg",
            "append",
            "user",
            "x",
            timeout=30,
        )
        waited = time.monotonic() - started
        assert done.returncode == 4, done.stderr
        assert f"process {holder.pid}" in done.stderr
        assert "lock_timeout" in done.stderr
        assert "waiting up to 0.5s" in done.stderr  # -v logs the wait
        assert waited < 25
        bad = agctl_process(
            {**env, "AGCTL_LOCK_TIMEOUT": "soon"}, "-s", SID, "msg", "append", "user", "x"
        )
        assert bad.returncode == 2 and "AGCTL_LOCK_TIMEOUT" in bad.stderr
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert agctl_process(env, "-s", SID, "msg", "append", "user", "y").returncode == 0


# ---- leftovers -------------------------------------------------------------------------------


def test_a_writer_sweeps_stale_temp_files_of_its_session(
    run: Run, store: Store, isolated_env: Path, session: str
) -> None:
    """Before: a killed writer's temp copies of a slot (deleted messages and all) stayed."""
    slots = isolated_env / "sessions" / SID / "slots"
    stale = slots / ".default.json.abc123.tmp"
    fresh = slots / ".default.json.def456.tmp"
    for path in (stale, fresh):
        path.write_text('{"secret": "deleted message"}')
    old = time.time() - 3600
    os.utime(stale, (old, old))
    outside = isolated_env.parent / "keep.tmp"
    outside.write_text("not agctl's")
    link = slots / ".link.json.zzz.tmp"
    link.symlink_to(outside)
    os.utime(link, (old, old), follow_symlinks=False)
    findings = {f.path for f in diagnose(store) if f.kind == "temp-file"}
    assert findings == {str(stale)}
    assert run("-s", SID, "msg", "append", "user", "x").exit_code == 0
    # Every write into a session dir is made under its lock: a writer holding it knows
    # that any temp file there is a killed writer's, however recent (a link is left).
    assert not stale.exists() and not fresh.exists()
    assert outside.exists() and link.is_symlink()


def test_doctor_reports_and_fixes_modes_links_and_leftovers(
    run: Run, store: Store, isolated_env: Path, session: str
) -> None:
    os.chmod(isolated_env, 0o755)
    slot = isolated_env / "sessions" / SID / "slots" / "default.json"
    os.chmod(slot, 0o644)
    (isolated_env / "sessions" / SID / "slots" / "evil.json").symlink_to("/etc/passwd")
    trash = isolated_env / "sessions" / ".trash-old-1234"
    trash.mkdir()
    old = time.time() - 3600
    os.utime(trash, (old, old))
    result = run("doctor", "--json")
    assert result.exit_code == 5
    kinds = sorted({f["kind"] for f in json.loads(result.stdout)["findings"]})
    assert kinds == ["leftover-dir", "mode", "symlink"]
    fixed = run("doctor", "--fix")
    assert fixed.exit_code == 0, fixed.output
    assert run("doctor").exit_code == 0
    assert stat.S_IMODE(os.stat(slot).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(isolated_env).st_mode) == 0o700
    assert not trash.exists()
    assert Path("/etc/passwd").exists()


def test_corrupt_document_names_the_path(store: Store, isolated_env: Path) -> None:
    store.create_session(SID)
    path = isolated_env / "sessions" / SID / "session.json"
    path.unlink()
    path.symlink_to("/etc/hostname")
    with pytest.raises(CorruptDocument) as caught:
        store.load_session(SID)
    assert caught.value.path == path


def test_tab_completion_never_hangs_on_a_fifo_or_follows_a_link(
    env: dict[str, str], run: Run, isolated_env: Path, session: str, tmp_path: Path
) -> None:
    """Before: a FIFO in place of session.json or the checkpoint index hung every TAB."""
    assert run("session", "use", SID).exit_code == 0
    directory = isolated_env / "sessions" / SID
    for name in ("session.json", "checkpoints/index.jsonl"):
        (directory / name).unlink()
        os.mkfifo(directory / name, 0o600)
    (isolated_env / "current-session").unlink()
    secret = tmp_path / "secret"
    secret.write_text(SID)
    (isolated_env / "current-session").symlink_to(secret)
    for words in ("agctl session use ", "agctl -s s ckpt show "):
        done = subprocess.run(
            [sys.executable, "-m", "agctl"],
            env={
                **env,
                "_AGCTL_COMPLETE": "bash_complete",
                "COMP_WORDS": words,
                "COMP_CWORD": str(len(words.split())),
            },
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr


def test_a_fifo_or_device_as_the_config_is_refused_without_hanging(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Before: AGCTL_CONFIG naming a FIFO hung every command that reads the config."""
    fifo = tmp_path / "config-fifo"
    os.mkfifo(fifo, 0o600)
    for path in (fifo, Path("/dev/zero")):
        done = agctl_process({**env, "AGCTL_CONFIG": str(path)}, "config", "show", timeout=20)
        assert done.returncode == 5, done.stderr
        assert str(path) in done.stderr and "Traceback" not in done.stderr


def test_a_linked_config_is_read_and_written_through_its_link(
    env: dict[str, str], tmp_path: Path
) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "agctl.json"
    real.write_text("{}")
    link = tmp_path / "config.json"
    link.symlink_to(real)
    environ = {**env, "AGCTL_CONFIG": str(link)}
    assert agctl_process(environ, "config", "set", "lock_timeout", "5").returncode == 0
    assert link.is_symlink() and json.loads(real.read_text())["lock_timeout"] == 5
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert agctl_process(environ, "config", "set", "lock_timeout", "inf").returncode == 2


def test_no_one_byte_change_of_the_heads_cache_gives_a_wrong_checkpoint(
    small_log: tuple[Store, list[str]],
) -> None:
    """Before (review): a changed byte in heads.json was copied into the next checkpoint,
    which then restored a wrong message count or merge bases with a valid checksum."""
    store, _ids = small_log
    keeper = Checkpointer(store)
    heads = checkpoints_dir(keeper.store, SID) / "heads.json"
    pristine = heads.read_bytes()
    wrong: list[int] = []
    for offset in range(0, len(pristine), 3):
        mutated = bytearray(pristine)
        mutated[offset] = (mutated[offset] + 1) % 256
        heads.write_bytes(bytes(mutated))
        checkpoint = keeper.create(SID)
        if _state(keeper, checkpoint.id) != (
            keeper.live_state(SID).session.model_dump(mode="json"),
            {k: v.model_dump(mode="json") for k, v in keeper.live_state(SID).slots.items()},
        ):
            wrong.append(offset)
        heads.write_bytes(pristine)
    assert not wrong, f"{len(wrong)} changed bytes of heads.json gave a wrong checkpoint"


def test_a_damaged_last_record_does_not_stop_later_checkpoints(
    small_log: tuple[Store, list[str]],
) -> None:
    store, ids = small_log
    keeper = Checkpointer(store)
    log = checkpoints_dir(keeper.store, SID) / "log"
    raw = bytearray(log.read_bytes())
    last = checkpoint_offset(ids[-1])
    raw[last + 3] ^= 1
    log.write_bytes(bytes(raw))
    later = keeper.create(SID, label="later")
    keeper.rollback(SID, ids[0])
    assert [m.text() for m in store.load_slot(SID).messages] == ["m0"]
    assert keeper.load(SID, later.id).label == "later"
    with pytest.raises(CorruptDocument, match=ids[-1]):
        keeper.load(SID, ids[-1])
    keeper.summaries(SID)  # the index is rebuilt: still exit 5, never "not found"
    with pytest.raises(CorruptDocument, match=ids[-1]):
        keeper.load(SID, ids[-1])


def test_an_edited_index_line_is_not_believed(small_log: tuple[Store, list[str]]) -> None:
    store, _ids = small_log
    keeper = Checkpointer(store)
    index = checkpoints_dir(keeper.store, SID) / "index.jsonl"
    index.write_bytes(index.read_bytes().replace(b'"label":"c1"', b'"label":"XX"'))
    assert sorted(s.label or "" for s in keeper.summaries(SID)) == ["c0", "c1", "c2"]


def test_a_torn_header_does_not_make_a_log_unverifiable(store: Store) -> None:
    store.create_session(SID)
    keeper = Checkpointer(store)
    checkpoints_dir(keeper.store, SID).mkdir(mode=0o700, exist_ok=True)
    (checkpoints_dir(keeper.store, SID) / "log").write_bytes(b'{"agctl":"checkpoint-log","chec')
    keeper.create(SID)
    report = keeper.verify(SID)
    assert report.ok and report.checksums and not report.unverifiable


def test_record_appends_through_a_linked_cassette(run: Run, session: str, tmp_path: Path) -> None:
    """The cassette is the user's own file: a link into a fixtures folder still works
    (a review caught the store's no-link rule applied to it)."""
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    real = fixtures / "chat.cassette"
    real.write_text("")
    link = tmp_path / "chat.cassette"
    link.symlink_to(real)
    result = run("-s", SID, "turn", "send", "recorded", "--record", str(link))
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and b"recorded" in real.read_bytes()
