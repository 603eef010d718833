"""Regenerate what is derived from the Click tree: completions, man pages, the README reference.

`python scripts/generate.py` writes the files; `python scripts/generate.py --check` writes
nothing and exits 1, listing what is stale, when a committed copy differs from what this
script produces (CI runs the check, so a help text change must come with its regeneration).
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
COMPLETION_FILES = {"bash": "agctl.bash", "zsh": "_agctl", "fish": "agctl.fish"}
MAN_DIR = "man/man1"
README = "README.md"
REFERENCE_START = "<!-- cli-reference:start -->"
REFERENCE_END = "<!-- cli-reference:end -->"
# The man pages carry the release date of the version, never today's date, so that
# regenerating them is reproducible; a version bump must add its date here.
RELEASE_DATES = {"0.1.0": "2026-11-30"}
DIFF_LINES = 20
SHORT_HELP_LIMIT = 200


@dataclass(frozen=True)
class Node:
    """One command of the Click tree, with the context it runs in."""

    path: tuple[str, ...]
    command: click.Command
    ctx: click.Context
    subcommands: tuple[tuple[str, click.Command], ...]

    @property
    def page(self) -> str:
        return "-".join(self.path)

    @property
    def parent_pages(self) -> list[str]:
        return ["-".join(self.path[:depth]) for depth in range(1, len(self.path))]


def make_context(
    command: click.Command, name: str, parent: click.Context | None = None
) -> click.Context:
    """A context as `make_context` builds it (context_settings applied), without parsing."""
    return command.context_class(command, info_name=name, parent=parent, **command.context_settings)


def walk(command: click.Command, ctx: click.Context, path: tuple[str, ...]) -> Iterator[Node]:
    """Every visible command, depth first, in the order `--help` lists them."""
    subcommands: list[tuple[str, click.Command]] = []
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                subcommands.append((name, sub))
    yield Node(path, command, ctx, tuple(subcommands))
    for name, sub in subcommands:
        yield from walk(sub, make_context(sub, name, ctx), (*path, name))


def short_help(command: click.Command) -> str:
    return command.get_short_help_str(limit=SHORT_HELP_LIMIT)


def usage(node: Node) -> str:
    """The usage line without `Usage:` and unwrapped, whatever the terminal width."""
    return " ".join([node.ctx.command_path, *node.command.collect_usage_pieces(node.ctx)])


def paragraphs(text: str) -> list[tuple[bool, list[str]]]:
    """Click's help paragraphs: (preformatted, lines); a `\\b` line marks a preformatted one."""
    result: list[tuple[bool, list[str]]] = []
    for block in re.split(r"\n\s*\n", inspect.cleandoc(text).partition("\f")[0]):
        lines = block.splitlines()
        if lines and lines[0].strip() == "\b":
            result.append((True, lines[1:]))
        elif lines:
            result.append((False, [line.strip() for line in lines]))
    return result


# ---- roff ------------------------------------------------------------------------------

ROFF_CHARS = {
    "\\": "\\e",
    "-": "\\-",
    "'": "\\(aq",
    "`": "\\(ga",
    "~": "\\(ti",
    "^": "\\(ha",
}


def roff(text: str) -> str:
    """Text as roff prints it literally: escapes, ASCII hyphens and quotes, \\[uXXXX]."""
    return "".join(
        ROFF_CHARS.get(char, char) if ord(char) < 128 else f"\\[u{ord(char):04X}]" for char in text
    )


def roff_line(line: str) -> str:
    """A text line; one starting with a dot would be read as a request."""
    return f"\\&{line}" if line.startswith(".") else line


def bold(text: str) -> str:
    return f"\\fB{roff(text)}\\fR"


def italic(text: str) -> str:
    return f"\\fI{roff(text)}\\fR"


def page_ref(page: str) -> str:
    return f"{bold(page)}(1)"


def roff_paragraphs(text: str) -> list[str]:
    lines: list[str] = []
    for preformatted, block in paragraphs(text):
        lines.append(".PP")
        if preformatted:
            lines.append(".nf")
            lines.extend(roff_line(roff(line)) for line in block)
            lines.append(".fi")
        else:
            lines.extend(roff_line(roff(line)) for line in block)
    return lines


def synopsis(node: Node) -> str:
    """The usage line: the command in bold, metavariables (OPTIONS, SRC, …) in italics."""
    pieces = " ".join(node.command.collect_usage_pieces(node.ctx))
    marked = "".join(
        italic(token) if re.fullmatch(r"[A-Z][A-Z0-9_]*", token) else roff(token)
        for token in re.split(r"([A-Z][A-Z0-9_]*)", pieces)
        if token
    )
    return f"{bold(node.ctx.command_path)} {marked}".rstrip()


def option_flags(option: click.Option, ctx: click.Context) -> str:
    def flags(opts: list[str]) -> str:
        ordered = sorted(opts, key=lambda opt: len(opt) - len(opt.lstrip("-/")))
        text = ", ".join(bold(opt) for opt in ordered)
        if not option.is_flag and not option.count:
            text += f" {italic(option.make_metavar(ctx))}"
        return text

    forms = [flags(option.opts)]
    if option.secondary_opts:
        forms.append(flags(option.secondary_opts))
    return " / ".join(forms)


def option_help(option: click.Option, ctx: click.Context) -> str:
    """The help as `--help` shows it, with the env var even when `--help` does not name it."""
    extra = option.get_help_extra(ctx)
    envvars: tuple[str, ...] = extra.get("envvars", ())
    if not envvars and option.envvar:
        envvars = (option.envvar,) if isinstance(option.envvar, str) else (*option.envvar,)
    items = []
    if envvars:
        items.append(f"env var: {', '.join(envvars)}")
    if "default" in extra:
        items.append(f"default: {extra['default']}")
    if "range" in extra:
        items.append(extra["range"])
    if "required" in extra:
        items.append("required")
    help_text = " ".join((option.help or "").split())
    if items:
        help_text = f"{help_text} [{'; '.join(items)}]".strip()
    return help_text


def exit_status(exit_codes: str) -> list[str]:
    """The EXIT_CODES table of `agctl --help` as a tight tagged list."""
    lines = [".PD 0"]
    for match in re.finditer(r"^\s*(\d+)\s+(.+)$", exit_codes, re.MULTILINE):
        lines += [".TP", bold(match[1]), roff_line(roff(match[2].strip()))]
    return [*lines, ".PD"]


def man_page(node: Node, version: str, date: str, exit_codes: str) -> str:
    command = node.command
    lines = [
        '.\\" Generated by scripts/generate.py from the Click tree; do not edit.',
        f'.TH "{roff(node.page.upper())}" "1" "{date}" "agctl {version}" "agctl manual"',
        # Fill without justifying or hyphenating: option names and ids stay whole.
        ".nh",
        ".ad l",
        ".SH NAME",
        f"{roff(node.page)} \\- {roff(short_help(command))}",
        ".SH SYNOPSIS",
        synopsis(node),
        ".SH DESCRIPTION",
        *roff_paragraphs(command.help or ""),
    ]
    if command.epilog and command.epilog != exit_codes:
        lines += roff_paragraphs(command.epilog)
    options = [
        param
        for param in command.get_params(node.ctx)
        if isinstance(param, click.Option) and not param.hidden
    ]
    if options:
        lines.append(".SH OPTIONS")
        for option in options:
            help_text = option_help(option, node.ctx)
            lines += [".TP", option_flags(option, node.ctx)]
            if help_text:
                lines.append(roff_line(roff(help_text)))
    if node.subcommands:
        lines.append(".SH COMMANDS")
        for name, sub in node.subcommands:
            lines += [".TP", page_ref(f"{node.page}-{name}"), roff_line(roff(short_help(sub)))]
    if len(node.path) == 1:
        lines += [".SH EXIT STATUS", *exit_status(exit_codes)]
    see_also = node.parent_pages or [f"{node.page}-{name}" for name, _ in node.subcommands]
    if see_also:
        lines += [".SH SEE ALSO", ",\n".join(page_ref(page) for page in see_also)]
    return "\n".join(lines) + "\n"


# ---- README ----------------------------------------------------------------------------


def reference(nodes: list[Node]) -> str:
    """The README's CLI reference: each command's usage and first help line."""
    blocks: list[list[str]] = []
    for node in nodes[1:]:
        if len(node.path) == 2:
            blocks.append([])
        if node.subcommands:
            blocks[-1].append(f"# {node.ctx.command_path} — {short_help(node.command)}")
        else:
            blocks[-1] += [usage(node), f"    {short_help(node.command)}"]
    body = "\n\n".join("\n".join(block) for block in blocks if block)
    return "\n".join(
        [
            REFERENCE_START,
            "<details>",
            "<summary>Every command, its usage and what it does "
            "(generated from the Click tree by <code>scripts/generate.py</code>)</summary>",
            "",
            "```",
            body,
            "```",
            "",
            "</details>",
            REFERENCE_END,
        ]
    )


def readme_with_reference(readme: str, section: str) -> str:
    """README.md with the text between the markers replaced; markers added when absent."""
    start, end = readme.find(REFERENCE_START), readme.find(REFERENCE_END)
    if start != -1 and end > start:
        return readme[:start] + section + readme[end + len(REFERENCE_END) :]
    block = re.search(r"^## Command line\n+```[^\n]*\n.*?^```\n", readme, re.MULTILINE | re.DOTALL)
    if block is None:
        raise SystemExit(f"{README}: no '## Command line' code block to put the reference after")
    return readme[: block.end()] + "\n" + section + "\n" + readme[block.end() :]


# ---- files -----------------------------------------------------------------------------


def generate() -> dict[str, str]:
    """Every generated file, by path relative to the repository, with its content."""
    sys.path.insert(0, str(ROOT))
    from agctl import __version__
    from agctl.cli import EXIT_CODES, cli
    from agctl.cli.completion import completion_script

    if __version__ not in RELEASE_DATES:
        raise SystemExit(f"add the release date of agctl {__version__} to RELEASE_DATES")
    nodes = list(walk(cli, make_context(cli, "agctl"), ("agctl",)))
    files = {
        f"completions/{name}": completion_script(shell) for shell, name in COMPLETION_FILES.items()
    }
    for node in nodes:
        files[f"{MAN_DIR}/{node.page}.1"] = man_page(
            node, __version__, RELEASE_DATES[__version__], EXIT_CODES
        )
    readme = (ROOT / README).read_text(encoding="utf-8")
    files[README] = readme_with_reference(readme, reference(nodes))
    return files


def extra_pages(files: dict[str, str]) -> list[str]:
    """Man pages on disk that the tree no longer has."""
    on_disk = {f"{MAN_DIR}/{path.name}" for path in (ROOT / MAN_DIR).glob("*.1")}
    return sorted(on_disk - files.keys())


def current(path: str) -> str | None:
    try:
        return (ROOT / path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def check(files: dict[str, str]) -> int:
    stale = 0
    for path, content in files.items():
        committed = current(path)
        if committed == content:
            continue
        stale += 1
        if committed is None:
            print(f"missing: {path}", file=sys.stderr)
            continue
        print(f"stale: {path}", file=sys.stderr)
        diff = difflib.unified_diff(
            committed.splitlines(),
            content.splitlines(),
            f"{path} (committed)",
            f"{path} (generated)",
            lineterm="",
        )
        for line in list(diff)[:DIFF_LINES]:
            print(f"    {line}", file=sys.stderr)
    for path in extra_pages(files):
        stale += 1
        print(f"extra: {path} (no such command)", file=sys.stderr)
    if stale:
        print(
            f"{stale} generated file(s) out of date: run python scripts/generate.py",
            file=sys.stderr,
        )
        return 1
    return 0


def write(files: dict[str, str]) -> int:
    for path, content in files.items():
        if current(path) != content:
            target = ROOT / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8", newline="\n")
            print(f"wrote {path}")
    for path in extra_pages(files):
        (ROOT / path).unlink()
        print(f"removed {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 listing the files that differ from what would be written",
    )
    args = parser.parse_args(argv)
    files = generate()
    return check(files) if args.check else write(files)


if __name__ == "__main__":
    sys.exit(main())
