"""How agctl shows a path or a command to people: as a POSIX shell reads it back, with
every character a terminal would not show as itself (controls, bidi overrides and
isolates, zero-width and other format characters, line separators, spaces other than
the space, bytes that are not UTF-8) written as an escape in bash's $'...' quoting. What
is shown is then what runs: a name that a U+202E would show reversed reads
`sh $'\\u202ekcehc.sh'`. Redirected output is escaped too, since people read it as well.

Standard library only: the library's messages and the CLI's output both use it.
"""

from __future__ import annotations

import re
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


# What `escaped` shows as escapes: every C0 and C1 control, DEL, the bidirectional
# controls (U+061C, U+200E-F, U+202A-E, U+2066-9), the line and paragraph separators,
# and a lone surrogate (a byte that was not UTF-8).
_ESCAPED = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)


def escaped(text: str) -> str:
    """`text` on one line for a person to judge (a tool call they approve or deny): every
    character that could act on the terminal, break the line or reorder what is shown
    (the "Trojan Source" bidi controls) as its JSON escape, SGR colours included."""
    return _ESCAPED.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
