"""The PostgreSQL store costs nothing to those who do not use it, and says what to install
to those who do without its extra: real `agctl` processes, their modules listed at exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI

SECRET = "s3cr3t-Pa55word"
URL = f"postgresql://agent:{SECRET}@127.0.0.1:9/team"

# Runs agctl's main as `python -m agctl` would, then writes every module loaded into the
# file AGCTL_TEST_MODULES names (at exit: main ends with sys.exit). BLOCK, when set,
# makes `import psycopg` fail as it does where the extra is not installed.
CHILD = """
import atexit, os, sys
if os.environ.get("BLOCK_PSYCOPG"):
    sys.modules["psycopg"] = None
def dump():
    loaded = sorted(sys.modules)
    import json
    with open(os.environ["AGCTL_TEST_MODULES"], "w") as handle:
        json.dump(loaded, handle)
atexit.register(dump)
from agctl.cli import main
main()
"""


@pytest.fixture
def env(isolated_env: Path, tmp_path: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AGCTL_STORE")}
    environ.update(
        AGCTL_DATA_DIR=str(isolated_env),
        AGCTL_CONFIG=str(tmp_path / "config.json"),
        AGCTL_TEST_MODULES=str(tmp_path / "modules.json"),
        PYTHONIOENCODING="utf-8",
    )
    (tmp_path / "config.json").write_text(json.dumps({"max_retries": 4}))  # no store in it
    return environ


def agctl(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    return result, set(json.loads(Path(env["AGCTL_TEST_MODULES"]).read_text()))


def of_postgres(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] == "psycopg" or m.startswith("agctl.storage.pos")}


def test_help_imports_nothing_of_the_store_choice(env: dict[str, str]) -> None:
    result, modules = agctl(env, "--help")
    assert result.returncode == 0 and "--store URL" in result.stdout
    assert "agctl.cli" in modules  # the list is real
    assert {"agctl.storage.urls", "agctl.storage.factory", "agctl.base.paths"} & modules == set()
    assert of_postgres(modules) == set()


@pytest.mark.parametrize("line", ["agctl session use ", "agctl slot use ", "agctl -s s slot use "])
def test_completion_on_a_file_store_imports_nothing_of_postgresql(
    env: dict[str, str], line: str
) -> None:
    assert agctl(env, "session", "new", "s")[0].returncode == 0
    tab = {**env, "_AGCTL_COMPLETE": "bash_complete", "COMP_WORDS": line}
    tab["COMP_CWORD"] = str(len(line.split(" ")) - 1)
    result, modules = agctl(tab)
    assert result.returncode == 0 and result.stdout.startswith("plain,"), result.stderr
    assert "agctl.storage.factory" in modules  # it did choose the store
    assert of_postgres(modules) == set()
    assert {m for m in modules if m.split(".")[0] == "pydantic"} == set()
    if "slot" in line:  # the config mentions no store: not parsed (a slot's TAB needs no json)
        assert "json" not in modules


def test_a_file_store_turn_imports_nothing_of_postgresql(
    env: dict[str, str], server: FakeOpenAI
) -> None:
    http = {
        **env,
        "AGCTL_PROVIDER": "openai",
        "AGCTL_BASE_URL": server.base_url,
        "AGCTL_MODEL": "m",
    }
    assert agctl(http, "session", "new", "s")[0].returncode == 0
    result, modules = agctl(http, "turn", "send", "hi")
    assert result.returncode == 0, result.stderr
    assert [r.path for r in server.requests] == ["/v1/chat/completions"]
    assert "httpx" in modules and "agctl.storage.factory" in modules
    assert of_postgres(modules) == set()


def test_choosing_the_store_imports_only_agctl_modules_beyond_click(env: dict[str, str]) -> None:
    """agctl.storage.factory (and urls, paths) load nothing a command did not load before:
    after click and pathlib, which every command loads, only agctl's own modules."""
    code = (
        "import json, sys, pathlib, click\n"
        "before = set(sys.modules)\n"
        "import agctl.storage.factory\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    path = [p for p in sys.path if p]
    result = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path[:0] = {path!r}\n{code}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    added = set(json.loads(result.stdout))
    assert "agctl.storage.urls" in added
    assert {m for m in added if m.split(".")[0] != "agctl"} == set()


@pytest.mark.parametrize(
    "how",
    [["--store", URL, "session", "list"], ["--json", "session", "list"], ["turn", "send", "x"]],
    ids=["option", "json", "env"],
)
def test_without_psycopg_a_postgresql_url_says_what_to_install(
    env: dict[str, str], how: list[str]
) -> None:
    blocked = {**env, "BLOCK_PSYCOPG": "1", "AGCTL_STORE": URL}
    result, modules = agctl(blocked, *how)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "pip install 'agctl[postgres]'" in result.stderr
    assert "postgresql://agent:***@127.0.0.1:9/team" in result.stderr
    assert SECRET not in result.stdout + result.stderr
    if "--json" in how:
        error = json.loads(result.stderr)["error"]
        assert (error["type"], error["exit"]) == ("StoreError", 1)
    assert "agctl.storage.postgres.backend" not in modules


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("agctl session use ", ["main", "other"]),
        ("agctl slot use ", ["b", "default"]),
        ("agctl -s other slot use ", ["default"]),
        ("agctl draft show --slot ", ["b"]),
    ],
)
def test_completion_on_postgresql_reads_its_tables_with_no_model_and_no_core(
    env: dict[str, str], isolated_env: Path, pg_store: Any, line: str, offered: list[str]
) -> None:
    """A TAB on a PostgreSQL store lists sessions, slots and drafts with psycopg alone:
    neither pydantic nor the core (agctl.store) nor the backend is loaded."""
    from agctl.context.models import Draft
    from agctl.store import Store

    on_pg = {**env, "AGCTL_STORE": pg_store.dsn, "AGCTL_STORE_SCHEMA": pg_store.schema}
    for args in (["session", "new", "other"], ["session", "new", "main"], ["slot", "new", "b"]):
        assert agctl(on_pg, *args)[0].returncode == 0
    library = Store(isolated_env, url=pg_store.dsn, schema=pg_store.schema)
    library.save_draft("main", Draft(prompt="p", slot="b"))
    library.close()
    tab = {**on_pg, "_AGCTL_COMPLETE": "bash_complete", "COMP_WORDS": line}
    tab["COMP_CWORD"] = str(len(line.split(" ")) - 1)

    result, modules = agctl(tab)

    assert result.returncode == 0, result.stderr
    assert [row.split(",", 1)[1] for row in result.stdout.splitlines()] == offered
    assert {"psycopg", "agctl.storage.postgres.listing"} <= modules
    assert {m for m in modules if m.split(".")[0] == "pydantic"} == set()
    loaded = {"agctl.store.facade", "agctl.context.models", "agctl.storage.postgres.backend"}
    assert loaded & modules == set()
