"""A pseudo-terminal for real agctl processes, and text that tries to drive one: shared
by the tests of what reaches a terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

# A title that sets the window title, a hyperlink, the OSC 52 clipboard write, a screen
# clear, 8-bit CSI and OSC, and BEL, BS, CR, DEL.
OSC52 = "\x1b]52;c;ZXZpbA==\x07"
HOSTILE_TEXT = (
    f"look{OSC52} \x1b]8;;http://evil.example/\x07link\x1b]8;;\x07 \x1b[2J"
    "\x9b6n \x9d0;title\x07 bell\x07 back\x08 cr\r del\x7f end"
)
TIMEOUT = 30


def on_terminal(env: dict[str, str], *args: str) -> tuple[int, bytes]:
    """Run agctl with stdout and stderr on a pseudo-terminal; what the terminal received."""
    master, slave = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "agctl", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    received = b""
    deadline = time.monotonic() + TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not chunk:
                break
            received += chunk
        status = process.wait(timeout=TIMEOUT)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return status, received.replace(b"\r\n", b"\n")


def raw_controls(data: bytes) -> list[str]:
    """The control characters a terminal would act on (the pty's CR LF made LF already)."""
    text = data.decode("utf-8", "replace")
    return sorted(
        {repr(c) for c in text if (ord(c) < 32 and c not in "\n\t") or 127 <= ord(c) < 160}
    )


class ControllingTerminal:
    """agctl run with a pseudo-terminal as its controlling terminal (/dev/tty) while its
    standard streams are not on it (stdin /dev/null, stdout and stderr pipes), so that
    what it asks there is asked on /dev/tty itself; the test reads the terminal and types.
    With `streams_on_it`, the standard streams are on the terminal too."""

    def __init__(self, env: dict[str, str], *args: str, streams_on_it: bool = False) -> None:
        import fcntl
        import termios

        # The slave stays open here too: until the child opens /dev/tty, nothing else has.
        self.master, self.slave = pty.openpty()
        slave = self.slave

        def take_terminal() -> None:  # in the child, a session leader already
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

        stdin, output = (slave, slave) if streams_on_it else (subprocess.DEVNULL, subprocess.PIPE)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agctl", *args],
            stdin=stdin,
            stdout=output,
            stderr=output,
            env=env,
            start_new_session=True,
            preexec_fn=take_terminal,
        )
        self.received = b""  # everything the terminal showed so far
        self._seen = 0  # how much of it `wait_for` has consumed

    def wait_for(self, text: bytes, timeout: float = TIMEOUT) -> bytes:
        """What the terminal shows from the last `wait_for` up to and including `text`,
        waiting for it at most `timeout` seconds (AssertionError if it never comes)."""
        deadline = time.monotonic() + timeout
        while text not in self.received[self._seen :]:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never came; the terminal showed {self.received!r}"
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                self.received += os.read(self.master, 65536)
            elif self.process.poll() is not None:
                raise AssertionError(f"agctl ended before {text!r}: {self.received!r}")
        end = self.received.index(text, self._seen) + len(text)
        shown, self._seen = self.received[self._seen : end], end
        return shown

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def finish(self) -> tuple[int, str, str]:
        """The exit status, stdout and stderr, once the process ends (then the terminal's
        last output is in `received`)."""
        try:
            out, err = self.process.communicate(timeout=TIMEOUT)
            while True:
                ready, _, _ = select.select([self.master], [], [], 0)
                if not ready:
                    break
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                self.received += chunk
        finally:
            os.close(self.master)
            os.close(self.slave)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        return self.process.returncode, out.decode(), err.decode()


class ChatTerminal(ControllingTerminal):
    """agctl with all three standard streams on a pseudo-terminal that is its controlling
    terminal, as in a terminal emulator (`agctl chat`): the test reads what it shows and
    types keys (Enter is CR, as a keyboard sends it). prompt_toolkit is told not to ask
    the terminal where its cursor is (a terminal emulator answers; this test terminal
    does not)."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        environment = {**env, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
        super().__init__(environment, *args, streams_on_it=True)

    def keys(self, data: str) -> None:
        """Type `data` as it is (control keys included: \\x03 is Ctrl-C, \\x04 Ctrl-D)."""
        os.write(self.master, data.encode())

    def type(self, line: str) -> None:
        self.keys(line + "\r")

    def finish(self) -> tuple[int, str, str]:
        """The exit status once the process ends (everything it showed is in `received`)."""
        try:
            deadline = time.monotonic() + TIMEOUT
            while self.process.poll() is None and time.monotonic() < deadline:
                ready, _, _ = select.select([self.master], [], [], 0.2)
                if ready:
                    try:
                        self.received += os.read(self.master, 65536)
                    except OSError:
                        break
            self.process.wait(timeout=TIMEOUT)
        finally:
            os.close(self.master)
            os.close(self.slave)
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        return self.process.returncode, "", ""
