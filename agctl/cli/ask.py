"""The approval question of a tool set to ask, on the controlling terminal: imported only
by a turn that offers tools, so no other command (nor --help) loads it."""

from __future__ import annotations

import errno
import os
import time
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from agctl.turn.tools import Answer, AskFn, ToolSpec


# Where the approval question is asked: the controlling terminal, whatever stdin is.
TERMINAL = "/dev/tty"
# Why opening TERMINAL fails when this process has no terminal (no controlling terminal,
# no such device in a container); any other failure is said when a question is due.
_NO_TERMINAL = (errno.ENXIO, errno.ENOENT, errno.ENODEV)
# How long a question waits for its answer: then the call is left pending in the draft.
ASK_TIMEOUT_S = 600
# How often a question asked from a worker thread looks whether agctl was interrupted.
_INTERRUPT_POLL_S = 0.1
# Answers not understood are asked about again this many times, then mean "no".
_ASK_TRIES = 3
_ANSWERS: dict[str, Answer] = {
    "y": "yes",
    "yes": "yes",
    "n": "no",
    "no": "no",
    "a": "always",
    "always": "always",
}


def terminal_ask() -> AskFn | None:
    """The approval question of a tool set to ask, put on the controlling terminal (as
    sudo and ssh ask: stdin may be the prompt's pipe); None without a terminal, so such a
    call is left pending (exit 9, decided later from the draft). A terminal that exists
    but cannot be opened is no reason to pretend there is none: a question due then
    leaves its call pending, saying why."""
    try:
        fd = os.open(TERMINAL, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in _NO_TERMINAL:
            return None
        reason = f"the terminal {TERMINAL} cannot be opened to ask on ({exc.strerror})"

        def cannot_ask(spec: ToolSpec, arguments: dict[str, Any], argv: list[str]) -> Answer:
            from agctl.base.errors import ApprovalNeeded

            raise ApprovalNeeded(spec.name, reason) from None

        return cannot_ask
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.find_root().call_on_close(lambda: os.close(fd))

    def ask(spec: ToolSpec, arguments: dict[str, Any], argv: list[str]) -> Answer:
        from agctl.base.errors import ApprovalNeeded
        from agctl.turn.tools import approval_prompt

        question = approval_prompt(spec, arguments, argv)
        _tell(fd, f"\n{question} [y/n/always] ")
        deadline = time.monotonic() + ASK_TIMEOUT_S
        for _ in range(_ASK_TRIES):
            try:
                line = _answer_line(fd, deadline)
            except TimeoutError:
                minutes = f"{ASK_TIMEOUT_S / 60:g} minutes"
                raise ApprovalNeeded(
                    spec.name, f"no answer came on the terminal in {minutes}"
                ) from None
            if line is None:
                raise ApprovalNeeded(spec.name, "the terminal closed before an answer came")
            answer = _ANSWERS.get(line.strip().lower())
            if answer is not None:
                return answer
            _tell(fd, "Answer y (yes), n (no) or always: ")
        _tell(fd, "Not run.\n")
        return "no"

    return ask


def _tell(fd: int, text: str) -> None:
    data = text.encode("utf-8", "replace")
    while data:
        data = data[os.write(fd, data) :]


def _answer_line(fd: int, deadline: float) -> str | None:
    """One line typed on the terminal `fd` (canonical mode hands over whole lines); None
    when the terminal closed first, TimeoutError when `deadline` passed first. A question
    asked from a worker thread (--tool-jobs) stops when the main thread is interrupted."""
    import select

    from agctl.base.interrupts import raise_if_interrupted

    data = b""
    while not data.endswith(b"\n") and len(data) < 4096:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        raise_if_interrupted()
        ready, _, _ = select.select([fd], [], [], min(left, _INTERRUPT_POLL_S))
        if not ready:
            continue
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # EIO: the terminal hung up
            chunk = b""
        if not chunk:
            return None
        data += chunk
    return data.decode("utf-8", "replace")
