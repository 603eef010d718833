"""Where the chat's lines come from: a terminal, through prompt_toolkit (imported here
only), or a pipe, line by line. Both join a `\"\"\"` block into one prompt."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO, Protocol, TextIO

if TYPE_CHECKING:
    from pathlib import Path

    from prompt_toolkit import PromptSession
    from prompt_toolkit.key_binding import KeyPressEvent

# Opens and closes a block of several lines, as in Python.
BLOCK = '"""'


class Reader(Protocol):
    """Gives the chat its next line: EOFError at the end (Ctrl-D, the pipe's end),
    KeyboardInterrupt for Ctrl-C at an empty prompt."""

    interactive: bool

    def read(self, prompt: str, default: str = "") -> str: ...

    def use_history(self, path: Path | None) -> None: ...


def encodable(text: str) -> bool:
    """Whether `text` is UTF-8: bytes that were not (a pipe's, a terminal's) are decoded
    as lone surrogates, which no store, wire or terminal can take."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def block_open(text: str) -> bool:
    """Whether `text` starts a block that is not closed yet."""
    stripped = text.strip()
    if not stripped.startswith(BLOCK):
        return False
    return len(stripped) < 2 * len(BLOCK) or not stripped.endswith(BLOCK)


def unblocked(text: str) -> str:
    """The prompt a line or a closed block holds: a block without its quotes and the
    newline after the opening one and before the closing one."""
    stripped = text.strip()
    if not stripped.startswith(BLOCK):
        return text
    inner = stripped[len(BLOCK) :]
    if inner.endswith(BLOCK):
        inner = inner[: -len(BLOCK)]
    return inner.removeprefix("\n").removesuffix("\n")


def history_path(data_dir: Path, session_id: str) -> Path:
    """The file of a session's chat history, made 0600 (in a 0700 directory) before
    prompt_toolkit appends to it: what was typed is as private as the conversation."""
    from agctl.base.fsio import PRIVATE_FILE, make_dirs
    from agctl.storage.file import layout

    path = layout.chat_history(data_dir, session_id)
    make_dirs(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)
    finally:
        os.close(fd)
    return path


class PipeReader:
    """Lines from a pipe, for scripts: no prompt shown, no history; a block is gathered
    until its closing line. A line that is not UTF-8 is InvalidInput (no prompt is sent
    with bytes the model would get garbled)."""

    interactive = False

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.number = 0

    def use_history(self, path: Path | None) -> None:
        pass

    def read(self, prompt: str, default: str = "") -> str:
        text = self._line()
        while block_open(text):
            text += "\n" + self._line(inside=True)
        return text

    def _line(self, inside: bool = False) -> str:
        data = self.stream.readline()
        if not data:
            if inside:
                from agctl.base.errors import UsageError

                raise UsageError(f"the input ended inside a {BLOCK} block")
            raise EOFError
        self.number += 1
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            from agctl.base.errors import InvalidInput

            raise InvalidInput(
                f"line {self.number} of standard input is not valid UTF-8 (byte {exc.start}: "
                f"{exc.reason})"
            ) from None
        return line.removesuffix("\n").removesuffix("\r")  # a CRLF file's too


class TerminalReader:
    """Lines typed on the terminal, edited with prompt_toolkit: Enter sends (inside an
    open block it starts a new line), Esc-Enter starts a new line, Ctrl-C clears the line
    or, at an empty prompt, is KeyboardInterrupt; Ctrl-D at an empty prompt is EOFError.
    `output` is the real standard output (prompt_toolkit draws with escape sequences)."""

    interactive = True

    def __init__(self, output: TextIO) -> None:
        self.output = output
        self.session: PromptSession[str] | None = None
        self.history: Path | None = None

    def use_history(self, path: Path | None) -> None:
        if path != self.history:
            self.history, self.session = path, None

    def read(self, prompt: str, default: str = "") -> str:
        if self.session is None:
            self.session = self._session()
        return self.session.prompt(prompt, default=default)

    def _session(self) -> PromptSession[str]:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, InMemoryHistory
        from prompt_toolkit.key_binding import KeyBindings
        from prompt_toolkit.output import create_output

        keys = KeyBindings()

        @keys.add("enter")
        def _send(event: KeyPressEvent) -> None:
            buffer = event.current_buffer
            if block_open(buffer.text):
                buffer.insert_text("\n")
            else:
                buffer.validate_and_handle()

        @keys.add("escape", "enter")
        def _new_line(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        @keys.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            buffer = event.current_buffer
            if buffer.text:
                buffer.reset()
            else:
                event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

        class UTF8History(FileHistory):
            """Keeps a line that is not UTF-8 out of the file (prompt_toolkit would fail
            writing it, in the middle of the prompt; the chat refuses the line)."""

            def store_string(self, string: str) -> None:
                if encodable(string):
                    super().store_string(string)

        history = UTF8History(str(self.history)) if self.history else InMemoryHistory()
        return PromptSession(
            history=history,
            key_bindings=keys,
            multiline=True,
            prompt_continuation=lambda width, line, wrapped: "." * (width - 1) + " ",
            output=create_output(stdout=self.output),
            enable_open_in_editor=False,
        )
