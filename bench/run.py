"""All of agctl's benchmarks in one table, each next to a reference measured in the same run.

Usage: python bench/run.py [--runs N] [--quick] [--source] [--only SECTION]... [--json]
Medians over N runs (default 11); these machines are shared and noisy, so every figure is
given as a ratio to its reference as well. Never part of the test suite's pass/fail.
Commands are timed as users run them, from this tree's wheel installed (bytecode compiled)
in a temporary venv, each against the same venv's python; --source times `python -m agctl`
from the tree instead. The table's first line says which form was measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from timing import instructions, interleaved_medians, row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from cache import measure as measure_cache
from cache import rows as cache_rows
from checkpoints import measure as measure_checkpoints
from clearing import measure as measure_clearing
from clearing import rows as clearing_rows
from fake_openai import FakeOpenAI
from graph import measure as measure_graph
from graph_html import measure as measure_graph_html
from installed import Installed, installed_wheel, source_tree
from postgres import NOTES as POSTGRES_NOTES
from postgres import measure as measure_postgres
from proxy import measure as measure_proxy
from proxy import rows as proxy_rows
from replay import measure as measure_replay
from replay import sync_modes
from search import measure as measure_search
from tokens import corpus
from turn import fill
from wire_overhead import measure as measure_wires
from wire_overhead import rows as wire_rows

from agctl.context.tokens import estimate_text
from agctl.store import Store


@contextlib.contextmanager
def measured_form(source: bool) -> Iterator[Installed]:
    """This tree's installed wheel, or the source tree if asked or if no wheel builds."""
    with contextlib.ExitStack() as stack:
        form = source_tree()
        if not source:
            try:
                form = stack.enter_context(installed_wheel())
            except (subprocess.CalledProcessError, RuntimeError, ValueError) as exc:
                print(f"no wheel builds offline ({exc}); timing the source tree", file=sys.stderr)
        yield form


def startup(runs: int, agctl: Installed) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(tmp)
        for i in range(100):
            store.create_session(f"s{i:03d}")
        for name in ("alpha", "beta"):
            store.create_slot("s000", name)
        store.set_current_session("s000")
        env = agctl.env({**os.environ, "AGCTL_DATA_DIR": tmp})
        tab_env = {
            **env,
            "_AGCTL_COMPLETE": "bash_complete",
            "COMP_WORDS": "agctl slot use ",
            "COMP_CWORD": "3",
        }
        commands = {
            "click": ([agctl.python, "-c", "import click"], env),
            "help": ([*agctl.agctl, "--help"], env),
            "list": ([*agctl.agctl, "session", "list"], env),
            "tab": (agctl.agctl, tab_env),
        }
        times = interleaved_medians(commands, runs)
        counted = instructions([commands["click"], commands["help"]], agctl)
    click, helps, listing, tab = times["click"], times["help"], times["list"], times["tab"]
    ref = f"import click {click * 1000:.0f} ms"
    counts = []
    if counted is not None:
        click_ir, help_ir = counted
        counts.append(
            row(
                "  the same, counted in instructions (callgrind)",
                help_ir / 1e6,
                "M instr",
                f"import click {click_ir / 1e6:.1f}M",
                help_ir / click_ir,
                "<= 1.2x",
                help_ir / click_ir <= 1.2,
            )
        )
    return [
        row(
            "agctl --help", helps * 1000, "ms", ref, helps / click, "<= 1.2x", helps / click <= 1.2
        ),
        *counts,
        row(
            "agctl session list (100 sessions)",
            listing * 1000,
            "ms",
            ref,
            listing / click,
            "(shown)",
            None,
        ),
        row(
            "TAB: agctl slot use <TAB>",
            tab * 1000,
            "ms",
            ref,
            tab / click,
            "<= 1.5x",
            tab / click <= 1.5,
        ),
    ]


def turns(runs: int, sizes: list[int], agctl: Installed) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp, FakeOpenAI() as server:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({"context_windows": {"fake-model": 100_000_000}}))
        env = {
            **agctl.env(dict(os.environ)),
            "AGCTL_DATA_DIR": tmp,
            "AGCTL_CONFIG": str(config),
            "AGCTL_PROVIDER": "openai",
            "AGCTL_BASE_URL": server.base_url,
            "AGCTL_MODEL": "fake-model",
            "AGCTL_API_KEY": "bench-key",
        }
        store = Store(tmp)
        commands = {"floor": ([agctl.python, "-c", "import click, pydantic, httpx"], env)}
        for size in sizes:
            fill(store, f"s{size}", size)
            argv = [*agctl.agctl, "-s", f"s{size}", "turn", "send", "hi", "--no-stream"]
            commands[str(size)] = (argv, env)
        times = interleaved_medians(commands, runs)
        counted = instructions(
            [commands["floor"], commands[str(sizes[0])], commands[str(sizes[-1])]], agctl
        )
    floor = times.pop("floor")
    results = {int(size): seconds for size, seconds in times.items()}
    ref = f"import click, pydantic, httpx {floor * 1000:.0f} ms"
    small = results[sizes[0]]
    out = [
        row(
            f"turn send, {sizes[0]} messages",
            small * 1000,
            "ms",
            ref,
            small / floor,
            "<= 2x floor",
            small / floor <= 2,
        )
    ]
    if counted is not None:
        floor_ir, small_ir, large_ir = counted
        out.append(
            row(
                "  the same, counted in instructions (callgrind)",
                small_ir / 1e6,
                "M instr",
                f"import click, pydantic, httpx {floor_ir / 1e6:.1f}M",
                small_ir / floor_ir,
                "<= 2x floor",
                small_ir / floor_ir <= 2,
            )
        )
    for size in sizes[1:]:
        ratio = results[size] / small
        target = "<= 1.15x of 10" if size == sizes[-1] else "(shown)"
        out.append(
            row(
                f"turn send, {size} messages",
                results[size] * 1000,
                "ms",
                f"{sizes[0]}-message turn",
                ratio,
                target,
                ratio <= 1.15 if size == sizes[-1] else None,
            )
        )
        if size == sizes[-1] and counted is not None:
            out.append(
                row(
                    "  the same, counted in instructions (callgrind)",
                    large_ir / 1e6,
                    "M instr",
                    f"{sizes[0]}-message turn {small_ir / 1e6:.1f}M",
                    large_ir / small_ir,
                    "<= 1.15x of 10",
                    large_ir / small_ir <= 1.15,
                )
            )
    return out


def replay(count: int, flat_turns: int, prefill: int) -> list[dict[str, Any]]:
    result = measure_replay(count, flat_turns, prefill)
    floor = result["durable_write_s"]
    ref = f"durable atomic replace {floor * 1000:.2f} ms ({1 / floor:.0f}/s)"
    rates = result["turns_per_second"]
    rows = [
        row(
            f"turn replay, {count} turns, sync per-turn",
            rates["per-turn"],
            "turns/s",
            ref,
            None,
            ">= 300",
            rates["per-turn"] >= 300,
        )
    ]
    if result["sync_end_available"]:
        rows.append(
            row(
                f"turn replay, {count} turns, sync end",
                rates["end"],
                "turns/s",
                ref,
                None,
                ">= 600",
                rates["end"] >= 600,
            )
        )
    empty = result["empty_turns_per_second"]
    rows.append(
        row(
            f"turn replay, {flat_turns} turns onto {prefill} messages",
            result["full_turns_per_second"],
            "turns/s",
            f"same onto an empty slot {empty:.0f} turns/s",
            result["flat_ratio"],
            ">= 0.85x",
            result["flat_ratio"] >= 0.85,
        )
    )
    rows.append(
        row(
            "  the same, slot never checkpointed yet",
            result["fresh_turns_per_second"],
            "turns/s",
            f"same onto an empty slot {empty:.0f} turns/s",
            result["fresh_ratio"],
            "(shown)",
            None,
        )
    )
    return rows


def storage(turns_count: int) -> list[dict[str, Any]]:
    result = measure_checkpoints(turns_count, 1)
    ratio = result["ratio"]
    return [
        row(
            f"checkpoints after {turns_count} turns",
            result["checkpoint_bytes"] / 1024,
            "KB",
            f"live state {result['live_bytes'] / 1024:.0f} KB",
            ratio,
            "<= 3x",
            ratio <= 3,
        )
    ]


def graph_html(slots: int, checkpoints: int, runs: int) -> list[dict[str, Any]]:
    result = measure_graph_html(slots, checkpoints, runs)
    seconds, reference = result["html_seconds"], result["json_seconds"]
    megabytes = result["html_bytes"] / 1e6
    size = f"{slots} slots, {checkpoints} checkpoints"
    return [
        row(
            f"session graph --format html, {size}",
            seconds * 1000,
            "ms",
            f"--format json (the model) {reference * 1000:.0f} ms",
            seconds / reference,
            "< 2000 ms",
            seconds < 2,
        ),
        row(
            "  the page's size",
            megabytes,
            "MB",
            "",
            None,
            "< 5 MB",
            megabytes < 5,
        ),
    ]


def search(runs: int) -> list[dict[str, Any]]:
    result = measure_search(runs)
    seconds = result["seconds"]
    ref = (
        f"grep -ric {seconds['grep'] * 1000:.0f} ms; "
        f"import click, pydantic {seconds['floor'] * 1000:.0f} ms"
    )
    size = f"{result['sessions']} x {result['messages']}"
    return [
        row(
            f"agctl search, {size} messages",
            seconds["search"] * 1000,
            "ms",
            ref,
            seconds["search"] / seconds["grep"],
            "< 1 s",
            seconds["search"] < 1,
        ),
        row(
            f"agctl search --regex, {size} messages",
            seconds["regex"] * 1000,
            "ms",
            ref,
            seconds["regex"] / seconds["grep"],
            "< 1 s",
            seconds["regex"] < 1,
        ),
    ]


def graph(runs: int, slots: int, checkpoints: int) -> list[dict[str, Any]]:
    result = measure_graph(slots, checkpoints, runs)
    seconds = result["seconds"]
    return [
        row(
            f"session graph --format text, {slots} slots, {checkpoints:,} ckpts",
            seconds["graph"] * 1000,
            "ms",
            f"ckpt list {seconds['ckpt_list'] * 1000:.0f} ms",
            seconds["graph"] / seconds["ckpt_list"],
            "< 1 s",
            seconds["graph"] < 1,
        )
    ]


def tokens() -> list[dict[str, Any]]:
    text = corpus(10)
    size = len(text.encode()) / 1e6
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        estimate_text(text)
        samples.append(time.perf_counter() - started)
    best = sorted(samples)[len(samples) // 2]
    return [
        row(
            "token estimation, 10 MB mixed",
            size / best,
            "MB/s",
            f"{best * 1000:.1f} ms",
            None,
            "10 MB well under 1 s",
            best < 0.5,
        )
    ]


def postgres(runs: int, quick: bool, agctl: Installed) -> list[dict[str, Any]]:
    result = measure_postgres(runs, quick, agctl)
    if result["skipped"]:
        return [row("PostgreSQL", 0, "-", result["skipped"], None, "skipped", None)]
    return list(result["rows"])


def wires(runs: int, sizes: list[int], agctl: Installed) -> list[dict[str, Any]]:
    return wire_rows(measure_wires(runs, sizes, agctl))


Section = Callable[[int, bool, Installed], list[dict[str, Any]]]
# Each section's rows from (runs, quick, the measured form), in the table's order.
SECTIONS: dict[str, Section] = {
    "startup": lambda runs, quick, agctl: startup(runs, agctl),
    "turns": lambda runs, quick, agctl: turns(
        runs, [10, 100] if quick else [10, 100, 1000, 5000], agctl
    ),
    "wires": lambda runs, quick, agctl: wires(runs, [10, 5000], agctl),
    "postgres": postgres,
    "serve": lambda runs, quick, agctl: proxy_rows(measure_proxy(runs, quick, agctl)),
    "replay": lambda runs, quick, agctl: (
        replay(100, 100, 500) if quick else replay(1000, 300, 4000)
    ),
    "storage": lambda runs, quick, agctl: storage(100 if quick else 1000),
    "search": lambda runs, quick, agctl: search(runs),
    "graph": lambda runs, quick, agctl: graph(runs, 200, 200 if quick else 2000),
    "graph-html": lambda runs, quick, agctl: (
        graph_html(50, 300, runs) if quick else graph_html(200, 2000, 3)
    ),
    "tokens": lambda runs, quick, agctl: tokens(),
    "cache": lambda runs, quick, agctl: cache_rows(measure_cache("openai", 100 if quick else 200)),
    "clearing": lambda runs, quick, agctl: clearing_rows(measure_clearing(100)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="Smaller sizes, fewer runs.")
    parser.add_argument(
        "--source", action="store_true", help="Time python -m agctl from the source tree."
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=list(SECTIONS),
        help="Measure only this section (repeat for more); default: all.",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    selected = [name for name in SECTIONS if name in (args.only or SECTIONS)]
    rows: list[dict[str, Any]] = []
    with measured_form(args.source) as agctl:
        for name in selected:
            rows += SECTIONS[name](runs, args.quick, agctl)
    if args.json:
        print(json.dumps({"runs": runs, "form": agctl.form, "rows": rows}, indent=2))
        return
    print(f"commands timed as: {agctl.form}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'benchmark':56} {'value':>10} {'unit':8} {'ratio':>6}  {'target':17} met  reference")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        met = {True: "yes", False: "NO", None: "-"}[r["met"]]
        print(
            f"{r['name']:56} {r['value']:10.1f} {r['unit']:8} {ratio:>6}  {r['target']:17} "
            f"{met:4} {r['reference']}"
        )
    if "postgres" in selected and not any(r["name"] == "PostgreSQL" for r in rows):
        print("\n".join(POSTGRES_NOTES))
    if "replay" in selected and "end" not in sync_modes():
        print("turn replay, sync end: not available yet (transcripts.replay takes no sync)")


if __name__ == "__main__":
    main()
