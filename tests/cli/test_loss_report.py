"""`ctx compress`'s loss report: in text and JSON, kept with the checkpoint after the
compression (`ckpt show`), shown by a dry run that writes nothing, and the threshold
(--fail-on-loss, compress_fail_on_loss) that refuses a loss with exit 7, writing nothing.

Summaries come from the fake OpenAI server on loopback, so each test chooses what the
summary keeps."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import data_dir_files, draft_file

from agctl.base.errors import EXIT_CONTEXT_FULL, EXIT_USAGE
from agctl.context.models import Message
from agctl.store import Store

Run = Callable[..., Result]

INSTRUCTION = "Never push to main without a review."
FOLDED = [
    ("user", f"{INSTRUCTION} The config is in src/app/settings.py, see ABC-123."),
    ("assistant", "Read https://example.org/guide and set the limit to 4096."),
    ("user", "And the log goes to var/log/app.log."),
    ("assistant", "Done."),
]
KEPT = [("user", "What next?"), ("assistant", "Tests.")]
# Keeps the instruction, a path, the id and the number; drops the URL and the log's path.
SUMMARY = f"{INSTRUCTION} Settings: src/app/settings.py (ABC-123); limit 4096."
COMPRESS = ("ctx", "compress", "--keep-recent", "2", "--min-tokens", "0")
TRUNCATE = (*COMPRESS, "--strategy", "truncate")


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def as_json(result: Result) -> Any:
    return json.loads(ok(result).stdout)


@pytest.fixture
def chat(store: Store) -> str:
    store.create_session("s")
    store.set_current_session("s")
    messages = [Message(role=role, content=text) for role, text in [*FOLDED, *KEPT]]
    store.update_slot("s", None, lambda s: s.messages.extend(messages))
    return "s"


def test_a_summary_reports_what_it_lost_in_text(run: Run, chat: str, wired: FakeOpenAI) -> None:
    wired.reply(text=SUMMARY)
    lines = ok(run(*COMPRESS)).stdout.splitlines()
    assert lines[0].startswith("compressed slot default: 4 messages folded (summarize), 2 kept")
    assert lines[1:] == [
        "lost: 1 URL, 1 path (of 6 facts found in what was folded)",
        "  urls: https://example.org/guide",
        "  paths: var/log/app.log",
    ]


def test_a_summary_reports_what_it_lost_in_json_and_the_checkpoint_keeps_it(
    run: Run, chat: str, wired: FakeOpenAI
) -> None:
    wired.reply(text=SUMMARY)
    payload = as_json(run("--json", *COMPRESS))
    counts = {"instructions": 0, "urls": 1, "paths": 1, "ids": 0, "numbers": 0}
    assert payload["loss"] == {
        "exact": True,
        "replaced": True,
        "found": {"instructions": 1, "urls": 1, "paths": 2, "ids": 1, "numbers": 1},
        "lost": counts,
        "items": {
            "instructions": [],
            "urls": ["https://example.org/guide"],
            "paths": ["var/log/app.log"],
            "ids": [],
            "numbers": [],
        },
    }
    after = as_json(run("--json", "ckpt", "show", payload["checkpoint_after"]))
    assert after["label"] == "after compression"
    assert after["loss"] == {"slot": "default", "strategy": "summarize", **payload["loss"]}
    before = as_json(run("--json", "ckpt", "show", payload["checkpoint_before"]))
    assert "loss" not in before
    shown = ok(run("ckpt", "show", payload["checkpoint_after"])).stdout
    assert "compression lost  1 URL, 1 path\n" in shown
    assert "compression lost" not in ok(run("ckpt", "show", payload["checkpoint_before"])).stdout


def test_a_truncation_reports_everything_it_folded_as_lost(run: Run, chat: str) -> None:
    payload = as_json(run("--json", *TRUNCATE))
    assert payload["loss"]["replaced"] is False
    assert payload["loss"]["lost"] == payload["loss"]["found"]
    assert payload["loss"]["items"]["paths"] == ["src/app/settings.py", "var/log/app.log"]
    after = as_json(run("--json", "ckpt", "show", payload["checkpoint_after"]))
    assert after["loss"]["items"] == payload["loss"]["items"]


def test_the_text_says_a_truncation_keeps_no_summary(run: Run, chat: str) -> None:
    lines = ok(run(*TRUNCATE)).stdout.splitlines()
    assert lines[1:] == [
        "lost: 1 instruction, 1 URL, 2 paths, 1 id, 1 number (all 6 facts of what was "
        "folded: a truncation keeps no summary)",
        "  instructions:",
        f'    "{INSTRUCTION}"',
        "  urls: https://example.org/guide",
        "  paths: src/app/settings.py, var/log/app.log",
        "  ids: ABC-123",
        "  numbers: 4096",
    ]


def test_a_dry_run_shows_the_report_and_writes_nothing(
    run: Run, isolated_env: Path, chat: str, wired: FakeOpenAI
) -> None:
    files = data_dir_files(isolated_env)
    exact = as_json(
        run(
            "--json", "ctx", "compress", "--dry-run", "--strategy", "truncate", "--keep-recent", "2"
        )
    )["loss"]
    assert (exact["exact"], exact["lost"]["paths"]) == (True, 2)
    risk = as_json(run("--json", "ctx", "compress", "--dry-run", "--keep-recent", "2"))["loss"]
    assert risk["exact"] is False and risk["lost"] == risk["found"]
    text = ok(run("ctx", "compress", "--dry-run", "--keep-recent", "2")).stdout
    assert "\nat risk: 1 instruction, 1 URL, 2 paths, 1 id, 1 number (of 6 facts" in text
    assert wired.requests == []
    assert data_dir_files(isolated_env) == files


@pytest.mark.parametrize(
    ("configure", "option"),
    [
        ((), ("--fail-on-loss", "paths")),
        ((), ("--fail-on-loss", "any")),
        (("config", "set", "compress_fail_on_loss", "urls,paths"), ()),
    ],
)
def test_the_threshold_refuses_a_loss_with_exit_7_and_writes_nothing(
    run: Run,
    isolated_env: Path,
    chat: str,
    wired: FakeOpenAI,
    configure: tuple[str, ...],
    option: tuple[str, ...],
) -> None:
    if configure:
        ok(run(*configure))
    files = data_dir_files(isolated_env)
    wired.reply(text=SUMMARY)
    result = run("--json", *COMPRESS, *option)
    assert result.exit_code == EXIT_CONTEXT_FULL, result.output
    error = json.loads(result.stderr)["error"]
    assert error["type"] == "FactsWouldBeLost"
    assert "var/log/app.log" in error["message"] and "nothing was written" in error["message"]
    assert data_dir_files(isolated_env) == files
    assert as_json(run("--json", "ckpt", "list")) == []


def test_the_threshold_lets_a_summary_keeping_those_facts_through(
    run: Run, chat: str, wired: FakeOpenAI
) -> None:
    ok(run("config", "set", "compress_fail_on_loss", "instructions,ids"))
    wired.reply(text=SUMMARY)
    assert as_json(run("--json", *COMPRESS))["folded"] == 4


def test_fail_on_loss_none_overrides_the_config(run: Run, chat: str) -> None:
    ok(run("config", "set", "compress_fail_on_loss", "any"))
    assert run(*TRUNCATE).exit_code == EXIT_CONTEXT_FULL
    assert as_json(run("--json", *TRUNCATE, "--fail-on-loss", "none"))["folded"] == 4


def test_an_unknown_kind_is_a_usage_error(run: Run, isolated_env: Path, chat: str) -> None:
    files = data_dir_files(isolated_env)
    result = run(*TRUNCATE, "--fail-on-loss", "files")
    assert result.exit_code == EXIT_USAGE
    assert "unknown kind(s) of fact: files (known: instructions, urls" in result.stderr
    assert data_dir_files(isolated_env) == files
    assert run("config", "set", "compress_fail_on_loss", "files").exit_code != 0


def test_a_turn_that_must_compress_follows_the_config_threshold(
    run: Run, isolated_env: Path, chat: str, wired: FakeOpenAI
) -> None:
    """Over the window, the turn asks for a summary; it would lose two paths, so the turn
    fails with exit 7: the slot unchanged, no checkpoint, the prompt kept as a draft."""
    ok(run("config", "set", "compress_fail_on_loss", "paths"))
    ok(run("config", "set", "compress_keep_recent", "2"))
    ok(run("config", "set", "context_windows.fake-model", "100"))
    files = data_dir_files(isolated_env)
    wired.reply(text="They talked.")
    result = run("turn", "send", "next " * 40)
    assert result.exit_code == EXIT_CONTEXT_FULL, result.output
    assert "would lose 2 paths" in result.stderr
    assert len(wired.requests) == 1  # the summary: the turn was never sent
    after = data_dir_files(isolated_env)
    assert set(after) - set(files) == {draft_file("s")}
    assert {k: v for k, v in after.items() if k in files} == files


def test_a_dry_run_says_whether_the_threshold_would_refuse(
    run: Run, isolated_env: Path, chat: str, wired: FakeOpenAI
) -> None:
    """A truncation's refusal is certain; a summary's depends on what it will keep."""
    files = data_dir_files(isolated_env)
    dry = ("ctx", "compress", "--dry-run", "--keep-recent", "2")
    shown = as_json(run("--json", *dry, "--strategy", "truncate", "--fail-on-loss", "paths"))
    assert shown["fail_on_loss"] == ["paths"]
    assert shown["refused"] == {"instructions": 0, "urls": 0, "paths": 2, "ids": 0, "numbers": 0}
    text = ok(run(*dry, "--strategy", "truncate", "--fail-on-loss", "paths")).stdout
    assert text.endswith("\n--fail-on-loss paths: refused (exit 7), it would lose 2 paths\n")
    text = ok(run(*dry, "--fail-on-loss", "ids,instructions")).stdout
    assert text.endswith(
        "\n--fail-on-loss instructions,ids: refused (exit 7) unless the summary keeps "
        "1 instruction, 1 id\n"
    )
    ok(run("config", "set", "compress_fail_on_loss", "urls"))
    assert as_json(run("--json", *dry))["refused"]["urls"] == 1
    unrefused = as_json(run("--json", *dry, "--fail-on-loss", "none"))
    assert (unrefused["fail_on_loss"], unrefused["refused"]) == ([], None)
    assert "--fail-on-loss" not in ok(run(*dry, "--fail-on-loss", "none")).stdout
    assert wired.requests == []
    assert data_dir_files(isolated_env) == files
