"""`agctl eval compaction` and `eval probes` from the command line: offline, with files, on
stdin, against a model over HTTP, and the errors."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import fails, ok

Run = Callable[..., Result]
SMALL = ("--messages", "120", "--facts", "6", "--drift", "1")
ROWS = ["truncate", "extractive", "rolling", "rolling+pins"]


def test_the_default_evaluation_prints_a_row_per_strategy_and_its_progress(run: Run) -> None:
    result = ok(run("eval", "compaction", "--runs", "2", *SMALL))

    lines = result.stdout.splitlines()
    assert lines[0] == (
        "6 probes, 2 run(s) per strategy, model offline; budget 2000 tokens, checked every "
        "40 messages, summaries keep 6"
    )
    assert lines[2].split() == [
        *("STRATEGY", "RECALL", "±SD", "RANGE", "PINNED", "STALE", "KEPT", "COMPRESSED"),
        *("LOST/FOUND", "TOKENS", "COST"),
    ]
    assert [line.split()[0] for line in lines[3:7]] == ROWS
    assert result.stderr.splitlines() == [
        f"agctl: run {n}/8: {name}, recall {line.split()[-1]}"
        for n, (name, line) in enumerate(
            zip(ROWS * 2, result.stderr.splitlines(), strict=True), start=1
        )
    ]
    assert ok(run("-q", "eval", "compaction", "--runs", "1", *SMALL)).stderr == ""


def test_json_gives_each_strategys_summary_and_every_answer(run: Run) -> None:
    result = ok(run("eval", "compaction", "--runs", "2", *SMALL, "--json"))

    report = json.loads(result.stdout)
    assert [row["strategy"] for row in report["strategies"]] == ROWS
    assert (report["runs"], report["probes"], report["budget_tokens"]) == (2, 6, 2000)
    for row in report["strategies"]:
        assert len(row["recall"]["each"]) == 2
        assert row["cost"] == 0
        assert 0 < row["kept_tokens"] <= 2000
    assert len(report["answers"]) == 2 * 4 * 6
    assert {(a["strategy"], a["run"], a["seed"]) for a in report["answers"]} == {
        (name, run, run) for name in ROWS for run in (0, 1)
    }
    # With --json, the progress on stderr is JSON lines too.
    progress = [json.loads(line) for line in result.stderr.splitlines()]
    assert len(progress) == 8
    assert progress[0]["progress"].startswith("run 1/8: truncate, recall ")
    recalls = {
        (row["strategy"], n): r
        for row in report["strategies"]
        for n, r in enumerate(row["recall"]["each"])
    }
    assert {(p["strategy"], p["run"]): p["recall"] for p in progress} == recalls
    assert all(p["seed"] == p["run"] and p["kept_tokens"] > 0 for p in progress)


def test_a_written_probe_set_replays_the_same_as_its_seed(run: Run, tmp_path: Path) -> None:
    out = tmp_path / "set"
    said = ok(run("eval", "probes", "--seed", "4", *SMALL, "--out", str(out), "--json"))
    written = json.loads(said.stdout)
    assert written == {
        "transcript": str(out / "transcript.jsonl"),
        "probes": str(out / "probes.jsonl"),
        "messages": 120,
        "facts": 6,
        "seed": 4,
    }
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    for name in ("transcript.jsonl", "probes.jsonl"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600
    files = ("--transcript", str(out / "transcript.jsonl"), "--probes", str(out / "probes.jsonl"))

    given = json.loads(ok(run("eval", "compaction", *files, "--runs", "2", "--json")).stdout)
    seeded = ["eval", "compaction", "--seed", "4", "--runs", "1", *SMALL, "--json"]
    generated = json.loads(ok(run(*seeded)).stdout)

    for mine, theirs in zip(given["strategies"], generated["strategies"], strict=True):
        assert mine["recall"]["each"] == theirs["recall"]["each"] * 2
        assert mine["recall"]["stdev"] == 0
    # Its transcript reads from stdin too.
    piped = ["eval", "compaction", "--transcript", "-", "--probes", str(out / "probes.jsonl")]
    stdin = (out / "transcript.jsonl").read_bytes()
    from_stdin = json.loads(ok(run(*piped, "--runs", "1", "--json", input=stdin)).stdout)
    assert [r["recall"] for r in from_stdin["strategies"]] == [
        {**r["recall"], "each": r["recall"]["each"][:1]} for r in given["strategies"]
    ]


def test_against_a_model_over_http_every_summary_and_answer_is_a_request(
    run: Run, wired: FakeOpenAI
) -> None:
    rolling = ("--provider", "openai", "--strategy", "rolling", "--budget-tokens", "1000")
    rolling = (*rolling, "--runs", "1")
    result = ok(run("eval", "compaction", *rolling, *SMALL, "--json"))

    report = json.loads(result.stdout)
    (row,) = report["strategies"]
    assert report["model"] == "fake-model"
    bodies = [request.body for request in wired.requests]
    summaries = [b for b in bodies if "<new-messages>" in b["messages"][-1]["content"]]
    asked = [b for b in bodies if "Answer from the conversation above" in str(b["messages"])]
    assert len(summaries) == row["compressions"] >= 2
    assert len(asked) == 6 and len(bodies) == len(summaries) + len(asked)
    assert all(b["model"] == "fake-model" for b in bodies)
    # Each summary was asked to keep to what the kept messages leave of the budget.
    assert all("Keep the summary under" in b["messages"][0]["content"] for b in summaries)
    # The fake server echoes: its summaries are longer than what they replace (the
    # report shows a model that does not keep to the budget), no probe is answered, and
    # the tokens are the server's count.
    assert row["kept_tokens"] > 1000
    assert row["recall"]["mean"] == 0
    assert row["prompt_tokens"] > 0
    assert row["cost"] is None  # fake-model has no price


def test_a_default_profile_is_not_evaluated_unless_named(run: Run, wired: FakeOpenAI) -> None:
    """A default profile (or AGCTL_PROVIDER) would make hundreds of paid requests: the
    evaluation is offline unless --profile, --provider or --model names a model."""
    ok(run("profile", "add", "paid", "--preset", "openai", "--model", "gpt-4o", "--default"))

    report = json.loads(ok(run("eval", "compaction", "--runs", "1", *SMALL, "--json")).stdout)

    assert report["model"] == "offline" and wired.requests == []


def test_what_the_evaluation_cannot_use_is_refused_before_it_runs(run: Run, tmp_path: Path) -> None:
    probes = tmp_path / "probes.jsonl"
    probes.write_text('{"question": "Which port?", "expect": "5433"}\n{"question": "x"}\n')
    transcript = tmp_path / "t.json"
    transcript.write_text('[{"role": "user", "content": "hi"}]')

    fails(run("eval", "compaction", "--transcript", str(transcript)), 2, "go together")
    fails(
        run("eval", "compaction", "--transcript", str(transcript), "--probes", str(probes)),
        5,
        "probes.jsonl: line 2",
        "expect",
    )
    fails(run("eval", "compaction", "--strategy", "truncate,fold"), 2, "unknown strategy 'fold'")
    fails(run("eval", "compaction", "--messages", "40"), 2, "too few")
    fails(run("eval", "probes", "--messages", "20001", "--out", str(tmp_path)), 2, "20000")
    both = ("--transcript", "-", "--probes", "-")
    fails(run("eval", "compaction", *both, input=b"[]"), 2, "cannot both be read from stdin")
    fails(
        run("eval", "compaction", "--probes", str(tmp_path / "missing.jsonl"), "--transcript", "-"),
        3,
        "missing.jsonl",
    )
