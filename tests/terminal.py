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
