"""A throwaway PostgreSQL server for the tests: real binaries, a Unix socket, no TCP.

The session-scoped `pg_server` fixture starts one (initdb + pg_ctl, as an unprivileged
user when the tests run as root, since both refuse root); `pg_database` gives each test
module a fresh database; `pg_store` each test a fresh schema in it (agctl's `schema`
setting), so every test starts from an empty store. Without the server binaries or
psycopg the tests skip, saying why; under AGCTL_REQUIRE_POSTGRES=1 (CI) that skip fails.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

# The user the server runs as when the tests run as root; made when missing.
SERVER_USER = "postgres"
# The database role the tests connect as (the server's superuser).
ROLE = "agctl"
SKIP_PREFIX = "postgres:"


def _version(bindir: str) -> tuple[int, ...]:
    digits = Path(bindir).parent.name
    return tuple(int(part) for part in digits.split(".") if part.isdigit()) or (0,)


def find_bindir() -> Path | None:
    """Where initdb, pg_ctl and postgres are: `pg_config --bindir`, else the newest
    /usr/lib/postgresql/*/bin (Debian puts the server there, off PATH)."""
    found = shutil.which("pg_config")
    candidates: list[str] = []
    if found:
        try:
            out = subprocess.run(
                [found, "--bindir"], capture_output=True, text=True, timeout=30, check=True
            )
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version, reverse=True)
    for bindir in candidates:
        if all(os.access(Path(bindir, name), os.X_OK) for name in ("initdb", "pg_ctl", "postgres")):
            return Path(bindir)
    return None


def _server_user() -> str | None:
    """The unprivileged user to run the server as (None: the tests' own user)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
             SERVER_USER],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
    return SERVER_USER


@dataclass
class PgServer:
    """One running server: its data dir, its socket dir, and how to run its tools."""

    bindir: Path
    base: Path
    user: str | None

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base / "socket"

    @property
    def logfile(self) -> Path:
        return self.base / "server.log"

    def run(self, tool: str, *args: str, timeout: float = 120) -> None:
        command = [str(self.bindir / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode:
            log = self.logfile.read_text(errors="replace")[-4000:] if self.logfile.exists() else ""
            raise RuntimeError(f"{tool} {' '.join(args)} failed:\n{done.stdout}{done.stderr}{log}")

    def init(self) -> None:
        for path in (self.base, self.socket_dir):
            path.mkdir(mode=0o700, exist_ok=True)
            if self.user is not None:
                entry = pwd.getpwnam(self.user)
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self.run(
            "initdb", "-D", str(self.data), "-U", ROLE, "--auth=trust", "-E", "UTF8",
            "--locale=C", "--no-sync",
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-c listen_addresses='' -k {self.socket_dir} -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self.run("pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-w", "-t", "60",
                 "-o", options, "start")  # fmt: skip

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server; an immediate stop is a crash, which keeps what was committed.
        With synchronous_commit off (for speed) the last commits may still be in the
        server's WAL buffers: they are written out first, as a server that waits for its
        commits would have had them, so a test sees a crash, not lost commits."""
        if mode == "immediate":
            # By psql, in a process of its own: a test that counts this process's
            # connections sees none. A server not answering has nothing more to keep.
            with contextlib.suppress(RuntimeError):
                self.run(
                    "psql", "-X", "-q", "-h", str(self.socket_dir), "-U", ROLE, "-d",
                    "postgres", "-c", "SELECT pg_catalog.pg_switch_wal()", timeout=30,
                )  # fmt: skip

        self.run("pg_ctl", "-D", str(self.data), "-w", "-m", mode, "stop")

    def restart(self) -> None:
        """Stop (fast: connections are cut) and start again on the same socket."""
        self.stop("fast")
        self.start()

    def url(self, database: str = "postgres", **params: str) -> str:
        """A postgresql:// URL over the socket (libpq takes the socket dir as `host`)."""
        query = "&".join(
            f"{key}={quote(value)}"
            for key, value in {"host": str(self.socket_dir), **params}.items()
        )
        return f"postgresql://{ROLE}@/{database}?{query}"

    def execute(self, sql: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]


def skip(reason: str) -> None:
    pytest.skip(f"{SKIP_PREFIX} {reason}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        skip("psycopg is not installed (pip install -e '.[test]')")
    bindir = find_bindir()
    if bindir is None:
        skip("no PostgreSQL server binaries (pg_config --bindir, /usr/lib/postgresql/*/bin)")
        raise AssertionError  # unreachable: skip raises
    server = PgServer(bindir, Path(tempfile.mkdtemp(prefix="agctl-pg-")), _server_user())
    try:
        server.init()
        server.start()
        yield server
    finally:
        with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
            server.stop()
        shutil.rmtree(server.base, ignore_errors=True)


_numbers = itertools.count(1)


@pytest.fixture(scope="module")
def pg_database(pg_server: PgServer) -> str:
    """A fresh database for this test module: its name."""
    name = f"agctl_test_{next(_numbers)}"
    pg_server.execute(f"CREATE DATABASE {name}")
    return name


@dataclass(frozen=True)
class PgStore:
    """Where an empty store is: a database's URL and a schema nothing has used yet."""

    dsn: str
    schema: str


@pytest.fixture
def pg_store(pg_server: PgServer, pg_database: str) -> PgStore:
    """A fresh schema of the module's database: an empty store."""
    return PgStore(pg_server.url(pg_database), f"s{next(_numbers)}")


# A password in the store's URL (trust authentication ignores it): no output may show it.
PASSWORD = "s3cr3t-Pa55word"


@pytest.fixture
def pg_env(pg_server: PgServer, pg_store: PgStore, monkeypatch: pytest.MonkeyPatch) -> str:
    """AGCTL_STORE and AGCTL_STORE_SCHEMA name a fresh schema of the test server, by a
    URL that holds a password: the URL."""
    url = pg_store.dsn.replace(f"postgresql://{ROLE}@", f"postgresql://{ROLE}:{PASSWORD}@", 1)
    monkeypatch.setenv("AGCTL_STORE", url)
    monkeypatch.setenv("AGCTL_STORE_SCHEMA", pg_store.schema)
    return url
