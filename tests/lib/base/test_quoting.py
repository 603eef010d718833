"""What agctl shows of a path or a command (agctl.base.quoting): every character that does not
show as itself escaped, and a real bash reads what is shown back as the very argv."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from agctl.base.quoting import shell_word, shell_words

ARGV = [
    "plain",
    "two words",
    "",
    "it's",
    "back\\slash",
    "\u202eright-to-left override",
    "\u2066isolate\u2069 \u200e\u200f\u061c marks",
    "zero\u200bwidth \ufeff no-break\u00a0space",
    "\x1b]0;title\x07 \x7f\x85",  # OSC, DEL, a C1 control
    "line\nbreak\ttab\rreturn \u2028\u2029",
    "tag \U000e0041 and \U0001f600",
    os.fsdecode(b"not utf-8 \xff\xfe"),
    "日本語 é",
]


def test_nothing_that_does_not_show_as_itself_is_left() -> None:
    shown = shell_words(ARGV)
    assert all(char.isprintable() for char in shown)
    assert shell_word("plain") == "plain" and shell_word("two words") == "'two words'"
    assert shell_word("\u202eabc") == "$'\\u202eabc'"
    assert shell_word(os.fsdecode(b"\xff")) == "$'\\xff'"
    assert shell_word("\U0001f600 é") == "'\U0001f600 é'"  # printable: shown as itself


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_reads_what_is_shown_back_as_the_argv() -> None:
    # A UTF-8 locale, as a terminal that shows these characters has (bash writes \uXXXX
    # in the locale's encoding).
    printed = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {shell_words(ARGV)}"],
        env={**os.environ, "LC_ALL": "C.UTF-8"},
        capture_output=True,
        check=True,
        timeout=30,
    ).stdout
    assert printed.split(b"\0")[:-1] == [os.fsencode(arg) for arg in ARGV]
