"""Torture (issue 7, "Reliability tests"): kill -9 in the middle of writes, 8 racing
processes on one session, a full disk and a read-only data dir. Real processes only.

The crash test forks its writers from a zygote that imported agctl once, so each of the
100+ kills costs a fork, not an interpreter start-up. Every writer logs what it is about
to do and what it did; after each kill the test replays that log on a small model of the
session and checks the state on disk is exactly the model before or after the operation
that was cut short.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from agctl.cli import cli
from agctl.context.models import Message, Session, Slot
from agctl.store import Store
from agctl.store.checkpointer import Checkpointer
from agctl.store.checkpoints import checkpoint_offset

SID = "torture"

# ---- a session as the tests see it ------------------------------------------------------
#
# Each message is reduced to a tag: `m<n>` a numbered append, `t<n>` the prompt of a turn,
# `r<n>` the offline reply to it, `S<k>` a summary of k messages (written by compression).

SlotPrint = tuple[tuple[str, ...], tuple[str, ...]]  # (messages, compressed) as tags

NUMBERED = re.compile(r"[mt]\d+(?:-\d+)?")
SAID = re.compile(r'you said "t(\d+(?:-\d+)?)"')
SUMMARY = re.compile(r"Extract of (\d+) earlier messages")


def tag(role: str, text: str) -> str:
    if role == "user" and NUMBERED.fullmatch(text):
        return text
    if role == "assistant" and (said := SAID.search(text)):
        return f"r{said.group(1)}"
    if role == "system" and (summary := SUMMARY.match(text)):
        return f"S{summary.group(1)}"
    return f"?{role}:{text[:60]}"


def tags(messages: Iterable[Message]) -> tuple[str, ...]:
    return tuple(tag(m.role, m.text()) for m in messages)


@dataclass
class Snapshot:
    """What the tests compare: turn count, current slot, and every slot's zones as tags."""

    turn_count: int
    current_slot: str
    slots: dict[str, SlotPrint]


def snapshot(session: Session, slots: Iterable[Slot]) -> Snapshot:
    return Snapshot(
        turn_count=session.turn_count,
        current_slot=session.current_slot,
        slots={s.id: (tags(s.messages), tags(s.compressed)) for s in slots},
    )


def live_snapshot(store: Store, sid: str = SID) -> Snapshot:
    """The state on disk; reading it parses session.json and every slot document."""
    return snapshot(store.load_session(sid), store.list_slots(sid))


def checkpoint_snapshot(keeper: Checkpointer, identifier: str, sid: str = SID) -> Snapshot:
    state = keeper.state(sid, keeper.load(sid, identifier))
    return snapshot(state.session, state.slots.values())


def sequence_problems(state: Snapshot) -> list[str]:
    """Each slot must hold what was written, in order: numbers only go up, nothing twice,
    every prompt directly followed by its reply (a compression may fold a prompt and keep
    its reply), only summaries in the compressed zone."""
    problems = []
    for slot_id, (messages, compressed) in state.slots.items():
        last = -1
        for position, item in enumerate(messages):
            if item[0] not in "mtr":
                problems.append(f"{slot_id}[{position}]: unexpected message {item!r}")
                continue
            number = int(item[1:])
            if item[0] == "r":  # first, it may be a reply whose prompt was compressed
                if position and messages[position - 1] != f"t{number}":
                    problems.append(f"{slot_id}[{position}]: reply {item} without its prompt")
                continue
            if number <= last:
                problems.append(f"{slot_id}[{position}]: {item} after number {last}")
            last = number
            if item[0] == "t" and messages[position + 1 : position + 2] != (f"r{number}",):
                problems.append(f"{slot_id}[{position}]: prompt {item} without its reply")
        if any(not item.startswith("S") for item in compressed):
            problems.append(f"{slot_id}: compressed zone {compressed}")
    return problems


# ---- processes --------------------------------------------------------------------------


def child_env(data_dir: Path, home: Path) -> dict[str, str]:
    env = {**os.environ, "AGCTL_DATA_DIR": str(data_dir), "PYTHONIOENCODING": "utf-8"}
    env["XDG_DATA_HOME"] = str(home / "xdg-data")
    env["XDG_CONFIG_HOME"] = str(home / "xdg-config")
    for name in ("AGCTL_SESSION", "AGCTL_LOG", "AGCTL_CONFIG", "AGCTL_API_KEY"):
        env.pop(name, None)
    return env


def agctl(
    env: dict[str, str], *args: str, preexec_fn: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agctl", *args],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
        preexec_fn=preexec_fn,
    )


def in_process(env: dict[str, str], *args: str) -> Result:
    """The CLI in this process (a traceback fails the test), with the given data dir."""
    overrides: dict[str, str | None] = {
        k: env.get(k) for k in ("AGCTL_DATA_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME")
    }
    overrides["AGCTL_SESSION"] = None
    overrides["AGCTL_CONFIG"] = None
    return CliRunner().invoke(cli, list(args), env=overrides, catch_exceptions=False)


def temp_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob(".*.tmp"))


def documents(directory: Path) -> dict[str, str]:
    """Digest of every file that holds state (temp files and the lock excluded)."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.name.endswith(".tmp") and p.name not in (".lock", "journal")
    }


def assert_clear_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("agctl: error: "), result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


# ---- 1. crash safety --------------------------------------------------------------------

# Imports agctl once, then forks one writer per line read ("<round> <seed>"), printing the
# writer's pid and, once it is dead, its wait status. A writer loops over random
# operations on one session and logs each one before ("intent") and after ("done") it.
ZYGOTE = r"""
import os, random, sys, traceback
from pathlib import Path

import orjson

from agctl.store.checkpointer import Checkpointer
from agctl.turn.compress import compress
from agctl.context.models import Message
from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.send import TurnOptions, send_turn

root, session, journal = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
MAX_EXTRA_SLOTS = 4
FOCUS = ["turn", "append", "derive", "rollback", "compress"]
KINDS = ["turn", "append", "derive", "rollback", "compress", "ckpt"]
WEIGHTS = [22, 18, 25, 12, 13, 10]


def work(round_no, seed):
    rng = random.Random(seed)
    store = Store(root)
    keeper = Checkpointer(store)
    provider = OfflineProvider()
    options = TurnOptions(model="offline")
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def note(**record):
        os.write(fd, orjson.dumps(record) + b"\n")  # one write: whole or absent after a kill

    # Each round leans on one kind of operation, so that kills land in every kind, the
    # quick ones (append, derive) included.
    focus = FOCUS[round_no % len(FOCUS)]
    for k in range(1, 90_000):
        n = round_no * 100_000 + k
        slots = store.slot_ids(session)
        extra = [s for s in slots if s != "default"]
        kind = focus if rng.random() < 0.85 else rng.choices(KINDS, WEIGHTS)[0]
        ids = keeper.ids(session) if kind == "rollback" else []
        if kind == "derive" and len(extra) >= MAX_EXTRA_SLOTS:
            kind = "rm"
        if kind == "rollback" and not ids:
            kind = "ckpt"
        if kind == "turn":
            note(n=n, op="turn")
            result = send_turn(store, session, f"t{n}", provider, options)
            note(n=n, done=True, after=[result.checkpoint] if result.checkpoint else [])
        elif kind == "append":
            slot = rng.choice(slots)
            note(n=n, op="append", slot=slot)
            message = Message(role="user", content=f"m{n}")
            store.update_slot(session, slot, lambda s: s.messages.append(message))
            note(n=n, done=True)
        elif kind == "rm":
            slot = rng.choice(extra)
            note(n=n, op="rm", slot=slot)
            store.delete_slot(session, slot)
            note(n=n, done=True)
        elif kind == "derive":
            parent = rng.choice(slots)
            note(n=n, op="derive", slot=f"d{n}", parent=parent)
            store.derive_slot(session, f"d{n}", source=parent)
            note(n=n, done=True)
        elif kind == "rollback":
            target = rng.choice(ids[:8])
            note(n=n, op="rollback", target=target)
            restored, saved = keeper.rollback(session, target)
            note(n=n, done=True, before=[saved.id])
        elif kind == "compress":
            slot = rng.choice(slots)
            keep = rng.randint(1, 6)
            strategy = rng.choice(["summarize", "truncate"])
            note(n=n, op="compress", slot=slot, keep=keep, strategy=strategy)
            done = compress(
                store, session, slot, strategy=strategy, keep_recent=keep, provider=provider
            )
            note(
                n=n,
                done=True,
                before=[done.before] if done.before else [],
                after=[done.after] if done.after else [],
            )
        else:
            note(n=n, op="ckpt")
            checkpoint = keeper.create(session, label=f"c{n}")
            note(n=n, done=True, after=[checkpoint.id])


while True:
    line = sys.stdin.readline()
    if not line:
        break
    round_no, seed = (int(x) for x in line.split())
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            work(round_no, seed)
        except BaseException:
            with open(journal, "ab") as handle:
                handle.write(orjson.dumps({"error": traceback.format_exc()}) + b"\n")
            code = 3
        os._exit(code)
    sys.stdout.write(f"{pid}\n")
    sys.stdout.flush()
    _, status = os.waitpid(pid, 0)
    sys.stdout.write(f"{status}\n")
    sys.stdout.flush()
"""

KILLS = 110
SUBPROCESS_EVERY = 22  # rounds checked with real `python -m agctl` processes as well


def model_after(before: Snapshot, op: dict[str, Any], keeper: Checkpointer) -> Snapshot:
    """The state once `op` (an intent record of the writer) is done."""
    kind, n = op["op"], op["n"]
    slots = dict(before.slots)
    if kind == "append":
        messages, compressed = slots[op["slot"]]
        slots[op["slot"]] = ((*messages, f"m{n}"), compressed)
    elif kind == "turn":
        messages, compressed = slots[before.current_slot]
        slots[before.current_slot] = ((*messages, f"t{n}", f"r{n}"), compressed)
        return replace(before, turn_count=before.turn_count + 1, slots=slots)
    elif kind == "derive":
        slots[op["slot"]] = slots[op["parent"]]
    elif kind == "rm":
        del slots[op["slot"]]
    elif kind == "compress":
        messages, compressed = slots[op["slot"]]
        start = len(messages) - op["keep"]
        if start > 0:
            if op["strategy"] == "summarize":
                compressed = (f"S{len(compressed) + start}",)
            slots[op["slot"]] = (messages[start:], compressed)
    elif kind == "rollback":
        return checkpoint_snapshot(keeper, op["target"])
    elif kind != "ckpt":
        raise AssertionError(f"unknown operation {op}")
    return replace(before, slots=slots)


@dataclass
class CrashReport:
    kills: int = 0
    completed: int = 0
    interrupted: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    torn_turns: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    leftover_temp_files: int = 0
    checkpoints_verified: int = 0
    subprocess_checks: int = 0
    final_checkpoints: int = 0
    seconds: float = 0.0
    seed: int = 0


class Journal:
    """Reads the writers' log incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_records(self) -> list[dict[str, Any]]:
        try:
            data = self.path.read_bytes()[self.offset :]
        except FileNotFoundError:
            return []
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return [json.loads(line) for line in whole.splitlines()]


def read_line(stream: Any, zygote: subprocess.Popen[str]) -> str:
    line: str = stream.readline()
    assert line, f"the zygote died: {zygote.poll()} {zygote.stderr.read() if zygote.stderr else ''}"
    return line


def check_after_kill(
    report: CrashReport,
    model: Snapshot,
    pending: dict[str, Any] | None,
    store: Store,
    keeper: Checkpointer,
    round_no: int,
) -> tuple[Snapshot, bool]:
    """Compare the disk with the model before / after the interrupted operation.

    Returns the state it resolved to (once any interrupted rollback has been finished),
    and whether it is a turn whose reply is in its slot but whose turn count is not.
    """
    where = f"round {round_no}, interrupted {pending}"
    if pending is None:
        candidates = {"old": model}
    else:
        report.interrupted[pending["op"]] += 1
        candidates = {"old": model, "new": model_after(model, pending, keeper)}
    if store.pending_recovery(SID):
        # The kill came after the commit point: any reader finishes the commit first.
        assert pending is not None, where
        report.outcomes["commit finished by the next reader"] += 1
    live = live_snapshot(store)
    for name, candidate in candidates.items():
        if live == candidate:
            report.outcomes[name] += 1
            return live, False
    report.violations.append(
        f"{where}: the state on disk is neither old nor new:\n"
        f"  live {live}\n  old  {candidates['old']}\n  new  {candidates.get('new')}"
    )
    return live, False


def check_commands(
    report: CrashReport,
    expected: Snapshot,
    number: int,
    env: dict[str, str],
    store: Store,
    keeper: Checkpointer,
    subprocesses: bool,
) -> Snapshot:
    """The CLI still reads and writes; returns the state after its append."""
    if subprocesses:
        report.subprocess_checks += 1
        appended = agctl(env, "-s", SID, "msg", "append", "user", f"m{number - 5}")
        assert appended.returncode == 0, appended.stderr
        append = {"op": "append", "n": number - 5, "slot": "default"}
        expected = model_after(expected, append, keeper)
        listed = agctl(env, "-s", SID, "--json", "msg", "list")
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert tuple(tag(r["role"], r["content"]) for r in rows) == expected.slots["default"][0]
        ckpts = agctl(env, "-s", SID, "--json", "ckpt", "list")
        assert ckpts.returncode == 0, ckpts.stderr
        assert [r["id"] for r in json.loads(ckpts.stdout)] == keeper.ids(SID)
    # The append goes first: it takes the lock, which finishes an interrupted rollback.
    appended_in = in_process(env, "-s", SID, "msg", "append", "user", f"m{number}")
    assert appended_in.exit_code == 0, appended_in.output
    expected = model_after(expected, {"op": "append", "n": number, "slot": "default"}, keeper)
    assert not store.pending_recovery(SID)
    listed_in = in_process(env, "-s", SID, "--json", "msg", "list")
    assert listed_in.exit_code == 0, listed_in.output
    rows = json.loads(listed_in.stdout)
    assert tuple(tag(r["role"], r["content"]) for r in rows) == expected.slots["default"][0]
    slot_list = in_process(env, "-s", SID, "--json", "slot", "list")
    assert slot_list.exit_code == 0, slot_list.output
    assert sorted(r["id"] for r in json.loads(slot_list.stdout)) == sorted(expected.slots)
    ckpt_list = in_process(env, "-s", SID, "--json", "ckpt", "list")
    assert ckpt_list.exit_code == 0, ckpt_list.output
    ids = [r["id"] for r in json.loads(ckpt_list.stdout)]
    assert ids == keeper.ids(SID)
    if ids:  # the newest checkpoint, whatever the kill interrupted, can be rebuilt
        checkpoint_snapshot(keeper, ids[0])
    return expected


def run_crash_torture(base: Path) -> CrashReport:
    started = time.monotonic()
    data_dir = base / "data"
    env = child_env(data_dir, base)
    store = Store(data_dir)
    store.create_session(SID)
    keeper = Checkpointer(store)
    model = live_snapshot(store)
    report = CrashReport()
    journal = Journal(base / "journal.jsonl")
    (base / "zygote.py").write_text(ZYGOTE)
    zygote = subprocess.Popen(
        [sys.executable, str(base / "zygote.py"), str(data_dir), SID, str(journal.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    report.seed = int(os.environ.get("AGCTL_TORTURE_SEED") or random.randrange(2**32))
    rng = random.Random(report.seed)
    seen_temp: set[Path] = set()
    expected_checkpoints: dict[str, Snapshot] = {}
    pid = 0
    try:
        for round_no in range(1, KILLS + 1):
            zygote.stdin.write(f"{round_no} {rng.randrange(2**32)}\n")
            zygote.stdin.flush()
            pid = int(read_line(zygote.stdout, zygote))
            time.sleep(rng.uniform(0.005, 0.080))
            with contextlib.suppress(ProcessLookupError):  # it died on its own: see below
                os.kill(pid, signal.SIGKILL)
            status = int(read_line(zygote.stdout, zygote))
            pid = 0
            records = journal.new_records()
            errors = [r["error"] for r in records if "error" in r]
            assert not errors, errors[0]
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
            report.kills += 1

            pending: dict[str, Any] | None = None
            for record in records:
                if not record.get("done"):
                    assert pending is None, (pending, record)
                    pending = record
                    continue
                assert pending is not None and pending["n"] == record["n"], (pending, record)
                for identifier in record.get("before", []):
                    expected_checkpoints[identifier] = model
                model = model_after(model, pending, keeper)
                for identifier in record.get("after", []):
                    expected_checkpoints[identifier] = model
                report.completed += 1
                pending = None

            model, half_turn = check_after_kill(report, model, pending, store, keeper, round_no)
            problems = sequence_problems(model)
            if problems:
                report.violations.append(f"round {round_no}: {problems}")

            for identifier, state in expected_checkpoints.items():
                actual = checkpoint_snapshot(keeper, identifier)
                if actual != state:
                    report.violations.append(
                        f"checkpoint {identifier}: {actual}\n  expected {state}"
                    )
                report.checkpoints_verified += 1
            expected_checkpoints.clear()

            model = check_commands(
                report,
                model,
                round_no * 100_000 + 99_990,
                env,
                store,
                keeper,
                subprocesses=round_no % SUBPROCESS_EVERY == 0,
            )
            # The temp files a killed writer left are gone once another one has written.
            leftovers = set(temp_files(store.session_dir(SID)))
            if leftovers:
                report.violations.append(f"round {round_no}: {leftovers}")
            seen_temp |= leftovers
            live = live_snapshot(store)
            if half_turn and pending is not None:
                # The turn's reply was written, its turn count not: the correct outcome is
                # that the next writer completes it; otherwise the count stays behind.
                if live == replace(model, turn_count=model.turn_count + 1):
                    report.outcomes["turn completed by the next writer"] += 1
                    model = live
                else:
                    report.torn_turns.append(f"round {round_no}: turn {pending['n']}")
                    report.outcomes["turn written, turn_count not"] += 1
            if live != model:
                report.violations.append(
                    f"round {round_no}: after the CLI append:\n  live {live}\n  model {model}"
                )
                model = live
    finally:
        if pid:  # a writer left running by a failed check
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        zygote.stdin.close()
        zygote.wait(timeout=30)
        if zygote.stdout:
            zygote.stdout.close()
        if zygote.stderr:
            zygote.stderr.close()
    report.leftover_temp_files = len(seen_temp)
    ids = keeper.ids(SID)
    for identifier in ids:  # every checkpoint ever written still rebuilds
        checkpoint_snapshot(keeper, identifier)
    report.final_checkpoints = len(ids)
    report.seconds = time.monotonic() - started
    return report


@pytest.fixture(scope="module")
def crash_report(tmp_path_factory: pytest.TempPathFactory) -> CrashReport:
    report = run_crash_torture(tmp_path_factory.mktemp("crash"))
    print(f"\ncrash torture: {report}")
    return report


def test_kill_9_at_random_moments_leaves_old_or_new_state(crash_report: CrashReport) -> None:
    report = crash_report
    assert report.kills >= 100
    assert report.violations == [], f"AGCTL_TORTURE_SEED={report.seed}"
    # The kills landed inside every kind of write, not only between operations.
    assert set(report.interrupted) >= {"turn", "append", "derive", "rollback", "compress"}
    assert report.completed > report.kills
    assert report.checkpoints_verified > 0
    assert report.subprocess_checks >= 4


def test_a_killed_turn_never_leaves_turn_count_behind(crash_report: CrashReport) -> None:
    # Before f835ff5 (the turn journal) a kill between a turn's slot write and its
    # session write left turn_count one behind for good: 4 to 7 times in 110 kills.
    assert crash_report.torn_turns == []


# ---- 2. concurrency ---------------------------------------------------------------------

WORKERS = 8
OPS = 25

# One process per worker: imports agctl once, waits for the go file, then issues OPS
# random commands through the CLI entry point, recording each exit status and output.
RACER = r"""
import contextlib, io, json, random, sys, time, traceback
from pathlib import Path

from agctl.store.checkpointer import Checkpointer
from agctl.cli import main
from agctl.store import Store

worker, ops, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ready, go, out, session = Path(sys.argv[4]), Path(sys.argv[5]), Path(sys.argv[6]), sys.argv[7]
rng = random.Random(seed)
keeper = Checkpointer(Store())
ready.touch()
while not go.exists():
    time.sleep(0.002)
records = []
for i in range(ops):
    name = f"{worker}-{i}"
    roll = rng.random()
    error = None
    if roll < 0.4:
        op, args = "append", ["msg", "append", "user", f"m{name}"]
    elif roll < 0.6:
        op, args = "turn", ["turn", "send", f"t{name}"]
    elif roll < 0.7:
        op, args = "derive", ["slot", "derive", f"d{name}"]
    elif roll < 0.85:
        op, args = "ckpt", ["ckpt", "create", "--label", f"c{name}"]
    else:
        try:
            ids = keeper.ids(session)
        except Exception:
            ids, error = [], traceback.format_exc()
        if ids:
            op, args = "rollback", ["ckpt", "rollback", rng.choice(ids[:6])]
        else:
            op, args = "ckpt", ["ckpt", "create", "--label", f"c{name}"]
    stdout, stderr = io.StringIO(), io.StringIO()
    start = time.time()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main(["-s", session, "--json", *args], standalone_mode=False) or 0
        except BaseException:
            code, error = "raised", traceback.format_exc()
    records.append(
        {
            "worker": worker, "i": i, "op": op, "args": args, "code": code,
            "stdout": stdout.getvalue(), "stderr": stderr.getvalue(), "error": error,
            "start": start, "end": time.time(),
        }
    )
out.write_text(json.dumps(records))
"""


def wait_for(paths: Sequence[Path], procs: Sequence[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 60
    while not all(p.exists() for p in paths):
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, dead[0].communicate()[1].decode()
        assert time.monotonic() < deadline, "workers never became ready"
        time.sleep(0.01)


@pytest.fixture
def env(isolated_env: Path, tmp_path: Path) -> dict[str, str]:
    return child_env(isolated_env, tmp_path)


def run_racers(tmp_path: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    go = tmp_path / "go"
    seed = random.randrange(2**32)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for w in range(WORKERS):
            argv = [str(w), str(OPS), str(seed + w), str(tmp_path / f"ready-{w}"), str(go)]
            argv += [str(tmp_path / f"out-{w}.json"), SID]
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(script), *argv],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            )
        wait_for([tmp_path / f"ready-{w}" for w in range(WORKERS)], procs)
        go.touch()
        errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0] * WORKERS, errors
    records: list[dict[str, Any]] = []
    for w in range(WORKERS):
        records += json.loads((tmp_path / f"out-{w}.json").read_text())
    return records


def epochs(
    keeper: Checkpointer, store: Store, rollbacks: list[dict[str, Any]]
) -> Iterator[tuple[str, Snapshot, Snapshot]]:
    """(name, state at the start, state at the end) of each stretch between rollbacks.

    Rollbacks are ordered by the checkpoint each wrote of the state it replaced: its id is
    an offset in the append-only log, written under the session lock, so that order is
    the order in which the rollbacks ran.
    """
    ordered = sorted(rollbacks, key=lambda r: checkpoint_offset(r["saved_as"]))
    start = Snapshot(0, "default", {"default": ((), ())})
    for rollback in ordered:
        yield (
            f"before rollback {rollback['restored']} (saved as {rollback['saved_as']})",
            start,
            checkpoint_snapshot(keeper, rollback["saved_as"]),
        )
        start = checkpoint_snapshot(keeper, rollback["restored"])
    yield "final", start, live_snapshot(store)


def test_eight_racing_processes_lose_nothing(
    store: Store, env: dict[str, str], tmp_path: Path, run: Callable[..., Result]
) -> None:
    # A window the offline model never fills: an automatic compression would fold
    # messages away, which this test does not model.
    assert run("config", "set", "context_windows.offline", "10000000").exit_code == 0
    store.create_session(SID)
    started = time.monotonic()
    records = run_racers(tmp_path, env)
    elapsed = time.monotonic() - started

    raised = [r for r in records if r["error"] or "Traceback" in r["stderr"]]
    assert raised == [], raised[0]["error"] or raised[0]["stderr"]
    # A turn whose slot a rollback replaced while the model answered is refused (exit 4,
    # its reply kept in the draft): it must not land on the restored state.
    refused = [
        r
        for r in records
        if r["op"] == "turn" and r["code"] == 4 and "changed while the model" in r["stderr"]
    ]
    failed = [
        (r["args"], r["code"], r["stderr"]) for r in records if r["code"] != 0 and r not in refused
    ]
    assert failed == []
    assert len(records) == WORKERS * OPS

    keeper = Checkpointer(store)
    rollbacks = [json.loads(r["stdout"]) for r in records if r["op"] == "rollback"]
    appended = [f"m{r['worker']}-{r['i']}" for r in records if r["op"] == "append"]
    turns = [f"{r['worker']}-{r['i']}" for r in records if r["op"] == "turn" and r["code"] == 0]
    derived = [f"d{r['worker']}-{r['i']}" for r in records if r["op"] == "derive"]

    # Between two rollbacks the session only grows: the state each rollback replaced is
    # the state the previous one restored plus new messages (and new slots). Every
    # append, turn and derive that reported success is new in exactly one such stretch —
    # present at the end, or removed by a later rollback — and nothing else is new.
    new_messages: list[str] = []
    new_slots: list[str] = []
    for name, start, end in epochs(keeper, store, rollbacks):
        messages = end.slots["default"][0]
        old = start.slots["default"][0]
        assert messages[: len(old)] == old, name
        added = messages[len(old) :]
        assert end.turn_count - start.turn_count == sum(t[0] == "t" for t in added), name
        assert set(start.slots) <= set(end.slots), name
        new_slots += sorted(set(end.slots) - set(start.slots))
        by_worker: dict[str, list[int]] = {}
        for item in added:
            if item[0] == "m":
                worker, _, i = item[1:].partition("-")
                by_worker.setdefault(worker, []).append(int(i))
        assert all(v == sorted(v) for v in by_worker.values()), (name, by_worker)
        for position, item in enumerate(added):
            if item[0] == "t":
                assert added[position + 1 : position + 2] == (f"r{item[1:]}",), (name, item)
        new_messages += added
    assert Counter(new_messages) == Counter(
        appended + [f"t{t}" for t in turns] + [f"r{t}" for t in turns]
    )
    assert sorted(new_slots) == sorted(derived)

    # Every document is valid, every checkpoint rebuilds, and a fresh process reads it all.
    final = live_snapshot(store)
    for identifier in keeper.ids(SID):
        checkpoint_snapshot(keeper, identifier)
    listed = agctl(env, "-s", SID, "--json", "msg", "list")
    assert listed.returncode == 0, listed.stderr
    assert (
        tuple(tag(r["role"], r["content"]) for r in json.loads(listed.stdout))
        == (final.slots["default"][0])
    )
    assert temp_files(store.session_dir(SID)) == []
    print(
        f"\nconcurrency: {len(records)} commands in {elapsed:.1f}s, "
        f"{Counter(r['op'] for r in records)}, {len(rollbacks)} rollbacks, "
        f"{len(refused)} turns refused because a rollback replaced their slot, "
        f"{len(final.slots['default'][0])} messages at the end"
    )


# ---- 3. disk trouble --------------------------------------------------------------------


def file_size_limit(limit: int) -> Callable[[], None]:
    """For preexec_fn: files may not grow past `limit` bytes (EFBIG, SIGXFSZ ignored)."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.fixture
def chatty(run: Callable[..., Result]) -> str:
    """A session with a few messages, a turn and a checkpoint."""
    assert run("session", "new", SID).exit_code == 0
    for text in ("first", "second"):
        assert run("-s", SID, "msg", "append", "user", text).exit_code == 0
    assert run("-s", SID, "turn", "send", "hello").exit_code == 0
    files = Store().files
    assert files is not None
    files.journal(SID).flush()  # an empty journal: emptying it cannot make room later
    return SID


def test_full_disk_append_fails_cleanly(
    chatty: str, env: dict[str, str], isolated_env: Path
) -> None:
    session_dir = isolated_env / "sessions" / chatty
    slot = session_dir / "slots" / "default.json"
    before = documents(session_dir)
    limit = slot.stat().st_size + 64
    result = agctl(
        env, "-s", chatty, "msg", "append", "user", "x" * 4000, preexec_fn=file_size_limit(limit)
    )
    assert_clear_error(result, str(slot), "File too large")
    assert documents(session_dir) == before
    assert temp_files(session_dir) == []
    assert agctl(env, "-s", chatty, "msg", "append", "user", "after").returncode == 0


def test_full_disk_turn_fails_cleanly_and_keeps_the_prompt(
    chatty: str, env: dict[str, str], isolated_env: Path
) -> None:
    session_dir = isolated_env / "sessions" / chatty
    slot = session_dir / "slots" / "default.json"
    before = documents(session_dir)
    limit = slot.stat().st_size + 64
    result = agctl(env, "-s", chatty, "turn", "send", "y" * 300, preexec_fn=file_size_limit(limit))
    assert_clear_error(result, "File too large")
    after = documents(session_dir)
    # The prompt is kept, as documented: as a draft, or in the error when even the draft
    # cannot be written.
    if after.pop("drafts/default.json", None) is None:
        assert "your prompt was:\n" + "y" * 300 in result.stderr, result.stderr
        again = ["turn", "send", "y" * 300]
    else:
        assert "--resume-draft" in result.stderr, result.stderr
        again = ["turn", "send", "--resume-draft"]
    assert after == before
    assert temp_files(session_dir) == []
    resent = agctl(env, "-s", chatty, "--json", *again)
    assert resent.returncode == 0, resent.stderr
    assert json.loads(resent.stdout)["turn"] == 2
    assert Store(isolated_env).load_session(chatty).turn_count == 2


def test_a_turn_whose_session_write_fails_says_what_was_written(
    run: Callable[..., Result], env: dict[str, str], isolated_env: Path
) -> None:
    # A long system prompt makes session.json bigger than the slot: the limit lets the
    # slot write through and stops the session write that follows it.
    assert run("session", "new", SID, "--system", "s" * 8000).exit_code == 0
    assert run("-s", SID, "msg", "append", "user", "hi").exit_code == 0
    assert run("-s", SID, "ckpt", "create").exit_code == 0
    session_dir = isolated_env / "sessions" / SID
    slot = session_dir / "slots" / "default.json"
    limit = slot.stat().st_size + 4096
    assert (session_dir / "session.json").stat().st_size > limit
    result = agctl(env, "-s", SID, "turn", "send", "hello", preexec_fn=file_size_limit(limit))
    assert_clear_error(result, "File too large")
    later = agctl(env, "-s", SID, "msg", "append", "user", "later")  # the next writer
    assert later.returncode == 0, later.stderr
    store = Store(isolated_env)
    contents = [m.text() for m in store.load_slot(SID).messages]
    turns = store.load_session(SID).turn_count
    if contents == ["hi", "later"]:  # nothing was written, as the error may then say
        assert turns == 0
        return
    # The turn was written: whole, and the error must not invite sending it again.
    assert contents[:2] == ["hi", "hello"] and len(contents) == 4 and turns == 1, (
        contents,
        turns,
    )
    assert "nothing was written" not in result.stderr, result.stderr
    assert "--resume-draft" not in result.stderr, result.stderr


# A helper run as root in a mount namespace of its own (`unshare -m`), so that what it
# mounts is seen by it and its children only. "ro DATA": DATA bind-mounted read-only.
# "full DATA MNT": a 1 MB tmpfs on MNT holding a copy of DATA, then filled up. Then it runs
# each command line of the JSON list in argv[4] with the data dir there, and prints the
# results and the digests of every document before and after.
MOUNTER = r"""
import errno, hashlib, json, os, shutil, subprocess, sys
from pathlib import Path

mode, data = sys.argv[1], Path(sys.argv[2])
commands = json.loads(sys.argv[4])


def digests(root):
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in (".lock", "journal")
    }


if mode == "ro":
    subprocess.run(["mount", "--bind", str(data), str(data)], check=True)
    subprocess.run(["mount", "-o", "remount,ro,bind", str(data)], check=True)
else:
    mnt = Path(sys.argv[3])
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    shutil.copytree(data, mnt / "data")
    data = mnt / "data"
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    os.close(fd)
env = {**os.environ, "AGCTL_DATA_DIR": str(data)}
before = digests(data)
results = []
for command in commands:
    done = subprocess.run(
        [sys.executable, "-m", "agctl", *command], env=env, capture_output=True, text=True
    )
    results.append([done.returncode, done.stdout, done.stderr])
print(json.dumps({"data": str(data), "results": results, "before": before, "after": digests(data)}))
"""


def mount_namespace_problem() -> str | None:
    if not shutil.which("unshare") or not shutil.which("mount"):
        return "unshare or mount is not installed"
    if os.geteuid() != 0:
        return "mounting needs root"
    probe = subprocess.run(
        ["unshare", "-m", "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", "/mnt"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        return f"cannot mount in a new mount namespace: {probe.stderr.strip()}"
    return None


def in_namespace(
    tmp_path: Path, env: dict[str, str], mode: str, data: Path, commands: list[list[str]]
) -> dict[str, Any]:
    problem = mount_namespace_problem()
    if problem:
        pytest.skip(f"read-only / full data dir needs a private mount: {problem}")
    script = tmp_path / "mounter.py"
    script.write_text(MOUNTER)
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    done = subprocess.run(
        [
            *("unshare", "-m", "--propagation", "private", sys.executable, str(script)),
            *(mode, str(data), str(mount_point), json.dumps(commands)),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_read_only_data_dir_reads_work_and_writes_fail_cleanly(
    chatty: str, env: dict[str, str], tmp_path: Path, isolated_env: Path, store: Store
) -> None:
    oldest = Checkpointer(store).ids(chatty)[-1]
    writes = [
        ["-s", chatty, "msg", "append", "user", "more"],
        ["-s", chatty, "turn", "send", "more"],
        ["-s", chatty, "slot", "derive", "branch"],
        ["-s", chatty, "ckpt", "create"],
        ["-s", chatty, "ckpt", "rollback", oldest],
        ["-s", chatty, "ctx", "compress", "--keep-recent", "1", "--min-tokens", "0"],
    ]
    reads = [["-s", chatty, "--json", "msg", "list"], ["-s", chatty, "--json", "ckpt", "list"]]
    before = documents(isolated_env)
    outcome = in_namespace(tmp_path, env, "ro", isolated_env, reads + writes)
    for code, stdout, stderr in outcome["results"][: len(reads)]:
        assert code == 0, stderr
        assert json.loads(stdout)
    for command, (code, _, stderr) in zip(writes, outcome["results"][len(reads) :], strict=True):
        assert code == 1, (command, code, stderr)
        assert "Traceback" not in stderr, (command, stderr)
        assert stderr.startswith("agctl: error: "), (command, stderr)
        assert "Read-only file system" in stderr and str(isolated_env) in stderr, (command, stderr)
    assert "your prompt was:\nmore" in outcome["results"][len(reads) + 1][2]
    assert outcome["before"] == outcome["after"]
    assert documents(isolated_env) == before


def test_read_only_data_dir_lists_checkpoints_with_a_stale_index(
    chatty: str, env: dict[str, str], tmp_path: Path, isolated_env: Path
) -> None:
    index = isolated_env / "sessions" / chatty / "checkpoints" / "index.jsonl"
    index.write_text(index.read_text().splitlines(keepends=True)[0])  # as after a kill
    outcome = in_namespace(
        tmp_path, env, "ro", isolated_env, [["-s", chatty, "--json", "ckpt", "list"]]
    )
    code, stdout, stderr = outcome["results"][0]
    assert "Traceback" not in stderr, stderr
    assert code == 0, stderr
    assert len(json.loads(stdout)) == 2


def test_full_tmpfs_fails_cleanly(
    chatty: str, env: dict[str, str], tmp_path: Path, isolated_env: Path
) -> None:
    writes = [
        ["-s", chatty, "msg", "append", "user", "z" * 2000],
        ["-s", chatty, "turn", "send", "z" * 2000],
        ["-s", chatty, "slot", "derive", "branch"],
    ]
    reads = [["-s", chatty, "--json", "msg", "list"]]
    outcome = in_namespace(tmp_path, env, "full", isolated_env, writes + reads)
    data = outcome["data"]
    results = outcome["results"][: len(writes)]
    for command, (code, _, stderr) in zip(writes, results, strict=True):
        assert code == 1, (command, code, stderr)
        assert "Traceback" not in stderr, (command, stderr)
        assert stderr.startswith(f"agctl: error: cannot write {data}/"), (command, stderr)
        assert "No space left on device" in stderr, (command, stderr)
    assert "your prompt was:\n" + "z" * 2000 in outcome["results"][1][2]
    code, stdout, stderr = outcome["results"][-1]
    assert code == 0, stderr
    assert [r["content"] for r in json.loads(stdout)][:2] == ["first", "second"]
    before, after = outcome["before"], outcome["after"]
    assert {k: v for k, v in after.items() if not k.endswith(".tmp")} == before
    assert [k for k in after if k.endswith(".tmp")] == []


def test_full_tmpfs_checkpoint_is_made_whole_or_not_at_all(
    chatty: str, env: dict[str, str], tmp_path: Path, store: Store
) -> None:
    ids = Checkpointer(store).ids(chatty)
    commands = [["-s", chatty, "ckpt", "create"], ["-s", chatty, "--json", "ckpt", "list"]]
    outcome = in_namespace(tmp_path, env, "full", store.root, commands)
    (code, _, stderr), (listed, stdout, _) = outcome["results"]
    assert "Traceback" not in stderr, stderr
    assert listed == 0
    after = [r["id"] for r in json.loads(stdout)]
    if code == 0:
        assert after[1:] == ids
    else:
        assert code == 1 and "No space left on device" in stderr, stderr
        assert after == ids, "the command failed, yet the checkpoint was made"
