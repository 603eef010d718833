"""Shell completion in real shells: bash (with bash-completion), zsh and fish.

One real data dir is made with the CLI itself (two sessions, slots, checkpoints from offline
turns, a profile). Each shell loads the committed script from completions/ (or, until it
exists, what `agctl completion SHELL` prints) and completes against that data:

- bash: the registered completion function called with COMP_WORDS/COMP_CWORD set, and a
  real TAB typed into an interactive bash on a pseudo-terminal, the script lazily loaded by
  bash-completion from the user directory the way an installed script is;
- zsh: the script loads (sourced, and autoloaded from $fpath), the exact command it runs
  answers, and a real TAB typed into an interactive zsh whose compadd calls are recorded;
- fish: `complete -C`, which really runs the completion.

The `agctl` the scripts call is a wrapper on PATH that runs this interpreter on this
checkout. A test whose shell is missing is skipped with the package to install.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import shlex
import shutil
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT_FILES = {"bash": "agctl.bash", "zsh": "_agctl", "fish": "agctl.fish"}
BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")
HEAVY = ("httpx", "pydantic", "pydantic_core", "regex", "yaml", "prompt_toolkit")
PRESETS = [
    "openai",
    "deepseek",
    "zhipu",
    "ollama",
    "vllm",
    "llamacpp",
    "lmstudio",
    "openrouter",
    "anthropic",
    "gemini",
]
DUMP_KEY = b"\x18\x10"  # Ctrl-X Ctrl-P: bound to a widget that logs the line and clears it

needs_bash = pytest.mark.skipif(
    shutil.which("bash") is None or not BASH_COMPLETION.is_file(),
    reason="bash with bash-completion is not installed (apt-get install bash-completion)",
)
needs_zsh = pytest.mark.skipif(
    shutil.which("zsh") is None, reason="zsh is not installed (apt-get install zsh)"
)
needs_fish = pytest.mark.skipif(
    shutil.which("fish") is None, reason="fish is not installed (apt-get install fish)"
)


@dataclass(frozen=True)
class World:
    """A real data dir made with the CLI, and an environment whose `agctl` is this checkout."""

    root: Path
    env: dict[str, str]
    sessions: list[str]
    slots: list[str]  # of the current session "main"
    other_slots: list[str]  # of the session "other"
    checkpoints: list[str]  # of "main", newest first, as `ckpt list --json` gives them

    def newest_checkpoint_prefix(self) -> str:
        """The shortest prefix that only the newest checkpoint id starts with."""
        newest, others = self.checkpoints[0], self.checkpoints[1:]
        for length in range(1, len(newest) + 1):
            if not any(other.startswith(newest[:length]) for other in others):
                return newest[:length]
        return newest

    def agctl(self, *args: str) -> str:
        result = subprocess.run(
            ["agctl", *args], env=self.env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, f"agctl {shlex.join(args)}: {result.stderr}"
        return result.stdout

    def script(self, shell: str) -> Path:
        """The committed completion script, else the one `agctl completion SHELL` prints."""
        committed = REPO / "completions" / SCRIPT_FILES[shell]
        if committed.is_file():
            return committed
        generated = self.root / "generated" / SCRIPT_FILES[shell]
        if not generated.is_file():
            generated.parent.mkdir(exist_ok=True)
            generated.write_text(self.agctl("completion", shell))
        return generated


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("completion")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "agctl"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m agctl "$@"\n')
    wrapper.chmod(0o755)
    home = root / "home"
    home.mkdir()
    env = {
        "PATH": os.pathsep.join([str(bin_dir), "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": str(home),
        "TERM": "dumb",
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO),
        "AGCTL_DATA_DIR": str(root / "data"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "XDG_DATA_HOME": str(root / "share"),
        "XDG_CACHE_HOME": str(root / "cache"),
        "NO_COLOR": "1",
    }
    world = World(root, env, [], [], [], [])
    world.agctl("session", "new", "main", "--title", "Main work")
    world.agctl("slot", "new", "alpha")
    world.agctl("slot", "new", "beta")
    for prompt in ("hello", "how are you", "bye"):
        world.agctl("turn", "send", prompt)
    world.agctl("session", "new", "other", "--no-use", "--system", "You review Python code.")
    world.agctl("slot", "new", "gamma", "-s", "other")
    world.agctl("profile", "add", "local", "--preset", "ollama", "--model", "qwen2.5:7b")
    world.agctl("template", "add", "review", "--prompt", "Review {{ input }}")
    world.agctl("template", "add", "rust-review", "--system", "You review Rust.")

    def ids(*args: str) -> list[str]:
        return [str(item["id"]) for item in json.loads(world.agctl(*args, "--json"))]

    world.sessions.extend(ids("session", "list"))
    world.slots.extend(ids("slot", "list"))
    world.other_slots.extend(ids("slot", "list", "-s", "other"))
    world.checkpoints.extend(ids("ckpt", "list"))
    assert sorted(world.sessions) == ["main", "other"]
    assert sorted(world.slots) == ["alpha", "beta", "default"]
    assert sorted(world.other_slots) == ["default", "gamma"]
    assert len(world.checkpoints) >= 3
    return world


# --- bash: the registered function, called as bash calls it ------------------------------

BASH_CALL = r"""
source /usr/share/bash-completion/bash_completion
source "$1"; shift
COMP_WORDS=("$@")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="${COMP_WORDS[*]}"
COMP_POINT=${#COMP_LINE}
read -r -a spec <<< "$(complete -p agctl)"
for ((i = 0; i < ${#spec[@]}; i++)); do
    [[ ${spec[i]} == -F ]] && func=${spec[i+1]}
done
"$func" agctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf 'reply:%s\n' "${COMPREPLY[@]}"
"""


def bash_complete(world: World, line: str) -> list[str]:
    """COMPREPLY of the function the script registers for `agctl`, for `line` (cursor at end)."""
    words = line.split(" ")  # a trailing space gives the empty word being completed
    result = subprocess.run(
        [
            "bash",
            "--norc",
            "--noprofile",
            "-c",
            BASH_CALL,
            "bash",
            str(world.script("bash")),
            *words,
        ],
        env=world.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return [r[len("reply:") :] for r in result.stdout.splitlines() if r != "reply:"]


@needs_bash
def test_bash_slot_use_gives_the_real_slot_names(world: World) -> None:
    assert sorted(bash_complete(world, "agctl slot use ")) == sorted(world.slots)


@needs_bash
def test_bash_ckpt_rollback_gives_the_real_checkpoint_ids_newest_first(world: World) -> None:
    assert bash_complete(world, "agctl ckpt rollback ") == world.checkpoints


@needs_bash
@pytest.mark.parametrize(
    "line",
    ["agctl -s other slot use ", "agctl slot use -s other ", "agctl slot use --session oth "],
)
def test_bash_session_option_selects_the_other_sessions_slots(world: World, line: str) -> None:
    assert sorted(bash_complete(world, line)) == sorted(world.other_slots)


@needs_bash
@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("agctl slot use al", ["alpha"]),
        ("agctl session use ", ["main", "other"]),
        ("agctl turn send --model ", ["qwen2.5:7b"]),
        ("agctl turn send --profile ", ["local", *PRESETS]),
        ("agctl turn send -t ", ["review", "rust-review"]),
        ("agctl session new --template ru", ["rust-review"]),
        ("agctl template show r", ["review", "rust-review"]),
    ],
)
def test_bash_other_live_values(world: World, line: str, expected: list[str]) -> None:
    assert bash_complete(world, line) == expected


# --- interactive shells on a pseudo-terminal: a real TAB ---------------------------------


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def type_into(argv: list[str], env: dict[str, str], log: Path, keys: list[bytes]) -> list[str]:
    """Type each of `keys` into an interactive shell, then DUMP_KEY; return each dump's log.

    The shell's rc file writes READY to `log` when its line editor starts, and binds
    DUMP_KEY to a widget that appends `BUFFER:<the line>` to `log` and clears the line.
    Each key sequence is typed only after the previous dump, so nothing is typed ahead.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    os.close(slave)
    screen = bytearray()
    deadline = time.monotonic() + 30

    def wait_for(done: Callable[[], bool], what: str) -> None:
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; screen: {bytes(screen)!r}")
            if select.select([master], [], [], 0.02)[0]:
                try:
                    screen.extend(os.read(master, 65536))
                except OSError:  # EIO once the shell has exited
                    time.sleep(0.02)

    def dumps(count: int) -> Callable[[], bool]:
        return lambda: _read(log).count("BUFFER:") >= count

    try:
        wait_for(lambda: "READY" in _read(log), "the line editor")
        for count, typed in enumerate(keys, 1):
            os.write(master, typed + DUMP_KEY)
            wait_for(dumps(count), f"the line after typing {typed!r}")
        os.write(master, b"exit\n")
        wait_for(lambda: proc.poll() is not None, "the shell to exit")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)
    return _blocks(_read(log))


def _blocks(text: str) -> list[str]:
    """Split a log into one chunk per dump, each ending with its BUFFER: line."""
    blocks, current = [], ""
    for line in text.splitlines(keepends=True):
        if line == "READY\n":
            continue
        current += line
        if line.startswith("BUFFER:"):
            blocks.append(current)
            current = ""
    return blocks


def buffer_of(block: str) -> str:
    return block.rstrip("\n").rsplit("BUFFER:", 1)[1]


# --- bash: a real TAB --------------------------------------------------------------------

BASH_RC = r"""
source /usr/share/bash-completion/bash_completion
unset HISTFILE
PS1='$ '
_t_dump() { printf 'BUFFER:%s\n' "$READLINE_LINE" >> "$T_LOG"; READLINE_LINE=; READLINE_POINT=0; }
bind -x '"\C-x\C-p": _t_dump'
PROMPT_COMMAND='echo READY >> "$T_LOG"'
"""


def bash_tab(world: World, name: str, keys: list[bytes]) -> list[str]:
    """Type into `bash -i`; the script is installed where bash-completion lazily loads it."""
    base = world.root / name
    user_dir = base / "share" / "bash-completion" / "completions"
    user_dir.mkdir(parents=True)
    shutil.copy(world.script("bash"), user_dir / "agctl")
    (base / "bashrc").write_text(BASH_RC)
    env = {**world.env, "XDG_DATA_HOME": str(base / "share"), "T_LOG": str(base / "log")}
    argv = ["bash", "--noprofile", "--rcfile", str(base / "bashrc"), "-i"]
    return type_into(argv, env, base / "log", keys)


@needs_bash
def test_bash_real_tab(world: World) -> None:
    """M-* (insert-completions) puts every candidate on the line; TAB completes a unique one."""
    lines = [
        buffer_of(b)
        for b in bash_tab(
            world,
            "bash-tab",
            [
                b"agctl slot use \x1b*",
                b"agctl ckpt rollback \x1b*",
                b"agctl -s other slot use \x1b*",
                b"agctl slot use al\t",
                b"agctl ckpt rollback " + world.newest_checkpoint_prefix().encode() + b"\t",
                b"agctl turn send --model q\t",
            ],
        )
    ]
    assert lines == [
        "agctl slot use " + " ".join(sorted(world.slots)) + " ",
        "agctl ckpt rollback " + " ".join(world.checkpoints) + " ",
        "agctl -s other slot use " + " ".join(sorted(world.other_slots)) + " ",
        "agctl slot use alpha ",
        f"agctl ckpt rollback {world.checkpoints[0]} ",
        "agctl turn send --model qwen2.5:7b ",
    ]


@needs_bash
@pytest.mark.parametrize(
    ("typed", "completed"),
    [
        ("agctl slot use --session=other \x1b*", "agctl slot use --session=other default gamma "),
        ("agctl turn send --model qwen2.5:\t", "agctl turn send --model qwen2.5:7b "),
    ],
    ids=["session-equals", "model-colon"],
)
def test_bash_real_tab_word_breaks(world: World, typed: str, completed: str) -> None:
    (block,) = bash_tab(world, f"bash-tab-{typed.split()[3][:9]}", [typed.encode()])
    assert buffer_of(block) == completed


# --- zsh ---------------------------------------------------------------------------------


def zsh(world: World, code: str) -> str:
    result = subprocess.run(
        ["zsh", "-f", "-c", code], env=world.env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


@needs_zsh
def test_zsh_script_loads_sourced_and_from_fpath(world: World) -> None:
    script = world.script("zsh")
    sourced = zsh(
        world,
        f"autoload -U compinit; compinit -u -D; source {shlex.quote(str(script))}; "
        "print -r -- $_comps[agctl]; whence -w _agctl_completion",
    )
    assert sourced.splitlines() == ["_agctl_completion", "_agctl_completion: function"]
    fpath_dir = world.root / "zsh-fpath-load"
    fpath_dir.mkdir()
    shutil.copy(script, fpath_dir / "_agctl")
    autoloaded = zsh(
        world,
        f"fpath=({shlex.quote(str(fpath_dir))} $fpath); autoload -U compinit; compinit -u -D; "
        "print -r -- $_comps[agctl]",
    )
    assert autoloaded.splitlines() == ["_agctl"]


def zsh_protocol(world: World, words: list[str]) -> list[tuple[str, str, str]]:
    """Run, inside zsh, the very command the zsh script runs; its (type, key, descr) triples."""
    script = world.script("zsh").read_text()
    (command,) = [line.strip() for line in script.splitlines() if "zsh_complete" in line]
    assert command.startswith("response=(")
    code = (
        f"words=({' '.join(shlex.quote(w) for w in words)}); CURRENT={len(words)}; "
        f"{command}; print -rl -- $response"
    )
    out = zsh(world, code).splitlines()
    return [(out[i], out[i + 1], out[i + 2]) for i in range(0, len(out) - 2, 3)]


@needs_zsh
def test_zsh_protocol_slot_names(world: World) -> None:
    triples = zsh_protocol(world, ["agctl", "slot", "use", ""])
    assert sorted(key for _, key, _ in triples) == sorted(world.slots)
    assert {kind for kind, _, _ in triples} == {"plain"}
    other = zsh_protocol(world, ["agctl", "-s", "other", "slot", "use", ""])
    assert sorted(key for _, key, _ in other) == sorted(world.other_slots)


@needs_zsh
def test_zsh_protocol_checkpoints_with_descriptions(world: World) -> None:
    triples = zsh_protocol(world, ["agctl", "ckpt", "rollback", ""])
    assert [key for _, key, _ in triples] == world.checkpoints
    assert all(descr.startswith("turn ") for _, _, descr in triples)


ZSH_RC = r"""
setopt no_beep
unsetopt auto_list
PS1='%% '
# Record what each compadd call offers, after zsh's own matching (the -O/-A/-D calls
# that only compute are passed through).
compadd() {
    if (( ${@[(I)-[OAD]*]} )); then builtin compadd "$@"; return; fi
    local -a __hits
    builtin compadd -A __hits "$@"
    print -rl -- "${__hits[@]/#/hit:}" >> $T_LOG
    local __d=${@[${@[(i)-d]}+1]}
    (( ${@[(I)-d]} )) && print -rl -- "${(@P)__d/#/desc:}" >> $T_LOG
    builtin compadd "$@"
}
_t_dump() { print -r -- "BUFFER:$BUFFER" >> $T_LOG; BUFFER= }
zle -N _t_dump
bindkey '^X^P' _t_dump
zle-line-init() { print -r -- READY >> $T_LOG }
zle -N zle-line-init
"""


def zsh_tab(world: World, name: str, install: str, keys: list[bytes]) -> list[str]:
    """Type into `zsh -i`, the script sourced after compinit or autoloaded from $fpath."""
    base = world.root / name
    base.mkdir()
    script = world.script("zsh")
    if install == "source":
        setup = f"autoload -U compinit; compinit -u -D; source {shlex.quote(str(script))}"
    else:
        shutil.copy(script, base / "_agctl")
        setup = f"fpath=({shlex.quote(str(base))} $fpath); autoload -U compinit; compinit -u -D"
    (base / ".zshenv").write_text("setopt no_global_rcs\n")
    (base / ".zshrc").write_text(setup + "\n" + ZSH_RC)
    env = {**world.env, "ZDOTDIR": str(base), "T_LOG": str(base / "log")}
    return type_into(["zsh", "-i"], env, base / "log", keys)


def hits(block: str) -> list[str]:
    return [line[4:] for line in block.splitlines() if line.startswith("hit:")]


@needs_zsh
def test_zsh_real_tab(world: World) -> None:
    first = world.checkpoints[0]
    blocks = zsh_tab(
        world,
        "zsh-tab",
        "source",
        [
            b"agctl slot use \t",
            b"agctl ckpt rollback \t",
            b"agctl -s other slot use \t",
            b"agctl slot use al\t",
            b"agctl ckpt rollback " + world.newest_checkpoint_prefix().encode() + b"\t",
            b"agctl turn send --model q\t",
            b"agctl session use \t",
        ],
    )
    slots, checkpoints, other, alpha, one_checkpoint, model, sessions = blocks
    assert sorted(hits(slots)) == sorted(world.slots)
    assert hits(checkpoints) == world.checkpoints
    assert "desc:" in checkpoints and "turn " in checkpoints  # shown next to each id
    assert sorted(hits(other)) == sorted(world.other_slots)
    assert buffer_of(alpha) == "agctl slot use alpha "
    assert buffer_of(one_checkpoint) == f"agctl ckpt rollback {first} "
    assert buffer_of(model) == "agctl turn send --model qwen2.5:7b "
    assert sorted(hits(sessions)) == ["main", "other"]
    assert "Main work" in sessions  # the title describes the session


@needs_zsh
def test_zsh_real_tab_session_option_with_equals(world: World) -> None:
    (block,) = zsh_tab(world, "zsh-tab-equals", "source", [b"agctl slot use --session=oth\t"])
    assert buffer_of(block) == "agctl slot use --session=other "


@needs_zsh
def test_zsh_real_tab_autoloaded_from_fpath_every_time(world: World) -> None:
    blocks = zsh_tab(world, "zsh-tab-fpath", "fpath", [b"agctl slot use \t"] * 3)
    assert [sorted(hits(b)) for b in blocks] == [sorted(world.slots)] * 3


# --- fish --------------------------------------------------------------------------------


def fish_complete(world: World, line: str) -> list[str]:
    """The candidates `complete -C` gives for `line` with the script loaded (value only)."""
    code = f"source {shlex.quote(str(world.script('fish')))}; complete -C {shlex.quote(line)}"
    result = subprocess.run(
        ["fish", "--no-config", "-c", code],
        env=world.env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return sorted(candidate.split("\t")[0] for candidate in result.stdout.splitlines())


@needs_fish
def test_fish_slot_use_gives_the_real_slot_names(world: World) -> None:
    assert fish_complete(world, "agctl slot use ") == sorted(world.slots)
    assert fish_complete(world, "agctl -s other slot use ") == sorted(world.other_slots)


@needs_fish
def test_fish_ckpt_rollback_gives_the_real_checkpoint_ids(world: World) -> None:
    assert fish_complete(world, "agctl ckpt rollback ") == sorted(world.checkpoints)


# --- no heavy imports on a TAB -----------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "agctl slot use ",
        "agctl ckpt rollback ",
        "agctl session use ",
        "agctl -s other slot use ",
        "agctl turn send --profile ",
        "agctl turn send --model ",
        "agctl turn send -t ",
        "agctl chat --slot ",
    ],
)
def test_completion_imports_neither_pydantic_nor_httpx(world: World, line: str) -> None:
    env = {
        **world.env,
        "_AGCTL_COMPLETE": "bash_complete",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(line.split(" ")) - 1),
    }
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agctl"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("plain,"), result.stdout  # it did complete something
    imported = {
        row.rsplit("|", 1)[1].strip()
        for row in result.stderr.splitlines()
        if row.startswith("import time:") and "|" in row
    }
    assert "agctl" in imported  # the import log is really there
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY)
    assert heavy == [], f"a TAB on {line!r} imports {heavy}"
