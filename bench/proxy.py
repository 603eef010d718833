"""`agctl serve`'s cost per turn: the same client calling the same upstream directly and
through a real `agctl serve` process, in the same run (issue 29: under 15 ms median).

Usage: python bench/run.py --only serve [--quick] [--source] [--json]
       python bench/proxy.py [--quick] [--against REV] [--json]
(--against REV: a server of the wheel of commit REV too, before a change, in the same rounds)
The upstream is tests/fake_openai.py on 127.0.0.1 (echo replies), in this process; the
client is httpx, one per conversation, keeping its connection, its JSON made with the
standard library (the `openai` SDK spends 130 ms of its own making a request of 1,000
messages, which would hide what is measured); `serve` runs from the measured form (the
installed wheel by default). Measured:
- the latency a turn gains through `serve`: its median less the direct call's (the p90s
  too), on a conversation of 10 and of 1,000 messages, for a client that sends only its
  new message (its session named by path) and for one that resends its whole history
  (1,000 messages a request; its session the fingerprint finds). The direct call sends
  the whole history, as `serve` does upstream. Each round makes one turn of every kind,
  so a change in the machine's load touches them alike, and every request the upstream
  got is checked to hold the whole conversation;
- turns per second of 8 clients on 8 sessions at once, against the same 8 clients calling
  the upstream directly;
- on PostgreSQL (a throwaway server, bench/postgres.py's, fsync off), in the same rounds:
  the turn of a client sending only its new message, against the file store's, with what
  `import psycopg` costs a command beside it: a warm server pays that once, at its start.
Never part of the test suite's pass/fail.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fake_openai import FakeOpenAI, RecordedRequest
from installed import Installed, installed_wheel
from postgres import pg_env, print_table, servers, turn_env, unavailable
from serving import serving
from timing import interleaved_medians, row

from agctl.store import Store

MODEL = "fake-model"
SIZES = (10, 1000)
CLIENTS = 8
TARGET_MS = 15.0
# How a client talks: straight to the upstream (the reference), or through `serve`
# sending only its new message, or resending its whole history.
DIRECT, NEW, WHOLE = "direct", "new message", "whole history"
POSTGRES = "new message, PostgreSQL"
# The clients of a server of another build (`measure`'s `against`) bear this.
BEFORE = "before"
DURABILITY = "fsync off"


class Upstream(FakeOpenAI):
    """The fake upstream keeping of each request only how many messages it held (a run
    sends thousands of requests of 1,000 messages)."""

    def __init__(self) -> None:
        super().__init__(model=MODEL)
        self.counts: list[int] = []

    def _record(self, request: RecordedRequest) -> None:
        body = request.body
        with self._lock:
            self.counts.append(len(body["messages"]) if isinstance(body, dict) else -1)


def conversation(size: int, tag: str) -> list[dict[str, Any]]:
    """A system prompt (`tag` in it, so each conversation has its own fingerprint) and
    `size` messages, user and assistant in turn, as a client keeps them."""
    return [
        {"role": "system", "content": f"You are a benchmark ({tag})."},
        *(
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "x" * 200}
            for i in range(size)
        ),
    ]


def open_session(store: Store, session: str, messages: list[dict[str, Any]]) -> None:
    """`session` in `store` holding the conversation `messages` (its system prompt first)."""
    from agctl.context.models import Message

    system, *rest = messages
    store.create_session(session, system_prompt=system["content"])
    parsed = [Message.from_openai(message) for message in rest]
    store.update_slot(session, None, lambda slot: slot.extend(parsed))


@dataclass
class Client:
    """One client's conversation: its HTTP client (keeping its connection), and the history
    it resends (None: it sends only its new message)."""

    base_url: str
    history: list[dict[str, Any]] | None
    turns: int = 0
    http: Any = field(init=False)

    def __post_init__(self) -> None:
        import httpx

        self.http = httpx.Client(base_url=self.base_url, timeout=120)

    def turn(self) -> float:
        """The seconds one turn takes, as the client waits for it: its request made and
        sent, the reply read and parsed."""
        message = {"role": "user", "content": f"turn {self.turns}"}
        started = time.perf_counter()
        sent = [message] if self.history is None else [*self.history, message]
        body = json.dumps({"model": MODEL, "messages": sent}).encode()
        response = self.http.post(
            "/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        response.raise_for_status()
        text = response.json()["choices"][0]["message"]["content"]
        elapsed = time.perf_counter() - started
        if text != f"echo: turn {self.turns}":
            raise RuntimeError(f"{self.base_url} answered {text!r} to turn {self.turns}")
        if self.history is not None:
            self.history += [message, {"role": "assistant", "content": text}]
        self.turns += 1
        return elapsed

    def close(self) -> None:
        self.http.close()


def path_url(url: str, session: str) -> str:
    """The base URL that names `session` by path, of a server at `url` (…/v1)."""
    return f"{url.removesuffix('/v1')}/s/{session}/v1"


def rounds(
    clients: dict[tuple[int, str], Client], turns: int, upstream: Upstream
) -> dict[tuple[int, str], list[float]]:
    """Each client's turn seconds, one turn of each per round, after one unmeasured round;
    every request the upstream got is checked to hold the system prompt, the whole
    conversation and the new message."""
    samples: dict[tuple[int, str], list[float]] = {key: [] for key in clients}
    before = len(upstream.counts)
    expected = []
    for number in range(turns + 1):
        for (size, style), client in clients.items():
            seconds = client.turn()
            expected.append(1 + size + 2 * number + 1)
            if number:
                samples[(size, style)].append(seconds)
    got = upstream.counts[before:]
    if got != expected:
        wrong = next(i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b)
        raise RuntimeError(
            f"the upstream's request {wrong} held {got[wrong]} messages, not {expected[wrong]}"
        )
    return samples


def rate(clients: list[Client], turns: int) -> float:
    """Turns per second of `clients` at once, `turns` each (after one turn each to warm,
    a barrier, then the wall time from the first start to the last end)."""
    barrier = threading.Barrier(len(clients))

    def run(client: Client) -> tuple[float, float]:
        client.turn()
        barrier.wait(timeout=120)
        started = time.perf_counter()
        for _ in range(turns):
            client.turn()
        return started, time.perf_counter()

    with ThreadPoolExecutor(len(clients)) as pool:
        spans = list(pool.map(run, clients))
    return len(clients) * turns / (max(end for _, end in spans) - min(s for s, _ in spans))


def summary(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "p90": statistics.quantiles(samples, n=10)[-1]}


def measure(
    runs: int, quick: bool, agctl: Installed, against: Installed | None = None
) -> dict[str, Any]:
    """Per-turn medians and p90s by size and client style (seconds), the rates of 8
    clients direct and served, and what PostgreSQL adds (or why it was skipped); with
    `against` (another build: before a change), its served turns and rate too, in the
    same rounds."""
    turns = 15 if quick else max(40, runs * 4)
    together_turns, together_rounds = (10, 1) if quick else (25, 3)
    skipped = unavailable()
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agctl-serve-")))
        upstream = stack.enter_context(Upstream())
        clients: dict[tuple[int, str], Client] = {}
        stores: dict[str, tuple[Store, str]] = {}
        for kind in ("file", "postgres", BEFORE):
            if (kind == "postgres" and skipped is not None) or (kind == BEFORE and not against):
                continue
            form = against if kind == BEFORE and against is not None else agctl
            local = scratch / kind
            local.mkdir(mode=0o700)
            env = turn_env(form, local, upstream.base_url)
            if kind == "postgres":
                pg = stack.enter_context(servers((DURABILITY,)))[DURABILITY]
                env, store = pg_env(env, pg), pg.store(local)
            else:
                store = Store(local)
            stack.callback(store.close)
            url, _ = stack.enter_context(serving(env, command=form.agctl))
            stores[kind] = (store, url)
        file_store, url = stores["file"]

        def client(base_url: str, history: list[dict[str, Any]] | None) -> Client:
            made = Client(base_url, history)
            stack.callback(made.close)
            return made

        for size in SIZES:
            clients[(size, DIRECT)] = client(
                upstream.base_url, conversation(size, f"direct {size}")
            )
            open_session(file_store, f"s{size}", conversation(size, f"new {size}"))
            clients[(size, NEW)] = client(path_url(url, f"s{size}"), None)
            clients[(size, WHOLE)] = client(url, conversation(size, f"whole {size}"))
            if "postgres" in stores:
                pg_store, pg_url = stores["postgres"]
                open_session(pg_store, f"s{size}", conversation(size, f"new {size}"))
                clients[(size, POSTGRES)] = client(path_url(pg_url, f"s{size}"), None)
            if BEFORE in stores:
                old_store, old_url = stores[BEFORE]
                open_session(old_store, f"s{size}", conversation(size, f"new {size}"))
                clients[(size, f"{NEW} {BEFORE}")] = client(path_url(old_url, f"s{size}"), None)
                history = conversation(size, f"whole {size}")
                clients[(size, f"{WHOLE} {BEFORE}")] = client(old_url, history)
        samples = rounds(clients, turns, upstream)
        # The servers the 8 clients talk to, by what their rate is called.
        servers_of = {"served": stores["file"]}
        if BEFORE in stores:
            servers_of[BEFORE] = stores[BEFORE]
        together: dict[str, list[Client]] = {DIRECT: []} | {kind: [] for kind in servers_of}
        for i in range(CLIENTS):
            together[DIRECT].append(client(upstream.base_url, conversation(10, f"client {i}")))
            for kind, (store, base) in servers_of.items():
                open_session(store, f"c{i}", conversation(10, f"client {i}"))
                together[kind].append(client(path_url(base, f"c{i}"), None))
        rates: dict[str, list[float]] = {kind: [] for kind in together}
        for _ in range(together_rounds):
            for kind, kind_clients in together.items():
                rates[kind].append(rate(kind_clients, together_turns))
        imports = None
        if "postgres" in stores:
            env = agctl.env(dict(os.environ))
            floor = "import click, pydantic, httpx"
            times = interleaved_medians(
                {
                    "floor": ([agctl.python, "-c", floor], env),
                    "psycopg": ([agctl.python, "-c", f"{floor}, psycopg"], env),
                },
                runs,
            )
            imports = times["psycopg"] - times["floor"]
    return {
        "turns": turns,
        "latency": {f"{size} {style}": summary(s) for (size, style), s in samples.items()},
        "rate": {kind: statistics.median(r) for kind, r in rates.items()},
        "together": f"{together_rounds} runs x {CLIENTS} clients x {together_turns} turns",
        "import_psycopg": imports,
        "skipped": skipped,
        "against": against.form if against is not None else None,
    }


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's rows: each served turn's added latency against the direct call's (the
    target), the rate of 8 clients, and PostgreSQL's turn against the file store's."""
    latency, out = result["latency"], []
    turns = result["turns"]
    for size in SIZES:
        direct = latency[f"{size} {DIRECT}"]
        for style in (NEW, WHOLE):
            served = latency[f"{size} {style}"]
            added = (served["median"] - direct["median"]) * 1000
            out.append(
                row(
                    f"serve: added latency, {size} msgs, {style}",
                    added,
                    "ms",
                    f"direct {direct['median'] * 1000:.1f} ms, served "
                    f"{served['median'] * 1000:.1f} ms (medians of {turns} turns)",
                    served["median"] / direct["median"],
                    f"< {TARGET_MS:g} ms",
                    added < TARGET_MS,
                )
            )
            out.append(
                row(
                    "  the same at p90",
                    (served["p90"] - direct["p90"]) * 1000,
                    "ms",
                    f"direct {direct['p90'] * 1000:.1f} ms, served {served['p90'] * 1000:.1f} ms",
                    served["p90"] / direct["p90"],
                    "(shown)",
                    None,
                )
            )
            before = latency.get(f"{size} {style} {BEFORE}")
            if before is not None:
                added = (before["median"] - direct["median"]) * 1000
                out.append(
                    row(
                        "  the same before (the other build)",
                        added,
                        "ms",
                        f"served {before['median'] * 1000:.1f} ms, p90 "
                        f"{before['p90'] * 1000:.1f} ms",
                        before["median"] / direct["median"],
                        f"< {TARGET_MS:g} ms",
                        added < TARGET_MS,
                    )
                )
    rates = result["rate"]
    out.append(
        row(
            f"serve: {CLIENTS} clients on {CLIENTS} sessions, 10 msgs",
            rates["served"],
            "turns/s",
            f"the same clients direct {rates[DIRECT]:.0f} turns/s; {os.cpu_count()} cores; "
            f"{result['together']}",
            rates["served"] / rates[DIRECT],
            "(shown)",
            None,
        )
    )
    if BEFORE in rates:
        out.append(
            row(
                "  the same before (the other build)",
                rates[BEFORE],
                "turns/s",
                f"the same clients direct {rates[DIRECT]:.0f} turns/s",
                rates[BEFORE] / rates[DIRECT],
                "(shown)",
                None,
            )
        )
    if result["skipped"] is not None:
        out.append(row("serve on PostgreSQL", 0, "-", result["skipped"], None, "skipped", None))
        return out
    imports = result["import_psycopg"] * 1000
    for size in SIZES:
        file, pg = latency[f"{size} {NEW}"]["median"], latency[f"{size} {POSTGRES}"]["median"]
        extra = (pg - file) * 1000
        out.append(
            row(
                f"serve on PostgreSQL {DURABILITY}: turn's extra, {size} msgs",
                extra,
                "ms",
                f"served on PostgreSQL {pg * 1000:.1f} ms, on files {file * 1000:.1f} ms; "
                f"import psycopg {imports:.0f} ms",
                pg / file,
                "< import psycopg",
                extra < imports,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="Fewer turns.")
    parser.add_argument(
        "--against",
        metavar="REV",
        help="Also serve from the wheel of commit REV (before a change), in the same rounds.",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        agctl = stack.enter_context(installed_wheel())
        against = stack.enter_context(installed_wheel(args.against)) if args.against else None
        result = measure(args.runs, args.quick, agctl, against)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"commands timed as: {agctl.form}; load average {os.getloadavg()[0]:.2f}")
    if against is not None:
        print(f"the other build: {against.form}")
    print_table(rows(result))


if __name__ == "__main__":
    main()
