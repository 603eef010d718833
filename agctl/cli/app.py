"""What every command shares: the application object, shared options, input and output.

Imports click and the standard library only; the core is imported by commands when run.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agctl.cli.complete import complete_sessions, complete_slots
from agctl.errors import InvalidInput, NoSessionSelected, UsageError

if TYPE_CHECKING:
    from agctl.store import Store

F = TypeVar("F", bound=Callable[..., Any])


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
        self.session_arg = session
        self.json = json
        self.quiet = quiet
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            from agctl.store import Store

            self._store = Store(self.data_dir)
        return self._store

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

    # ---- output --------------------------------------------------------------------

    def emit(self, payload: Any, text: str | None = None) -> None:
        """Print `payload` as JSON with --json, else `text` (or `payload` itself) for people."""
        if self.json:
            echo_json(payload)
        elif text is not None:
            if text:
                page(text)
        elif isinstance(payload, dict):
            click.echo(key_values(payload))
        else:
            click.echo(str(payload))

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
            click.echo(table(display if display is not None else rows, columns))
        elif empty:
            click.echo(empty, err=True)


pass_app = click.make_pass_decorator(App)


def page(text: str) -> None:
    """Print text for people: through $PAGER when it does not fit a terminal, else plainly."""
    if sys.stdout.isatty() and text.count("\n") >= shutil.get_terminal_size().lines - 1:
        click.echo_via_pager(text)
    else:
        click.echo(text)


def echo_json(payload: Any) -> None:
    import orjson

    data = orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    click.echo(data.decode())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return " ".join(str(value).split())


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """A plain left-aligned table; the last column is cut to the terminal width."""
    cells = [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    headers = [header for _, header in columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    room = shutil.get_terminal_size((100, 24)).columns - sum(w + 2 for w in widths[:-1])
    widths[-1] = max(min(widths[-1], room), len(headers[-1]))
    lines = []
    for line in [headers, *cells]:
        last = line[-1]
        if len(last) > widths[-1]:
            last = last[: max(widths[-1] - 1, 0)] + "…"
        parts = [v.ljust(w) for v, w in zip(line[:-1], widths[:-1], strict=True)]
        lines.append("  ".join([*parts, last]).rstrip())
    return "\n".join(lines)


def key_values(payload: dict[str, Any]) -> str:
    width = max((len(k) for k in payload), default=0)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in payload.items())


# ---- shared options ------------------------------------------------------------------


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(App).json = True


def _set_session(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.ensure_object(App).session_arg = value


def json_option(fn: F) -> F:
    """`--json` on a command, the same as the global one."""
    return click.option(
        "--json",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_json,
        help="Print machine-readable JSON.",
    )(fn)


def session_option(fn: F) -> F:
    """`--session/-s` on a command, the same as the global one."""
    return click.option(
        "--session",
        "-s",
        metavar="ID",
        expose_value=False,
        callback=_set_session,
        shell_complete=complete_sessions,
        help="Session id or unique prefix (default: AGCTL_SESSION, else 'session use').",
    )(fn)


def slot_option(fn: F) -> F:
    return click.option(
        "--slot",
        metavar="NAME",
        shell_complete=complete_slots,
        help="Slot to act on (default: the current slot).",
    )(fn)


def command_options(fn: F) -> F:
    """The options every session-scoped command takes."""
    return session_option(json_option(fn))


# Lets an INDEX argument be negative (`msg get -1`) instead of being parsed as an option.
NEGATIVE_INDEX = {"ignore_unknown_options": True}


# ---- input ---------------------------------------------------------------------------


def read_stdin_text() -> str:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"standard input is not valid UTF-8 (byte {exc.start}: {exc.reason})"
        ) from None


def text_argument(value: str | None, what: str = "TEXT") -> str:
    """TEXT from the argument, or from stdin when it is '-' or absent and stdin is piped.

    One trailing newline is dropped from stdin, as `$(...)` would in a shell.
    """
    if value is not None and value != "-":
        return value
    if value is None and sys.stdin.isatty():
        raise UsageError(f"give {what} as an argument, or '-' and pipe it on standard input")
    text = read_stdin_text()
    text = text[:-1] if text.endswith("\n") else text
    if not text:
        raise UsageError(f"no {what} on standard input")
    return text


def read_input_file(path: str) -> tuple[bytes, str]:
    """The bytes of PATH, or of stdin for '-', with a name for error messages."""
    if path == "-":
        return sys.stdin.buffer.read(), "<stdin>"
    try:
        return Path(path).read_bytes(), path
    except OSError as exc:
        from agctl.errors import NotFound, StoreError

        if isinstance(exc, FileNotFoundError):
            raise NotFound(f"{path}: no such file") from None
        raise StoreError(f"cannot read {path}: {exc.strerror}") from None


def write_output(target: str, data: bytes) -> None:
    """Write `data` to the FILE the user named (following symlinks, devices welcome), or to
    stdout for '-'. Unlike agctl's own documents, this file is the user's: it is opened and
    written in place, with their umask."""
    if target == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    from agctl.errors import StoreError

    try:
        with open(target, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise StoreError(f"cannot write {target}: {exc.strerror}") from None
