"""The chat's slash commands: each is agctl's own command (its argv), or one the chat does
itself with the library call of the command it names (/retry is `turn retry`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from agctl.base.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Mapping


class Slash(NamedTuple):
    """A slash command: its usage and help for /help, and the agctl command it runs (the
    words before its arguments, `alone` when it is given none); no `argv` when the chat
    does it itself. `takes`: the groups of the chat's own options the command takes too,
    so it sees the slot, model and tools the chat's turns use: "slot" (--slot), "model"
    (--provider, --profile, --model), "source" (--script, --cassette), "tools" (-T,
    --tools all, --tools-file), "context" (--system, --scratch)."""

    usage: str
    help: str
    argv: tuple[str, ...] = ()
    alone: tuple[str, ...] = ()
    takes: tuple[str, ...] = ()


SLASH: dict[str, Slash] = {
    "help": Slash("/help", "These commands."),
    "undo": Slash("/undo [N]", "Undo the last N turns (agctl turn undo).", ("turn", "undo")),
    "retry": Slash(
        "/retry", "Regenerate the last reply on a new slot, the old one kept (agctl turn retry)."
    ),
    "edit": Slash(
        "/edit N [TEXT]",
        "Send TEXT in place of prompt N on a new slot (agctl turn edit); without TEXT, "
        "edit prompt N's text at the prompt.",
    ),
    "fork": Slash(
        "/fork [CKPT]",
        "Fork a new session from checkpoint CKPT (default: the newest, made if the live state "
        "has none) and go on there (agctl ckpt fork).",
    ),
    "slot": Slash("/slot NAME", "Go on on slot NAME (agctl slot use).", ("slot", "use")),
    "slots": Slash("/slots", "List the slots (agctl slot list).", ("slot", "list")),
    "msgs": Slash(
        "/msgs", "List the slot's messages (agctl msg list).", ("msg", "list"), takes=("slot",)
    ),
    "diff": Slash(
        "/diff [A] [B]",
        "Compare slot A (default: the parent of B) with B (default: this one) (agctl slot diff).",
        ("slot", "diff"),
    ),
    "ckpt": Slash(
        "/ckpt [LABEL]", "Checkpoint the session (agctl ckpt create).", ("ckpt", "create")
    ),
    "ckpts": Slash("/ckpts", "List the checkpoints (agctl ckpt list).", ("ckpt", "list")),
    "rollback": Slash(
        "/rollback ID", "Roll back to checkpoint ID (agctl ckpt rollback).", ("ckpt", "rollback")
    ),
    "compress": Slash(
        "/compress [OPTIONS]",
        "Compress the slot (agctl ctx compress, its options as there).",
        ("ctx", "compress"),
        takes=("slot", "model", "source"),
    ),
    "ctx": Slash(
        "/ctx",
        "The next request's budget and cache (agctl ctx show).",
        ("ctx", "show"),
        takes=("slot", "model", "tools", "context"),
    ),
    "pin": Slash(
        "/pin N...", "Pin messages N... (agctl msg pin).", ("msg", "pin"), takes=("slot",)
    ),
    "memory": Slash(
        "/memory [set K V | get K | rm K]",
        "The session's memory (agctl memory; alone: memory list).",
        ("memory",),
        alone=("list",),
    ),
    "model": Slash(
        "/model [NAME]",
        "The model the next turn uses; with NAME, set it (agctl session set model NAME).",
    ),
    "tools": Slash("/tools", "The tools defined (agctl tool list) and those offered here."),
}


class Line(NamedTuple):
    """A line typed: a prompt to send (`name` None), or slash command `name` and its words."""

    name: str | None
    words: list[str]
    text: str


def parse(line: str) -> Line:
    """What `line` asks for. A line starting with `/` is a command (`//` sends a prompt
    starting with `/`); its words are split as a shell would. UsageError for an unknown
    command or unbalanced quotes, naming /help."""
    if not line.startswith("/") or line.startswith("//"):
        return Line(None, [], line[1:] if line.startswith("//") else line)
    import re
    import shlex

    name, rest = re.match(r"(\S*)(.*)", line[1:], re.DOTALL).groups()  # type: ignore[union-attr]
    if name not in SLASH:
        raise UsageError(f"no command /{name} in the chat: /help lists them")
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise UsageError(f"/{name}: {exc}") from None
    return Line(name, words, line)


def agctl_argv(line: Line, passed: Mapping[str, list[str]]) -> list[str]:
    """The argv of the agctl command slash command `line` runs: the chat's options it
    takes (`passed`, by group of Slash.takes: its slot, model, tools), then its own words, which
    win (/ckpt's words are its label)."""
    assert line.name is not None
    slash = SLASH[line.name]
    words = line.words
    if line.name == "ckpt" and words:
        words = ["--label", " ".join(words)]
    chat = [flag for group in slash.takes for flag in passed.get(group, [])]
    return [*slash.argv, *chat, *(words or slash.alone)]


# The widest line /help prints.
HELP_WIDTH = 100


def help_text() -> str:
    """/help: each command's usage and what it does, then how to type."""
    import textwrap

    width = max(len(slash.usage) for slash in SLASH.values())
    rows = [
        textwrap.fill(
            slash.help,
            HELP_WIDTH,
            initial_indent=f"  {slash.usage.ljust(width)}  ",
            subsequent_indent=" " * (width + 4),
        )
        for slash in SLASH.values()
    ]
    notes = (
        'Several lines: start with """ and end with """, or Esc then Enter (Alt-Enter) '
        "starts a new line. //text sends /text. Ctrl-C stops a reply (its prompt kept as "
        "the slot's draft); at an empty prompt, Ctrl-C twice or Ctrl-D leaves."
    )
    heading = "Commands (each is agctl's own command; see 'agctl COMMAND --help'):"
    return "\n".join([heading, *rows, textwrap.fill(notes, HELP_WIDTH)])
