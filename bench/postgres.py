"""agctl on PostgreSQL next to the file store, measured in the same run (issue 14).

Usage: python bench/postgres.py [--runs N] [--quick] [--source] [--json]

Starts two throwaway servers of its own (tests/pgserver.py: initdb + pg_ctl, as an
unprivileged user when run as root, a Unix socket only): one with the test suite's
settings (fsync, synchronous_commit and full_page_writes off), one with PostgreSQL's
durable defaults (on), so each figure is shown both ways; the file store fsyncs every
commit. Both log lock waits (log_lock_waits=on, deadlock_timeout=10ms), which is how the
concurrent writers' waits are counted: from the server's own log. Measured:
- `agctl turn send` at 10 and 5,000 messages (installed wheel, fake OpenAI server on
  127.0.0.1), file and PostgreSQL runs interleaved round by round; target <= 1.3x file;
- `turn replay` of 1,000 offline turns with checkpoints (library), per-turn and --sync end,
  target >= 100 turns/s, the file store's rate of the same run beside it;
- 8 writer processes on 8 sessions: lock waits in the server log (0 expected; 8 writers on
  one session, the control, must show some) and turns/s against one writer (>= 1.6x);
- TAB completion `agctl slot use <TAB>` on PostgreSQL and on the file store (shown);
- the statements one `turn send` runs (log_statement=all), shown.
Without server binaries or psycopg it prints why and measures nothing. Never part of the
test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from timing import interleaved_medians, row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fake_openai import FakeOpenAI
from installed import Installed, installed_wheel, source_tree
from pgserver import PgServer, find_bindir
from pgserver import _server_user as server_user
from replay import OPTIONS, transcript
from turn import fill

from agctl.providers.offline import OfflineProvider
from agctl.store import Store
from agctl.turn.transcripts import replay as run_replay

DATABASE = "bench"
SCHEMA = "bench"
# What every bench server logs: a lock wait longer than deadlock_timeout is one line
# "... still waiting for ShareLock on transaction ..." (the waits counted here).
LOCK_LOGGING = "-c log_lock_waits=on -c deadlock_timeout=10ms"
WAIT_LINE = "still waiting for"
# The test suite's settings, and PostgreSQL's durable defaults.
DURABILITY = {
    "fsync off": "-c fsync=off -c synchronous_commit=off -c full_page_writes=off",
    "fsync on": "-c fsync=on -c synchronous_commit=on -c full_page_writes=on",
}
WRITERS = 8


@dataclass
class BenchServer(PgServer):
    """A test server (tests/pgserver.py) started with the bench's settings."""

    durability: str = "fsync off"

    def start(self) -> None:
        options = (
            f"-c listen_addresses='' -k {self.socket_dir} -c max_connections=200 "
            f"{DURABILITY[self.durability]} {LOCK_LOGGING}"
        )
        self.run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60",
                 "-o", options, "start")  # fmt: skip

    def log_size(self) -> int:
        return self.logfile.stat().st_size

    def log_since(self, offset: int) -> str:
        with self.logfile.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def store(self, local_dir: Path) -> Store:
        return Store(local_dir, url=self.url(DATABASE), schema=SCHEMA)


def unavailable() -> str | None:
    """Why no server can be started here (None: one can)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[postgres]')"
    if find_bindir() is None:
        return "no PostgreSQL server binaries (pg_config --bindir, /usr/lib/postgresql/*/bin)"
    return None


@contextlib.contextmanager
def servers(durabilities: Sequence[str] = tuple(DURABILITY)) -> Iterator[dict[str, BenchServer]]:
    """A bench server of each durability (default: both), by durability, each with an
    empty database; stopped after."""
    bindir = find_bindir()
    assert bindir is not None
    user = server_user()
    started: dict[str, BenchServer] = {}
    try:
        for durability in durabilities:
            base = Path(tempfile.mkdtemp(prefix="agctl-pgbench-"))
            server = BenchServer(bindir, base, user, durability)
            started[durability] = server
            server.init()
            server.start()
            server.execute(f"CREATE DATABASE {DATABASE}")
        yield started
    finally:
        for server in started.values():
            with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
                server.stop()
            shutil.rmtree(server.base, ignore_errors=True)


# ---- turn send through the CLI --------------------------------------------------------


def turn_env(agctl: Installed, local: Path, base_url: str) -> dict[str, str]:
    config = local / "config.json"
    config.write_text(json.dumps({"context_windows": {"fake-model": 100_000_000}}))
    return {
        **agctl.env(dict(os.environ)),
        "AGCTL_DATA_DIR": str(local),
        "AGCTL_CONFIG": str(config),
        "AGCTL_PROVIDER": "openai",
        "AGCTL_BASE_URL": base_url,
        "AGCTL_MODEL": "fake-model",
        "AGCTL_API_KEY": "bench-key",
    }


def pg_env(env: dict[str, str], server: BenchServer) -> dict[str, str]:
    return {**env, "AGCTL_STORE": server.url(DATABASE), "AGCTL_STORE_SCHEMA": SCHEMA}


def turns(
    runs: int, sizes: list[int], agctl: Installed, pg: dict[str, BenchServer], scratch: Path
) -> list[dict[str, Any]]:
    """`turn send` at each size on the file store and on each server, interleaved; and
    the statements one 10-message turn runs on the server (log_statement=all)."""
    with FakeOpenAI() as server:
        local = scratch / "turns"
        local.mkdir(mode=0o700)
        env = turn_env(agctl, local, server.base_url)
        stores = {"file": (Store(local), env)}
        for durability, pg_server in pg.items():
            stores[durability] = (pg_server.store(local), pg_env(env, pg_server))
        commands = {}
        for size in sizes:
            for kind, (store, kind_env) in stores.items():
                fill(store, f"s{size}", size)
                argv = [*agctl.agctl, "-s", f"s{size}", "turn", "send", "hi", "--no-stream"]
                commands[f"{kind} {size}"] = (argv, kind_env)
        for store, _ in stores.values():
            store.close()
        imports = "import click, pydantic, httpx"
        commands["floor"] = ([agctl.python, "-c", imports], env)
        commands["floor+psycopg"] = ([agctl.python, "-c", f"{imports}, psycopg"], env)
        times = interleaved_medians(commands, runs)
        turn = [*agctl.agctl, "-s", f"s{sizes[0]}", "turn", "send", "hi"]
        statements, connections = statements_of(pg["fsync off"], turn, pg_env(env, pg["fsync off"]))
    psycopg_ms = (times["floor+psycopg"] - times["floor"]) * 1000
    out = []
    for size in sizes:
        file = times[f"file {size}"]
        for durability in pg:
            seconds = times[f"{durability} {size}"]
            ratio = seconds / file
            out.append(
                row(
                    f"turn send, {size} msgs, PostgreSQL {durability}",
                    seconds * 1000,
                    "ms",
                    f"file store {file * 1000:.0f} ms; import psycopg {psycopg_ms:+.0f} ms",
                    ratio,
                    "<= 1.3x file",
                    ratio <= 1.3,
                )
            )
            rest = seconds * 1000 - psycopg_ms
            out.append(
                row(
                    "  the same, less import psycopg",
                    rest,
                    "ms",
                    "what agctl does on PostgreSQL, against the file store's whole turn",
                    rest / (file * 1000),
                    "(shown)",
                    None,
                )
            )
    out.append(
        row(
            f"  statements of one turn send, {sizes[0]} msgs",
            statements,
            "stmts",
            f"log_statement=all; over {connections} connection(s)",
            None,
            "(shown)",
            None,
        )
    )
    return out


def statements_of(server: BenchServer, argv: list[str], env: dict[str, str]) -> tuple[int, int]:
    """How many statements the command runs on the server, and over how many
    connections: log_statement=all for the bench database (new connections take it)
    while it runs once."""
    server.execute(f"ALTER DATABASE {DATABASE} SET log_statement = 'all'")
    try:
        offset = server.log_size()
        subprocess.run([*argv, "--no-stream"], env=env, capture_output=True, check=True)
        lines = [
            line
            for line in server.log_since(offset).splitlines()
            if "LOG:  statement: " in line or "LOG:  execute " in line
        ]
        # The default log_line_prefix ('%m [%p] ') names each statement's server process.
        pids = {line.split("[", 1)[1].split("]", 1)[0] for line in lines if "[" in line}
        return len(lines), len(pids)
    finally:
        server.execute(f"ALTER DATABASE {DATABASE} RESET log_statement")


# ---- turn replay in one process ---------------------------------------------------------


def replay_rate(store: Store, session_id: str, count: int, sync: str) -> float:
    """Turns per second of one replay of `count` offline turns into a new session."""
    store.create_session(session_id, system_prompt="You are a benchmark.")
    started = time.perf_counter()
    summary = run_replay(
        store, session_id, transcript(count), OfflineProvider(), OPTIONS, sync=sync
    )
    elapsed = time.perf_counter() - started
    assert summary.sent == count, summary
    return count / elapsed


def replays(count: int, pg: dict[str, BenchServer], scratch: Path) -> list[dict[str, Any]]:
    out = []
    for sync in ("per-turn", "end"):
        local = scratch / f"replay-{sync}"
        local.mkdir(mode=0o700)
        file = replay_rate(Store(local), "bench", count, sync)
        for durability, server in pg.items():
            store = server.store(local)
            try:
                rate = replay_rate(store, f"replay-{sync}", count, sync)
            finally:
                store.close()
            out.append(
                row(
                    f"turn replay, {count} turns, sync {sync}, PostgreSQL {durability}",
                    rate,
                    "turns/s",
                    f"file store {file:.0f} turns/s",
                    rate / file,
                    ">= 100",
                    rate >= 100,
                )
            )
    return out


# ---- concurrent writers -----------------------------------------------------------------


def writer(url: str, local: str, session_id: str, count: int, barrier: Any, times: Any) -> None:
    """One writer process: a warm-up turn (connection, imports), the start barrier, then
    `count` offline turns in a row; puts (start, end) on `times`."""
    from agctl.turn.send import send_turn

    store = Store(Path(local), url=url, schema=SCHEMA)
    provider = OfflineProvider()
    last = send_turn(store, session_id, "warm up", provider, OPTIONS).slot
    barrier.wait()
    started = time.monotonic()
    for i in range(count):
        last = send_turn(store, session_id, f"turn {i}", provider, OPTIONS, reuse=last).slot
    times.put((started, time.monotonic()))
    store.close()


def writers_run(
    server: BenchServer, local: Path, sessions: list[str], count: int
) -> tuple[float, int]:
    """Turns/s of one writer process per entry of `sessions` (wall time from the start
    barrier to the last writer's end), and the lock waits the server logged meanwhile."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(len(sessions))
    times = context.Queue()
    offset = server.log_size()
    url = server.url(DATABASE)
    processes = [
        context.Process(target=writer, args=(url, str(local), sid, count, barrier, times))
        for sid in sessions
    ]
    for process in processes:
        process.start()
    spans = [times.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
        if process.exitcode:
            raise RuntimeError(f"a writer process failed (exit {process.exitcode})")
    wall = max(end for _, end in spans) - min(start for start, _ in spans)
    waits = server.log_since(offset).count(WAIT_LINE)
    return len(sessions) * count / wall, waits


def spin(work: int, barrier: Any, times: Any) -> None:
    """Pure CPU work after the start barrier: how much of the machine a process gets."""
    barrier.wait()
    started = time.monotonic()
    sum(i * i for i in range(work))
    times.put((started, time.monotonic()))


def cpu_parallelism(work: int = 3_000_000) -> float:
    """How many processes' worth of CPU the machine gives now: cores busy processes' work
    per second over one's (at most the core count; less when others use the machine)."""
    context = multiprocessing.get_context("spawn")
    rates = []
    for count in (1, os.cpu_count() or 1):
        barrier, times = context.Barrier(count), context.Queue()
        processes = [
            context.Process(target=spin, args=(work, barrier, times)) for _ in range(count)
        ]
        for process in processes:
            process.start()
        spans = [times.get(timeout=600) for _ in processes]
        for process in processes:
            process.join()
        rates.append(count / (max(end for _, end in spans) - min(start for start, _ in spans)))
    return rates[1] / rates[0]


def concurrency(
    count: int, rounds: int, pg: dict[str, BenchServer], scratch: Path
) -> list[dict[str, Any]]:
    """8 writers on 8 sessions, 1 writer, and 8 writers on one session, interleaved for
    `rounds` rounds on each server: median rates, total waits."""
    out = []
    for durability, server in pg.items():
        local = scratch / f"writers-{durability.replace(' ', '-')}"
        local.mkdir(mode=0o700)
        store = server.store(local)
        kinds = {
            "one": lambda r: [f"w{r}-solo"],
            "many": lambda r: [f"w{r}-{i}" for i in range(WRITERS)],
            "shared": lambda r: [f"w{r}-shared"] * WRITERS,
        }
        for r in range(rounds):
            for sessions in kinds.values():
                for sid in set(sessions(r)):
                    store.create_session(sid, system_prompt="You are a benchmark.")
        store.close()
        rates: dict[str, list[float]] = {kind: [] for kind in kinds}
        waits = dict.fromkeys(kinds, 0)
        for r in range(rounds):
            for kind, sessions in kinds.items():
                rate, found = writers_run(server, local, sessions(r), count)
                rates[kind].append(rate)
                waits[kind] += found
        one, many, shared = (statistics.median(rates[k]) for k in ("one", "many", "shared"))
        cores = os.cpu_count() or 1
        parallel = cpu_parallelism()
        runs_said = f"{rounds} runs x {WRITERS} writers x {count} turns"
        out += [
            row(
                f"{WRITERS} writers, {WRITERS} sessions: lock waits, {durability}",
                waits["many"],
                "waits",
                f"control, {WRITERS} writers on 1 session: {waits['shared']} waits",
                None,
                "0 (control > 0)",
                waits["many"] == 0 and waits["shared"] > 0,
            ),
            row(
                f"{WRITERS} writers, {WRITERS} sessions: throughput, {durability}",
                many,
                "turns/s",
                f"1 writer {one:.0f} turns/s; {cores} cores giving {parallel:.2f}x one now; "
                f"{runs_said}",
                many / one,
                ">= 1.6x 1 writer",
                many / one >= 1.6,
            ),
            row(
                f"  {WRITERS} writers on 1 session (control), {durability}",
                shared,
                "turns/s",
                f"1 writer {one:.0f} turns/s",
                shared / one,
                "(shown)",
                None,
            ),
        ]
    return out


# ---- TAB completion ----------------------------------------------------------------------


def completion(
    runs: int, agctl: Installed, pg: dict[str, BenchServer], scratch: Path
) -> list[dict[str, Any]]:
    local = scratch / "tab"
    local.mkdir(mode=0o700)
    server = pg["fsync off"]
    env = agctl.env({**os.environ, "AGCTL_DATA_DIR": str(local)})
    tab_env = {
        **env,
        "_AGCTL_COMPLETE": "bash_complete",
        "COMP_WORDS": "agctl slot use ",
        "COMP_CWORD": "3",
    }
    commands = {}
    for kind, store, kind_env in (
        ("file", Store(local), tab_env),
        ("pg", server.store(local), pg_env(tab_env, server)),
    ):
        for i in range(100):
            store.create_session(f"s{i:03d}")
        for name in ("alpha", "beta"):
            store.create_slot("s000", name)
        store.set_current_session("s000")
        store.close()
        done = subprocess.run(agctl.agctl, env=kind_env, capture_output=True, text=True)
        if "alpha" not in done.stdout:
            raise RuntimeError(f"TAB on the {kind} store completed to {done.stdout!r}")
        commands[kind] = (agctl.agctl, kind_env)
    times = interleaved_medians(commands, runs)
    ratio = times["pg"] / times["file"]
    return [
        row(
            "TAB: agctl slot use <TAB>, PostgreSQL",
            times["pg"] * 1000,
            "ms",
            f"file store {times['file'] * 1000:.0f} ms",
            ratio,
            "(shown)",
            None,
        )
    ]


# ---- the whole ------------------------------------------------------------------------------


def measure(runs: int, quick: bool, agctl: Installed) -> dict[str, Any]:
    why = unavailable()
    if why is not None:
        return {"skipped": why, "rows": []}
    sizes = [10, 100] if quick else [10, 5000]
    with servers() as pg, tempfile.TemporaryDirectory(prefix="agctl-pgbench-") as tmp:
        scratch = Path(tmp)
        rows = [
            *turns(runs, sizes, agctl, pg, scratch),
            *replays(100 if quick else 1000, pg, scratch),
            *concurrency(20 if quick else 100, 1 if quick else 3, pg, scratch),
            *completion(runs, agctl, pg, scratch),
        ]
    return {"skipped": None, "rows": rows}


NOTES = (
    "servers: a Unix socket only; 'fsync off' is the test suite's server (fsync,",
    "  synchronous_commit, full_page_writes off), 'fsync on' PostgreSQL's durable defaults;",
    "  the file store fsyncs each commit.",
    f"writers: one process each, offline turns with checkpoints; on {os.cpu_count()} cores the",
    "  client and the server share the CPU, so throughput scales roughly as",
    "  min(writers, cores); a bigger machine would give more, up to the writer count",
    "  (with fsync on, also as commits are flushed together).",
)


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'benchmark':54} {'value':>9} {'unit':8} {'ratio':>6}  {'target':17} met  reference")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        met = {True: "yes", False: "NO", None: "-"}[r["met"]]
        print(
            f"{r['name']:54} {r['value']:9.1f} {r['unit']:8} {ratio:>6}  {r['target']:17} "
            f"{met:4} {r['reference']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="Smaller sizes, fewer runs.")
    parser.add_argument(
        "--source", action="store_true", help="Time python -m agctl from the source tree."
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    with contextlib.ExitStack() as stack:
        agctl = source_tree()
        if not args.source:
            agctl = stack.enter_context(installed_wheel())
        result = measure(runs, args.quick, agctl)
    if args.json:
        print(json.dumps({"runs": runs, "form": agctl.form, **result}, indent=2))
        return
    if result["skipped"]:
        print(f"PostgreSQL benchmarks skipped: {result['skipped']}")
        return
    print(f"commands timed as: {agctl.form}; load average {os.getloadavg()[0]:.2f}")
    print_table(result["rows"])
    print("\n".join(NOTES))


if __name__ == "__main__":
    main()
