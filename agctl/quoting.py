"""How agctl shows a path or a command to people: as a POSIX shell reads it back, with
every character a terminal would not show as itself (controls, bidi overrides and
isolates, zero-width and other format characters, line separators, spaces other than
the space, bytes that are not UTF-8) written as an escape in bash's $'...' quoting. What
is shown is then what runs: a name that a U+202E would show reversed reads
`sh $'\\u202ekcehc.sh'`. Redirected output is escaped too, since people read it as well.

Standard library only: the library's messages and the CLI's output both use it.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

_NAMED = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escaped(char: str) -> str:
    """One character inside $'...': itself when it shows as itself, else its escape."""
    if char in _NAMED:
        return _NAMED[char]
    if char.isprintable():
        return char
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte of a file name that is not UTF-8
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def shell_word(word: str) -> str:
    """`word` as one shell word: as it is when that is safe, quoted when it needs it, and in
    $'...' with escapes when it holds a character that does not show as itself."""
    if word.isprintable():
        return shlex.quote(word)
    return "$'" + "".join(_escaped(char) for char in word) + "'"


def shell_words(argv: Iterable[str]) -> str:
    """An argv as a command line a shell reads back as that argv (see `shell_word`)."""
    return " ".join(shell_word(word) for word in argv)
