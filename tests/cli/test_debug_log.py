"""`-vv` / AGCTL_LOG=debug: the shared mechanisms (locks, reads, writes, fsyncs, HTTP) say
what they do and what it costs, and the key never shows."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI

from agctl.base import fsio
from agctl.store import Store

Run = Callable[..., Result]
KEY = "sk-debug-log-Zq7Xw3Kp9Lm2Vb8N"
MODEL = "fake-model"

# One pattern for each kind of debug line a turn must produce.
EXPECTED_LINES = {
    "lock taken": r"DEBUG agctl\.store: lock \S+\.lock taken \(waited \d+\.\d ms\)",
    "lock held": r"DEBUG agctl\.store: lock \S+\.lock released \(held \d+\.\d ms\)",
    "document read": r"DEBUG agctl\.store: read \S+session\.json \(\d+ bytes\)",
    "document written": r"DEBUG agctl\.store: wrote \S+\.json \(\d+ bytes\)",
    "fsync": r"DEBUG agctl\.store: fsync \S+ \(\d+\.\d ms\)",
    "retry delay": r"INFO agctl\.provider: retry 1/\d+ in \d+\.\d\ds: 503",
    "request": (
        r"DEBUG agctl\.provider: POST http://127\.0\.0\.1:\d+/v1/chat/completions: "
        r"model=fake-model stream=\w+, \d+ bytes, headers: .*authorization: Bearer \*\*\*"
    ),
}


@pytest.fixture
def wired(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, store: Store) -> FakeOpenAI:
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGCTL_MODEL", MODEL)
    monkeypatch.setenv("AGCTL_API_KEY", KEY)
    store.create_session("s1", system_prompt="sys")
    store.set_current_session("s1")
    return server


@pytest.mark.parametrize("how", ["-vv", "AGCTL_LOG=debug"])
def test_a_turn_logs_every_kind_of_debug_line_and_never_the_key(
    how: str, wired: FakeOpenAI, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    wired.fail("status", status=503, retry_after=0)
    if how == "-vv":
        args = ["-vv"]
    else:
        monkeypatch.setenv("AGCTL_LOG", "debug")
        args = []
    result = run(*args, "turn", "send", "hello")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "echo: hello\n"
    missing = [kind for kind, line in EXPECTED_LINES.items() if not re.search(line, result.stderr)]
    assert missing == [], result.stderr
    assert KEY not in result.stderr
    assert KEY[len("sk-") :] not in result.stderr
    # The server did get the key: it was redacted from the log, not left out of the request.
    assert wired.requests[-1].headers["authorization"] == f"Bearer {KEY}"


def test_one_verbose_flag_logs_no_debug_detail(wired: FakeOpenAI, run: Run) -> None:
    result = run("-v", "turn", "send", "hello")
    assert result.exit_code == 0, result.stderr
    assert "INFO" in result.stderr
    assert "DEBUG" not in result.stderr


def test_a_header_of_the_profile_is_redacted_too(
    wired: FakeOpenAI, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "hdr-secret-Kp9Lm2Vb8NZq7"
    monkeypatch.delenv("AGCTL_API_KEY")
    added = run(
        "profile", "add", "az", "--base-url", wired.base_url, "--model", MODEL,
        "--header", f"api-key: {secret}",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    result = run("-vv", "turn", "send", "--profile", "az", "hello")
    assert result.exit_code == 0, result.stderr
    assert re.search(r"headers: .*api-key: \*\*\*", result.stderr), result.stderr
    assert secret not in result.stderr


def test_fsio_logs_a_lock_and_an_atomic_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agctl.store")
    target = tmp_path / "doc.json"
    with fsio.exclusive_lock(tmp_path / "lockfile"):
        fsio.write_atomic(target, b"{}")
    assert fsio.read_bytes(target) == b"{}"
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0].startswith(f"lock {tmp_path / 'lockfile'} taken (waited ")
    assert re.fullmatch(r"fsync \S+\.tmp \(\d+\.\d ms\)", messages[1])
    assert messages[2] == f"wrote {target} (2 bytes)"
    assert messages[3] == f"fsync {tmp_path} " + messages[3].split(" ", 2)[2]
    assert messages[4].startswith(f"lock {tmp_path / 'lockfile'} released (held ")
    assert messages[5] == f"read {target} (2 bytes)"


def test_the_logger_names_verbose_output_shows_did_not_move_with_their_modules() -> None:
    """`-v` prints each line's logger name: the names say what logs (agctl.walk), not the
    module's place in the package tree, which issue 26 regrouped."""
    import importlib

    modules = {
        "agctl.reports.walk": "agctl.walk",
        "agctl.turn.compress": "agctl.compress",
        "agctl.turn.merge": "agctl.merge",
        "agctl.context.price_sheets": "agctl.pricing",
        "agctl.turn.hooks": "agctl.hooks",
        "agctl.turn.send": "agctl.turn",
        "agctl.store.slots": "agctl.store",
    }
    shown = {name: importlib.import_module(name).log.name for name in modules}
    assert shown == modules
