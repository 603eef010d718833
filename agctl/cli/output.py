"""Everything agctl prints passes through here: standard output and standard error are
wrapped for the whole run of a command, so two rules hold for every writer (click.echo,
sys.stdout, the logging handler, click's own error messages, streaming turn output).

- On a terminal, control characters in the text never reach it raw: a reply, a title or an
  imported message could otherwise set the window title, plant a hyperlink or write the
  clipboard (OSC 52), clear the screen or overwrite a line. Every C0 control except newline
  and tab, DEL and every C1 control is written as its JSON escape (ESC as ``\\u001b``), which
  people can read and which keeps JSON output valid JSON of the exact text; colour
  sequences (SGR, ``ESC [ … m``) are dropped. agctl's own colours pass through `secho`,
  click's progress bar draws as it does. Redirected output is written as it is (and
  `agctl.cli.app.echo` keeps click from stripping sequences from it).
- A failure to write standard output (a full disk, a closed pipe) is recorded and what
  follows is dropped, never raised: the command finishes its work (a streamed turn whose
  reader went away is still committed), and the command line then reports the failure
  once, with no traceback (see `Output.failure` and `settle`).

It also renders what commands print (`table`, `key_values`, `json_text`, `plain`), so
that no command formats output of its own, and keeps it in English (see `_english`).

Imports click and the standard library only.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import errno
import gettext
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO, cast

import click

_lookup = gettext.dgettext


def _english(domain: str, message: str) -> str:
    """Click's texts ("Usage:", "Options", "env var: ...") in English, as agctl's own are:
    click ships no translation and agctl none, so a lookup in the default domain never
    finds one, yet each searched the locale directories (the first importing `locale`):
    6M instructions, 2% of `agctl --help`. Other domains are looked up as usual."""
    return message if domain == "messages" else _lookup(domain, message)


gettext.dgettext = _english  # what gettext.gettext, click's `_`, calls

_CONTROLS = re.compile("\x1b\\[[0-9;]*m|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_trusted = contextvars.ContextVar("agctl_trusted_output", default=False)


_UNDECODED = re.compile("[\ud800-\udfff]")


def _undecoded(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def _shown(match: re.Match[str]) -> str:
    found = match.group()
    return "" if len(found) > 1 else f"\\u{ord(found):04x}"


def neutralise(text: str) -> str:
    """`text` with no control character a terminal would act on (see the module's rules)."""
    return _CONTROLS.sub(_shown, text)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _from_click_terminal_ui() -> bool:
    """Whether the write in progress comes from click's progress bar, which draws with CR
    and cursor sequences of its own and shows no user data (`page` neutralises what goes
    to click's pager). Frame 0 is this function, 1 `Output.write`, 2 its caller."""
    try:
        frame = sys._getframe(2)
    except ValueError:  # called from the bottom of the stack: not from click
        return False
    if frame.f_globals.get("__name__") == "click.utils" and frame.f_back is not None:
        frame = frame.f_back  # through click.echo
    return frame.f_globals.get("__name__") == "click._termui_impl"


class Output:
    """A text stream in front of sys.stdout or sys.stderr (or of nothing, when the process
    was started with that descriptor closed)."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        self.neutralising = _isatty(stream)
        self.failure: OSError | None = None
        self._buffer: _BinaryOutput | None = None

    # ---- what callers check ----------------------------------------------------------

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str:
        return getattr(self.stream, "errors", None) or "strict"

    @property
    def buffer(self) -> _BinaryOutput:
        if self._buffer is None:
            self._buffer = _BinaryOutput(self)
        return self._buffer

    @property
    def closed(self) -> bool:
        return False

    def isatty(self) -> bool:
        return _isatty(self.stream)

    def fileno(self) -> int:
        if self.stream is None:
            raise OSError(errno.EBADF, "it is closed")
        return self.stream.fileno()

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)

    # ---- writing ---------------------------------------------------------------------
    # A file name that is not UTF-8 (any bytes are a valid path) reaches text as lone
    # surrogates, which no stream can encode: they are shown as \xNN.

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        shown = _UNDECODED.sub(_undecoded, text)
        if self.neutralising and not _trusted.get() and not _from_click_terminal_ui():
            shown = neutralise(text)
        self._do(lambda stream: stream.write(shown))
        return len(text)

    def flush(self) -> None:
        if self.stream is not None:
            self._do(lambda stream: stream.flush())

    def _do(self, action: Callable[[TextIO], object]) -> None:
        """Run `action` on the stream, unless it failed already; a failure is kept, not
        raised: output that cannot be written must not stop the work it reports (a turn
        streamed into `head` is committed all the same), and `settle` reports it."""
        if self.failure is not None:
            return
        try:
            if self.stream is None:
                raise OSError(errno.EBADF, "it is closed")
            action(self.stream)
        except OSError as exc:
            self.failure = exc


class _BinaryOutput:
    """`Output.buffer`: on a terminal, bytes are decoded, neutralised and encoded again (by
    an incremental decoder: a character may be split across writes)."""

    def __init__(self, text: Output) -> None:
        self.text = text
        self._decoder = codecs.getincrementaldecoder(text.encoding)(errors="replace")

    def write(self, data: bytes | bytearray | memoryview) -> int:
        size = len(data)
        if self.text.neutralising:
            shown = neutralise(self._decoder.decode(bytes(data)))
            data = shown.encode(self.text.encoding, errors="replace")

        def write(stream: TextIO) -> None:
            stream.flush()  # text written before these bytes comes first
            stream.buffer.write(data)

        self.text._do(write)
        return size

    def flush(self) -> None:
        self.text.flush()

    def isatty(self) -> bool:
        return self.text.isatty()

    def fileno(self) -> int:
        return self.text.fileno()

    def writable(self) -> bool:
        return True


@contextlib.contextmanager
def _trusted_writes() -> Iterator[None]:
    """agctl's own styled text, written inside this, keeps its colours on a terminal."""
    token = _trusted.set(True)
    try:
        yield
    finally:
        _trusted.reset(token)


def secho(message: str, *, err: bool = False, nl: bool = True, **styles: Any) -> None:
    """`click.secho` for agctl's own words: its style reaches a terminal (click decides
    when, as ever: not on a pipe, not with --no-color); controls in `message` do not."""
    stream = sys.stderr if err else sys.stdout
    if isinstance(stream, Output) and stream.neutralising:
        message = neutralise(message)
    with _trusted_writes():
        click.secho(message, err=err, nl=nl, **styles)


@contextlib.contextmanager
def guarded() -> Iterator[Output]:
    """Put `Output` in front of sys.stdout and sys.stderr for the body; yield the one of
    standard output, whose `failure` tells whether it could not be written."""
    if isinstance(sys.stdout, Output):  # a command running commands (agctl demo)
        yield sys.stdout
        return
    saved = sys.stdout, sys.stderr
    stdout = Output(sys.stdout)
    sys.stdout = cast(TextIO, stdout)
    if not isinstance(sys.stderr, Output):
        sys.stderr = cast(TextIO, Output(sys.stderr))
    try:
        yield stdout
    finally:
        sys.stdout, sys.stderr = saved


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell shows for a tool killed by the signal


def settle(stdout: Output) -> int | None:
    """Flush standard output at the end of a command. When it could not be written, point
    the descriptor at /dev/null (so that the interpreter's own flush at exit finds nothing
    to fail on), say so on stderr unless the reader just went away, and return the status:
    141 for a closed pipe (`agctl … | head -1`), else 1."""
    with contextlib.suppress(OSError):
        stdout.flush()
    failure = stdout.failure
    if failure is None:
        return None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        fd = stdout.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    if failure.errno == errno.EPIPE:
        return EXIT_BROKEN_PIPE
    reason = failure.strerror or str(failure)
    click.echo(f"agctl: error: cannot write to standard output: {reason}", err=True)
    return 1


# ---- rendering: every table, JSON document and JSON line agctl prints ---------------


def echo(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """Print text exactly: click.echo would strip what looks like a colour or cursor
    sequence from text sent to a pipe, changing a message. What may reach a terminal is
    agctl.cli.output's job."""
    click.echo(text, err=err, nl=nl, color=True)


def page(text: str) -> None:
    """Print text for people: through $PAGER when it does not fit a terminal, else plainly."""
    import shutil

    if sys.stdout.isatty() and text.count("\n") >= shutil.get_terminal_size().lines - 1:
        # The pager writes to the terminal itself, past agctl's guard on standard output.
        click.echo_via_pager(neutralise(text), color=True)
    else:
        echo(text)


def json_text(payload: Any, *, indent: bool = False) -> str:
    """`payload` as JSON text: indented for a document, on one line for JSON lines."""
    import orjson

    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        return orjson.dumps(payload, option=option).decode()
    except TypeError:
        # A file name that is not UTF-8 (any bytes are a valid path): escaped, as JSON can.
        import json

        if indent:
            return json.dumps(payload, indent=2, default=str)
        return json.dumps(payload, separators=(",", ":"), default=str)


def echo_json(payload: Any, *, err: bool = False) -> None:
    echo(json_text(payload, indent=True), err=err)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return " ".join(str(value).split())


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """A plain left-aligned table; the last column is cut to the terminal width."""
    import shutil

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


def plain(value: Any) -> str:
    """A value for people: text as it is, anything else as JSON (true, null, {"a": 1}),
    never a Python repr (True, None, {'a': 1})."""
    if isinstance(value, str):
        return value
    return json_text(value)


def aligned(lines: Sequence[Sequence[str]], widths: Sequence[int]) -> str:
    """Lines of cells, each cell padded to its column's fixed width (one space between),
    for output whose layout must not move with its values."""
    return "\n".join(
        " ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)) for cells in lines
    )


def key_values(payload: dict[str, Any]) -> str:
    width = max((len(k) for k in payload), default=0)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in payload.items())
