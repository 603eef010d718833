"""What only a real `python -m agctl` process shows: exit statuses, pipes, start-up imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("httpx", "pydantic", "pydantic_core", "orjson", "platformdirs", "regex", "prompt_toolkit")


@pytest.fixture
def env(isolated_env: Path) -> dict[str, str]:
    """The test's environment (isolated data dir, no AGCTL_SESSION) for child processes."""
    environ = dict(os.environ)
    environ["AGCTL_DATA_DIR"] = str(isolated_env)
    environ["PYTHONIOENCODING"] = "utf-8"
    return environ


def agctl(
    env: dict[str, str], *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agctl", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )


def slot_file(data_dir: Path, session: str = "s1", slot: str = "default") -> Path:
    return data_dir / "sessions" / session / "slots" / f"{slot}.json"


def messages(data_dir: Path, session: str = "s1") -> list[dict[str, object]]:
    return json.loads(slot_file(data_dir, session).read_text())["messages"]


@pytest.fixture
def session(env: dict[str, str]) -> str:
    created = agctl(env, "session", "new", "s1")
    assert created.returncode == 0, created.stderr
    assert created.stdout == b"s1\n"
    return "s1"


def test_not_found_exits_3(env: dict[str, str], session: str) -> None:
    result = agctl(env, "session", "use", "nope")
    assert result.returncode == 3
    assert result.stdout == b""
    assert result.stderr.decode().startswith("agctl: error: ")
    assert b"Traceback" not in result.stderr


def test_click_usage_error_exits_2(env: dict[str, str], session: str) -> None:
    result = agctl(env, "msg", "get")
    assert result.returncode == 2
    assert result.stdout == b""
    assert b"Missing argument" in result.stderr


def test_no_session_selected_exits_2(env: dict[str, str]) -> None:
    result = agctl(env, "msg", "list")
    assert result.returncode == 2
    assert b"no session selected" in result.stderr
    assert b"Traceback" not in result.stderr


def test_pipeline_into_append(env: dict[str, str], session: str, isolated_env: Path) -> None:
    result = subprocess.run(
        'echo "hello from a pipe" | "$PYTHON" -m agctl msg append user -',
        shell=True,
        env={**env, "PYTHON": sys.executable},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"appended message 0 (user) in slot default\n"
    assert [(m["role"], m["content"]) for m in messages(isolated_env)] == [
        ("user", "hello from a pipe")
    ]


def test_pipeline_out_of_export(env: dict[str, str], session: str) -> None:
    assert agctl(env, "msg", "append", "user", "grüße 你好").returncode == 0
    exported = agctl(env, "msg", "export")
    assert exported.returncode == 0
    assert json.loads(exported.stdout) == [{"role": "user", "content": "grüße 你好"}]


@pytest.mark.parametrize(
    "args", [["msg", "append", "user", "-"], ["msg", "append", "user"], ["chat"]]
)
def test_invalid_utf8_on_stdin_is_refused_and_nothing_written(
    env: dict[str, str], session: str, isolated_env: Path, args: list[str]
) -> None:
    before = slot_file(isolated_env).read_bytes()
    result = agctl(env, *args, stdin=b"caf\xe9 au lait\n")
    assert result.returncode == 5
    assert result.stdout == b""
    stderr = result.stderr.decode()
    assert "not valid UTF-8" in stderr
    assert "Traceback" not in stderr
    assert slot_file(isolated_env).read_bytes() == before


def test_verbose_logs_to_stderr(env: dict[str, str]) -> None:
    result = agctl(env, "-v", "session", "new", "logged")
    assert result.returncode == 0
    assert result.stdout == b"logged\n"
    assert b"session created: logged" in result.stderr


# ---- start-up: --help, --version and completion load click, not the core ------------

CHILD = """
import json, sys
import agctl.cli
for argv in {argvs!r}:
    try:
        agctl.cli.main(argv, standalone_mode=True)
    except SystemExit:
        pass
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(json.dumps(heavy), file=sys.stderr)
"""


def test_import_and_help_do_not_load_the_core(env: dict[str, str]) -> None:
    argvs = [
        ["--help"],
        ["--version"],
        ["msg", "--help"],
        ["msg", "append", "--help"],
        ["chat", "--help"],
    ]
    code = CHILD.format(argvs=argvs, heavy=HEAVY)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert b"Usage: agctl msg append" in result.stdout
    loaded = json.loads(result.stderr.decode().strip().splitlines()[-1])
    assert loaded == []


def test_the_child_check_can_see_heavy_modules(env: dict[str, str]) -> None:
    """The check above would notice: a command that runs does load pydantic."""
    code = CHILD.format(argvs=[["session", "list", "--json"]], heavy=HEAVY)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "pydantic" in json.loads(result.stderr.decode().strip().splitlines()[-1])


def imported_modules(env: dict[str, str], *args: str) -> set[str]:
    """Module names from `python -X importtime -m agctl ARGS`."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agctl", *args],
        capture_output=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.decode().splitlines()
        if line.startswith("import time:")
    }


@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_importtime_of_help_and_version(env: dict[str, str], args: list[str]) -> None:
    modules = imported_modules(env, *args)
    assert "click" in modules
    assert "agctl.cli" in modules
    assert {m for m in modules if m.split(".")[0] in ("httpx", "pydantic")} == set()


def test_help_looks_no_text_up_in_the_locale_directories(env: dict[str, str]) -> None:
    """Click's texts stay English without a search of the locale directories, which
    imported `locale` (agctl.cli.output._english); another domain is still looked up."""
    assert "locale" not in imported_modules(env, "--help")
    code = (
        "import gettext, sys, agctl.cli.output\n"
        "print(gettext.gettext('Usage:'), gettext.dgettext('other', 'x'), 'locale' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=60, check=False
    )
    assert result.stdout.split() == [b"Usage:", b"x", b"True"], result.stderr


def test_a_turn_does_not_load_trio(env: dict[str, str], session: str) -> None:
    """httpcore imports trio (~80 ms) and anyio just to detect them; the command line never
    runs them."""
    openai = {
        **env,
        "AGCTL_PROVIDER": "openai",
        "AGCTL_BASE_URL": "http://127.0.0.1:9/v1",
        "AGCTL_MODEL": "m",
    }
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "agctl", "turn", "send", "hi"],
        capture_output=True,
        env={**openai, "AGCTL_CONFIG": str(Path(env["AGCTL_DATA_DIR"]) / "c.json")},
        timeout=60,
        check=False,
    )
    assert result.returncode == 6, result.stderr  # nothing listens on port 9
    modules = {
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.decode().splitlines()
        if line.startswith("import time:")
    }
    assert "httpcore" in modules
    # ("trio" and "anyio" themselves are listed: the attempts, refused at once)
    assert not any(m.startswith(("trio.", "anyio.")) for m in modules)


def test_an_offline_turn_loads_no_http_client(env: dict[str, str], session: str) -> None:
    """The offline provider sends nothing: httpx, httpcore and the openai provider stay out
    of its start-up (an HTTP turn loads them, as test_a_turn_does_not_load_trio shows)."""
    modules = imported_modules(env, "turn", "send", "hi")
    assert "agctl.providers.offline" in modules
    assert {m for m in modules if m.split(".")[0] in ("httpx", "httpcore")} == set()
    assert "agctl.providers.openai" not in modules
    # Its checkpoint loads the planner, not the whole package (diff and difflib, verify,
    # prune); the Store, not the rules of sessions, which a turn does not use.
    assert "agctl.store.checkpoints.planner" in modules
    assert {"agctl.store.checkpoints.diff", "agctl.store.checkpoints.verify"} & modules == set()
    assert "agctl.store.checkpoints.prune" not in modules
    assert "agctl.store.facade" in modules
    assert "agctl.store.sessions" not in modules
    # The config holds no tool and no hook: their models are not loaded.
    assert "agctl.config.file" in modules
    assert "agctl.config.specs" not in modules


# Run without `site`, whose .pth files may import pathlib (and more) on this machine before
# any agctl code runs; the parent's sys.path still finds click and this tree.
BARE_CHILD = """
import json, sys
sys.path[:0] = {path!r}
import click
before = set(sys.modules)
import agctl.cli
try:
    agctl.cli.main({argv!r})
except SystemExit:
    pass
print(json.dumps(sorted(set(sys.modules) - before)), file=sys.stderr)
"""


def added_by(env: dict[str, str], argv: list[str]) -> set[str]:
    """The modules `agctl ARGV` loads beyond `import click`, in a process without site."""
    code = BARE_CHILD.format(path=sys.path, argv=argv)
    result = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, env=env, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stderr.decode().strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_and_version_load_no_pathlib(env: dict[str, str], argv: list[str]) -> None:
    """Nor the completion helpers, which bring the data dir's layout: only agctl's command
    line modules and a few small standard ones (click's help formatting adds its own)."""
    added = added_by(env, argv)
    assert "agctl.cli" in added  # the check sees what the command loads
    assert {"pathlib", "agctl.cli.complete", "agctl.storage.file.layout"} & added == set()
    if argv == ["--version"]:
        assert "shutil" not in added


def test_the_bare_check_sees_pathlib_when_loaded(env: dict[str, str]) -> None:
    """The check above would notice: a group's help loads the completion helpers."""
    added = added_by(env, ["slot", "--help"])
    assert {"pathlib", "agctl.cli.complete"} <= added


def test_the_command_line_loads_no_pydantic_plugin(env: dict[str, str], tmp_path: Path) -> None:
    """pydantic looks for plugins in every installed distribution's entry points when it
    builds its first validator; the command line skips the search, unless the user's
    PYDANTIC_DISABLE_PLUGINS says otherwise."""
    site = tmp_path / "site"
    info = site / "fake_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nfake = fake_plugin:plugin\n")
    marker = tmp_path / "loaded"
    (site / "fake_plugin.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('yes')\n"
        "class Plugin:\n"
        "    def new_schema_validator(self, *args, **kwargs):\n"
        "        return None, None, None\n"
        "plugin = Plugin()\n"
    )
    paths = [str(site), env.get("PYTHONPATH", "")]
    with_plugin = {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    with_plugin.pop("PYDANTIC_DISABLE_PLUGINS", None)
    result = agctl(with_plugin, "session", "new", "s1")
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    result = agctl({**with_plugin, "PYDANTIC_DISABLE_PLUGINS": ""}, "session", "new", "s2")
    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "yes"


def test_models_build_their_validators_on_first_use(env: dict[str, str]) -> None:
    """Importing the models builds the documents' validators (slot, session, config,
    checkpoint, draft) only when first used, and validation is as strict as ever."""
    code = """
import json
from agctl.store.checkpoints import Checkpoint
from agctl.config.file import Config
from agctl.context.models import Draft, Session, Slot
before = [m.__pydantic_complete__ for m in (Slot, Session, Config, Checkpoint, Draft)]
slot = Slot.model_validate({"id": "s", "messages": [{"role": "user", "content": "hi"}]})
try:
    Slot.model_validate({"id": "s", "messages": [{"role": "nobody"}]})
    refused = False
except ValueError:
    refused = True
print(json.dumps([before, Slot.__pydantic_complete__, slot.messages[0].content, refused]))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    before, built, content, refused = json.loads(result.stdout)
    assert before == [False] * 5
    assert (built, content, refused) == (True, "hi", True)


def test_the_command_line_freezes_its_heap_at_exit(env: dict[str, str]) -> None:
    """The command line freezes the collector's heap as it exits, after the exit handlers
    registered since it started and before the interpreter's last collections, which then
    free the heap without scanning it; importing the command line freezes nothing."""
    code = """
import atexit, gc, sys
import agctl.cli
atexit.register(lambda: print("at exit", gc.get_freeze_count() > 0, file=sys.stderr))
print("imported", gc.get_freeze_count() > 0, file=sys.stderr)
agctl.cli.main(["--version"])
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(b"agctl")
    assert result.stderr.decode().splitlines() == ["imported False", "at exit True"]
