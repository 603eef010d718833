"""Every test gets its own data and config dirs and a plain terminal."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fake_openai import FakeOpenAI

from agctl.cli import cli
from agctl.store import Store

# The throwaway PostgreSQL server (pg_server, pg_database, pg_store) and headless Chromium.
pytest_plugins = ["pgserver", "chromium"]


def pytest_configure(config: pytest.Config) -> None:
    """Give SIGINT its usual handler back when the run was started ignoring it (as a
    background job of a script: `pytest ... &` ignores it in the job), so the agctl processes
    the tests start get Ctrl-C as from a terminal's shell; ignored, it passes to every child,
    and a test that presses Ctrl-C or sends SIGINT waits in vain for what it stops."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    data_dir = tmp_path / "data"
    monkeypatch.setenv("AGCTL_DATA_DIR", str(data_dir))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    # A key or endpoint of the machine's own must never reach a test's fake (or a test
    # that checks a key is missing): each wire's variables are unset.
    for name in (
        "AGCTL_SESSION",
        "AGCTL_LOG",
        "AGCTL_API_KEY",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    # A command run in-process never asks its tool questions on the terminal the tests
    # may run on: it has none (tests/process/test_approval.py asks on a real one).
    monkeypatch.setattr("agctl.cli.ask.TERMINAL", str(tmp_path / "no-terminal"))
    return data_dir


@pytest.fixture(autouse=True)
def agctl_logging() -> Iterator[None]:
    """`-v` and the CLI's warning handler install handlers on the 'agctl' logger; give
    the next test the logger back."""
    logger = logging.getLogger("agctl")
    handlers, level = logger.handlers[:], logger.level
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    """A fake OpenAI-compatible server on loopback; a test fails if it saw a bad request."""
    with FakeOpenAI() as fake:
        yield fake
    assert fake.errors == []


@pytest.fixture
def wired(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    """The fake OpenAI-compatible server, with agctl pointed at it through the environment
    (a test module may define its own)."""
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGCTL_MODEL", "fake-model")
    monkeypatch.setenv("AGCTL_API_KEY", "sk-agctl-test-key")
    return server


@pytest.fixture
def store(isolated_env: Path) -> Store:
    return Store(isolated_env)


@pytest.fixture
def run() -> Callable[..., Result]:
    """Invoke the CLI in-process; a traceback fails the test."""
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None) -> Result:
        return runner.invoke(
            cli, list(args), input=input, catch_exceptions=False, prog_name="agctl"
        )

    return invoke


# Under CI (.ci/run sets AGCTL_REQUIRE_REAL=1) a real component that is missing — a shell,
# man, a mount namespace — must fail the run, not skip quietly. Only skips whose reason
# starts with "optional:" (a file-system quirk, not a missing component) stay skips.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if not report.skipped:
        return
    reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    import chromium
    import pgserver

    for variable, prefix in (
        ("AGCTL_REQUIRE_POSTGRES", pgserver.SKIP_PREFIX),
        ("AGCTL_REQUIRE_BROWSER", chromium.SKIP_PREFIX),
    ):
        if os.environ.get(variable) and prefix in reason:
            report.outcome = "failed"
            report.longrepr = f"{variable} is set, so this skip is a failure: {reason}"
            return
    if not os.environ.get("AGCTL_REQUIRE_REAL"):
        return
    if reason.startswith("Skipped: optional:") or reason.startswith("optional:"):
        return
    report.outcome = "failed"
    report.longrepr = f"AGCTL_REQUIRE_REAL is set, so this skip is a failure: {reason}"
