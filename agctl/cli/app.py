"""What every command shares: the application object, shared options, input and output.

Imports click and the standard library only; the core is imported by commands when run.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agctl.base.errors import InvalidInput, NoSessionSelected, UsageError
from agctl.cli.output import echo, echo_json, json_text, key_values, page, table

if TYPE_CHECKING:
    from pathlib import Path

    from agctl.base.vocab import HookEvent
    from agctl.context.pricing import Prices
    from agctl.storage.factory import StoreChoice
    from agctl.store import Store

T = TypeVar("T")


class App:
    """Built once by the root group into `ctx.obj`; commands take it with `@pass_app`."""

    def __init__(
        self,
        data_dir: Path | None = None,
        session: str | None = None,
        json: bool = False,
        quiet: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.data_dir_given = False  # --data-dir on the command line, not AGCTL_DATA_DIR
        self.store_arg: str | None = None  # --store, or AGCTL_STORE
        self.store_origin = "--store"  # which of the two, for messages
        self.store_given = False  # --store on the command line
        self._store_choice: StoreChoice | None = None
        self.session_arg = session
        self.session_given = False  # -s/--session on the command line
        self.json = json
        self.quiet = quiet
        self.no_hooks = False  # --no-hooks or AGCTL_NO_HOOKS: see agctl.turn.hooks.hooks_disabled
        self.verbose = 0
        self._store: Store | None = None
        self._prices: Prices | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            from agctl.store import Store

            warnings_to_stderr(json=self.json)
            self._store = Store(choice=self.store_choice())
            ctx = click.get_current_context(silent=True)
            if ctx is not None:  # the command's end releases its connections (in-process too)
                ctx.find_root().call_on_close(self._store.close)
        return self._store

    def store_choice(self) -> StoreChoice:
        """The store this command uses (--store, AGCTL_STORE, the config's store.url,
        else the data dir), chosen without opening it."""
        if self._store_choice is None:
            from agctl.storage.factory import choose_store

            self._store_choice = choose_store(
                self.store_arg, origin=self.store_origin, data_dir=self.data_dir
            )
        return self._store_choice

    @property
    def local_dir(self) -> Path:
        """This machine's data dir: a file store's directory, or where a PostgreSQL store
        keeps the current-session pointer. Tools never run inside it."""
        return self.store_choice().local_dir

    def scrubbed(self, text: str) -> str:
        """`text` without the password of the store's URL, if it has one and was chosen."""
        choice = self._store_choice
        if choice is None or choice.spec.dsn is None:
            return text
        from agctl.storage.urls import redact_text

        return redact_text(text, choice.spec.dsn)

    @property
    def prices(self) -> Prices:
        """The config's price table, read once: every cost a command shows is priced with
        it (agctl.reports.usage.with_known_costs for a session)."""
        if self._prices is None:
            from agctl.config.file import ConfigFile

            self._prices = ConfigFile().load().price_overrides()
        return self._prices

    def observe(
        self, event: HookEvent, session_id: str, payload: dict[str, Any], **data: Any
    ) -> None:
        """Fire an observing event (PostRollback, PostFork) after the command's work, and
        list its hook runs in `payload` (its --json output) when there were hooks."""
        from agctl.turn.setup import hooks_in_use

        hooks = hooks_in_use(no_hooks=self.no_hooks)
        if hooks is None:
            return
        hooks.context["session"] = session_id
        hooks.observe(event, **data)
        payload["hooks"] = [run.public() for run in hooks.runs]

    def session_id(self, given: str | None = None) -> str:
        """The session named by `given` (a command's ID argument), else --session/-s or
        AGCTL_SESSION, else `session use`'s choice."""
        wanted = given or self.session_arg
        if wanted:
            return self.store.resolve_session(wanted)
        current = self.store.current_session_id()
        if current is None:
            raise NoSessionSelected()
        self.store.load_session(current)
        return current

    def found_session(self) -> str | None:
        """The session session_or_new takes, or None when it would start one: what a
        command checks its input against before anything is made."""
        if self.session_arg or self.store.current_session_id() is not None:
            return self.session_id()
        return None

    def session_or_new(self) -> str:
        """The session `session_id` finds, or with none named nor selected, a new one made
        the current session and said on stderr (unless --quiet): what a first `turn send`
        on a fresh machine expects, as `llm "hello"` just answers. A session named that
        does not exist is still not found (exit 3)."""
        found = self.found_session()
        if found is not None:
            return found
        session = self.store.create_session(None)
        self.store.set_current_session(session.id)
        if not self.quiet:
            echo(f"agctl: no session was selected: started {session.id}, now current", err=True)
        return session.id

    # ---- output --------------------------------------------------------------------

    def emit(self, payload: Any, text: str | None = None) -> None:
        """Print `payload` as JSON with --json, else `text` (or `payload` itself) for people."""
        if self.json:
            echo_json(payload)
        elif text is not None:
            if text:
                page(text)
        elif isinstance(payload, dict):
            echo(key_values(payload))
        else:
            echo(str(payload))

    def warn(self, message: str) -> None:
        """A warning from the command itself, in the library's warnings' format."""
        echo(warning_text(message, self.json), err=True)

    def emit_line(self, payload: Any) -> None:
        """Print `payload` as one JSON line, for output a script reads as it comes (JSON
        lines: search hits, stream events, replayed turns), whatever --json says."""
        echo(json_text(payload))

    def emit_json(self, payload: Any) -> None:
        """Print `payload` as a JSON document whatever --json says, for output that is
        only ever read by a program (the request a dry run would send)."""
        echo_json(payload)

    def done(self, payload: Any, text: str) -> None:
        """Report a change: like `emit`, but silent for people with --quiet."""
        if self.quiet and not self.json:
            return
        self.emit(payload, text=text)

    def emit_rows(
        self,
        rows: Sequence[dict[str, Any]],
        columns: Sequence[tuple[str, str]],
        empty: str = "",
        display: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        """Print rows as a JSON array with --json, else as a table of `columns` (key, header).

        `display` gives the rows for the table when people need derived columns.
        """
        if self.json:
            echo_json(list(rows))
        elif rows:
            echo(table(display if display is not None else rows, columns))
        elif empty:
            echo(empty, err=True)


pass_app = click.make_pass_decorator(App)


def warning_text(message: str, json: bool) -> str:
    """A warning on stderr: `agctl: warning: ...`, or with --json one JSON line
    ({"warning": "..."}), so that stderr stays JSON throughout."""
    return json_text({"warning": message}) if json else f"agctl: warning: {message}"


def warnings_to_stderr(json: bool = False) -> None:
    """The library's warnings (a data dir open to other users, a cache not updated) reach
    people as `agctl: warning: ...` (a JSON line with --json) even without -v; -v and
    AGCTL_LOG configure more."""
    import logging

    class WarningsToStderr(logging.StreamHandler):  # type: ignore[type-arg]
        """Writes to whatever sys.stderr is at the time (a test runner swaps it)."""

        @property
        def stream(self) -> Any:
            return sys.stderr

        @stream.setter
        def stream(self, value: Any) -> None:
            pass

        def format(self, record: logging.LogRecord) -> str:
            return warning_text(record.getMessage(), getattr(self, "json", False))

    logger = logging.getLogger("agctl")
    for handler in logger.handlers:
        if getattr(handler, "agctl_warnings", False):
            handler.json = json  # type: ignore[attr-defined]  # a later command, same process
    if logger.handlers:
        return
    ours = WarningsToStderr()
    ours.json = json  # type: ignore[attr-defined]
    ours.agctl_warnings = True  # type: ignore[attr-defined]
    ours.setLevel(logging.WARNING)
    logger.addHandler(ours)


# ---- shared options ------------------------------------------------------------------


def most_recent(items: Sequence[T], limit: int | None, *, newest_first: bool) -> list[T]:
    """The `limit` most recent of `items` (all when None), in their order."""
    if limit is None:
        return list(items)
    if newest_first:
        return list(items[:limit])
    return list(items[max(len(items) - limit, 0) :])


# Lets an INDEX argument be negative (`msg get -1`) instead of being parsed as an option.
NEGATIVE_INDEX = {"ignore_unknown_options": True}


# ---- input ---------------------------------------------------------------------------


INT64_MAX = 2**63 - 1


class Count(click.IntRange):
    """A number of messages, checkpoints or tokens: `min` or more, and no more than 64 bits
    hold, since settings are stored and JSON writers (orjson among them) stop there."""

    def __init__(self, min: int = 0) -> None:
        super().__init__(min=min)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number > INT64_MAX:
            self.fail(f"{number} is too large (at most {INT64_MAX}).", param, ctx)
        return number


class PathType(click.Path):
    """`click.Path` giving a pathlib.Path, that refuses, as usage errors, a NUL (click's
    own check of the path, os.stat, raises ValueError on one; only a caller of main() can
    pass it, no shell can) and, for a directory, anything else that exists there (click
    only refuses a regular file, so /dev/null would pass). pathlib is imported when a
    value is converted, not by `--help`."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and "\x00" in value:
            self.fail(f"{value!r}: a path cannot contain a NUL character", param, ctx)
        path = super().convert(value, param, ctx)
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):
                self.fail(f"{shown(os.fsdecode(path))}: {exc.strerror}", param, ctx)
        if not self.file_okay and os.path.exists(path) and not os.path.isdir(path):
            self.fail(f"{os.fsdecode(path)!r} is not a directory", param, ctx)
        from pathlib import Path

        return Path(os.fsdecode(path))


_SHOWN_LIMIT = 60


def shown(value: str) -> str:
    """`value` quoted, its undecodable bytes as \\xNN (cut when long)."""
    cut = value[:_SHOWN_LIMIT]
    chars = []
    for char in cut:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            chars.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            chars.append(f"\\u{code:04x}")
        else:
            chars.append(char)
    more = f"… ({len(value)} characters)" if len(value) > len(cut) else ""
    return "'" + "".join(chars) + "'" + more


def read_stdin_text() -> str:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"standard input is not valid UTF-8 (byte {exc.start}: {exc.reason})"
        ) from None


def stdin_is_piped() -> bool:
    """Whether standard input is a pipe or a file (not a terminal, not closed)."""
    stream = sys.stdin
    if stream is None:
        return False
    try:
        return not stream.isatty()
    except (ValueError, OSError):
        return False


def _stdin_text() -> str:
    text = read_stdin_text()
    return text[:-1] if text.endswith("\n") else text


def attached_file(path: str) -> str:
    """The text of a file given with -f/--file, under a header line naming it; a missing
    or non-UTF-8 file is a usage error (exit 2), before anything is sent or written."""
    from pathlib import Path

    _refuse_nul(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--file {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"--file {path}: not valid UTF-8 (byte {exc.start}: {exc.reason})"
        ) from None
    return f"--- {path} ---\n" + (text[:-1] if text.endswith("\n") else text)


def text_argument(
    value: str | None, what: str = "TEXT", files: Sequence[str] = (), may_be_empty: bool = False
) -> str:
    """The text of a command that reads text, never dropping piped input.

    - `-`: standard input only.
    - absent: standard input when it is piped (else a usage error, unless `files`).
    - `may_be_empty`: no text at all is not a usage error but "" (a turn after a tool
      result continues with none; the library refuses it elsewhere).
    - given: the argument; with piped standard input that is not empty, the argument, a
      blank line, then standard input (as `llm` joins them).

    Each of `files` follows, after a blank line, under a header line naming it. One
    trailing newline is dropped from stdin and from files, as `$(...)` would in a shell.
    """
    attached = [attached_file(path) for path in files]
    if value == "-":
        text = _stdin_text()
        if not text and not may_be_empty:
            raise UsageError(f"no {what} on standard input")
    elif value is None:
        piped = stdin_is_piped()
        if not piped and not attached and not may_be_empty:
            raise UsageError(f"give {what} as an argument, or '-' and pipe it on standard input")
        text = _stdin_text() if piped else ""
        if not text and not attached and not may_be_empty:
            raise UsageError(f"no {what} on standard input")
    else:
        text = value
        if stdin_is_piped():
            piped_text = _stdin_text()
            if piped_text:
                text = f"{value}\n\n{piped_text}"
    return "\n\n".join([text, *attached] if text else attached)


def _refuse_nul(path: str) -> None:
    if "\x00" in path:
        raise UsageError(f"{path!r}: a path cannot contain a NUL character")


def read_input_file(path: str) -> tuple[bytes, str]:
    """The bytes of PATH, or of stdin for '-', with a name for error messages."""
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    from pathlib import Path

    _refuse_nul(path)
    try:
        return Path(path).read_bytes(), path
    except OSError as exc:
        from agctl.base.errors import NotFound, StoreError

        if isinstance(exc, FileNotFoundError):
            raise NotFound(f"{path}: no such file") from None
        raise StoreError(f"cannot read {path}: {exc.strerror}") from None


def write_output(target: str, data: bytes) -> None:
    """Write `data` to the FILE the user named (following symlinks, devices welcome), or to
    stdout for '-'. Unlike agctl's own documents, this file is the user's: it is opened and
    written in place; a file it creates holds a conversation, so it is 0600 whatever the
    umask (an existing file keeps its mode)."""
    if target == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    from agctl.base.errors import StoreError

    _refuse_nul(target)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc.strerror}") from None
