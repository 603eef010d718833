"""Running `agctl serve` as a real process for a test: its environment, the server started
on a free port and stopped with SIGTERM (its clean exit checked), and the CLI beside it."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

SYSTEM = {"role": "system", "content": "Be brief."}
HELLO = {"role": "user", "content": "hello there"}
# How long the server may take to say where it listens.
STARTING = 30.0


def base_env(tmp_path: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGCTL_"))}
    environ.update(
        AGCTL_DATA_DIR=str(tmp_path / "data"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        PYTHONIOENCODING="utf-8",
    )
    return environ


def upstream_env(tmp_path: Path, base_url: str, key: str = "k") -> dict[str, str]:
    """base_env with a fake OpenAI upstream at `base_url` as agctl's profile (model
    fake-model, API key `key`)."""
    env = base_env(tmp_path)
    env.update(
        AGCTL_PROVIDER="openai",
        AGCTL_BASE_URL=base_url,
        AGCTL_MODEL="fake-model",
        AGCTL_API_KEY=key,
        PYTHONIOENCODING="utf-8",
    )
    return env


@contextmanager
def serving(
    env: dict[str, str],
    *args: str,
    logged: list[str] | None = None,
    started: list[str] | None = None,
    command: Sequence[str] = (sys.executable, "-m", "agctl"),
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`agctl serve --port 0 ARGS...` (agctl run as `command`: an installed one, for the
    bench), its base URL read from its stderr's ready line (what it wrote before that
    put in `started`); stopped with SIGTERM after, its exit checked and the rest of its
    stderr put in `logged`."""
    logged = [] if logged is None else logged
    started = [] if started is None else started
    process = subprocess.Popen(
        [*command, "serve", "--port", "0", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    said, url = b"", None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + STARTING
        while url is None and time.monotonic() < deadline:
            if b"\n" in said:
                first, said = said.split(b"\n", 1)
                line = first.decode()
                url = _ready_url(line)
                if url is None:
                    started.append(line)
                continue
            if selector.select(timeout=deadline - time.monotonic()):
                chunk = os.read(process.stderr.fileno(), 4096)
                if not chunk:
                    break
                said += chunk
    if url is None:
        process.kill()
        raise AssertionError(
            f"agctl serve did not start: {started!r} {said!r} {process.communicate()}"
        )
    try:
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            _, rest = process.communicate(timeout=30)
            errors = said + rest
            # Stopped by SIGTERM with no turn in flight: a normal end.
            assert process.returncode == 0, errors
            assert b"Traceback" not in errors, errors
            *lines, last = errors.decode().splitlines()
            assert stop_line(last) == {"stopped": "SIGTERM", "finished": 0, "drafted": 0}, last
            logged.extend(lines)


def stop_line(line: str) -> dict[str, object]:
    """What serve's last line says: the signal, and the counts of the turns then in flight
    (finished, drafted, and any failed or abandoned), from its text or its --json."""
    if line.startswith("{"):
        said: dict[str, object] = json.loads(line)
        return {
            key: value for key, value in said.items() if value or key not in ("failed", "abandoned")
        }
    prefix = "agctl: stopped by "
    assert line.startswith(prefix) and "; turns in flight: " in line, line
    name, _, counts = line.removeprefix(prefix).partition("; turns in flight: ")
    shown: dict[str, object] = {"stopped": name}
    for part in counts.split(", "):
        number, what = part.split(" ")
        shown[what] = int(number)
    return shown


class Stderr:
    """A running process's stderr, read as it comes: `until` a line holding some text."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stderr is not None
        self.stream = process.stderr
        self.text = ""

    def until(self, needle: str, timeout: float = 60.0) -> str:
        """All read so far, once a line holding `needle` has come (AssertionError if it
        does not within `timeout` seconds, or the stream ends)."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.stream, selectors.EVENT_READ)
            while needle not in self.text:
                left = deadline - time.monotonic()
                assert left > 0 and selector.select(timeout=left), (needle, self.text)
                chunk = os.read(self.stream.fileno(), 65536)
                assert chunk, (needle, self.text)
                self.text += chunk.decode()
        return self.text


def _ready_url(line: str) -> str | None:
    """The base URL a ready line says (with --json or without), None for any other line."""
    if line.startswith("{"):
        url: str | None = json.loads(line).get("serving")
        return url
    if line.startswith("agctl: serving http://"):
        assert line.endswith("; Ctrl-C stops)"), line
        return line.split()[2]
    return None


def agctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agctl", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def sessions(env: dict[str, str]) -> list[dict[str, object]]:
    listed: list[dict[str, object]] = json.loads(agctl(env, "session", "list", "--json").stdout)
    return listed
