"""`agctl config` and `agctl profile`: wiring, masking, exit codes."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from agctl.config.file import mask_secrets

Run = Callable[..., Result]
KEY = "sk-test-0123456789abcdefXYZ"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return tmp_path / "xdg-config" / "agctl" / "config.json"


def test_profile_add_list_rm(run: Run, config_file: Path) -> None:
    added = run(
        "profile", "add", "ds", "--preset", "deepseek", "--model", "deepseek-chat", "--default"
    )
    assert added.exit_code == 0 and "added profile ds (default)" in added.stdout
    assert run("profile", "add", "local", "--preset", "ollama").exit_code == 0
    rows = json.loads(run("profile", "list", "--json").stdout)
    assert [(r["name"], r["default"], r["model"]) for r in rows] == [
        ("ds", True, "deepseek-chat"),
        ("local", False, "llama3.2"),
    ]
    assert rows[1]["base_url"] == "http://localhost:11434/v1"
    table = run("profile", "list").stdout.splitlines()
    assert table[0].split() == ["PROFILE", "PROVIDER", "MODEL", "BASE", "URL", "KEY"]
    assert run("profile", "add", "ds", "--preset", "zhipu").exit_code == 4
    assert run("profile", "rm", "ds").exit_code == 0
    assert run("profile", "rm", "ds").exit_code == 3
    assert json.loads(config_file.read_text())["profiles"].keys() == {"local"}


def test_unknown_preset_and_bad_header(run: Run) -> None:
    result = run("profile", "add", "x", "--preset", "skynet")
    assert result.exit_code == 2 and "unknown preset" in result.stderr
    result = run("profile", "add", "x", "--header", "no-colon")
    assert result.exit_code == 2 and "NAME:VALUE" in result.stderr


def test_api_key_from_stdin_is_stored_privately_and_shown_masked(
    run: Run, config_file: Path
) -> None:
    result = run(
        "profile", "add", "work", "--base-url", "http://x/v1", "--api-key", "-", input=KEY + "\n"
    )
    assert result.exit_code == 0
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert json.loads(config_file.read_text())["profiles"]["work"]["api_key"] == KEY
    for args in (
        ("profile", "list"),
        ("profile", "list", "--json"),
        ("config", "show"),
        ("config", "show", "--json"),
    ):
        shown = run(*args)
        assert shown.exit_code == 0, shown.stderr
        assert KEY not in shown.stdout + shown.stderr
        assert "sk-…fXYZ" in shown.stdout


def test_config_set_and_show(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run("config", "set", "max_retries", "7").stdout == "max_retries = 7\n"
    bad = run("config", "set", "max_retries", "lots")
    assert bad.exit_code == 2 and "max_retries" in bad.stderr
    assert run("config", "set", "prices.my-model", '{"prompt": 1, "completion": 2}').exit_code == 0
    data = json.loads(run("config", "show", "--json").stdout)
    assert data["config"]["max_retries"] == 7
    assert data["config"]["prices"]["my-model"] == {"prompt": 1.0, "completion": 2.0}
    assert data["resolved"]["provider"] == "offline"
    monkeypatch.setenv("AGCTL_MODEL", "from-env")
    resolved = json.loads(run("config", "show", "--json", "--profile", "deepseek").stdout)
    assert resolved["resolved"]["model"] == "from-env"
    assert resolved["resolved"]["sources"]["model"] == "AGCTL_MODEL"
    assert resolved["resolved"]["base_url"] == "https://api.deepseek.com/v1"
    human = run("config", "show").stdout
    assert "the next turn would use" in human and "(AGCTL_MODEL)" in human


def test_session_remembers_profile_and_model(run: Run) -> None:
    assert run("session", "new", "s", "--profile", "ollama", "--model", "qwen").exit_code == 0
    data = json.loads(run("config", "show", "--json").stdout)["resolved"]
    assert (data["profile"], data["model"]) == ("ollama", "qwen")
    assert data["sources"]["profile"] == "session"
    dry = json.loads(run("turn", "send", "hi", "--dry-run", "--model", "other").stdout)
    assert dry["request"]["model"] == "other"
    assert dry["url"] == "http://localhost:11434/v1/chat/completions"


def test_unknown_profile_on_a_turn_is_not_found(run: Run) -> None:
    assert run("session", "new", "s").exit_code == 0
    result = run("turn", "send", "hi", "--profile", "nope")
    assert result.exit_code == 3 and "profile 'nope' not found" in result.stderr


def test_corrupt_config_is_exit_5_naming_the_file(run: Run, config_file: Path) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text("{not json")
    result = run("config", "show")
    assert result.exit_code == 5 and str(config_file) in result.stderr


@pytest.mark.parametrize("name", ["123", "true", "null"])
def test_a_profile_whose_name_reads_as_json_becomes_the_default(
    run: Run, config_file: Path, name: str
) -> None:
    """The default is set with the profile, as a name: not parsed as a config value."""
    added = run("profile", "add", name, "--preset", "openai", "--default")
    assert added.exit_code == 0, added.stderr
    assert added.stdout == f"added profile {name} (default)\n"
    assert json.loads(config_file.read_text())["default_profile"] == name


def test_show_explains_settings_that_cannot_resolve(run: Run) -> None:
    assert run("profile", "add", "bare", "--base-url", "http://x/v1", "--default").exit_code == 0
    shown = run("config", "show")
    assert shown.exit_code == 0 and "nothing: no model for provider 'openai'" in shown.stdout
    assert "no model" in json.loads(run("config", "show", "--json").stdout)["resolved"]["error"]


def test_secrets_are_masked_wherever_they_are_shown(run: Run) -> None:
    secret = "sk-proj-SECRETSECRET0123"
    result = run("config", "set", "profiles.work", json.dumps({"api_key": secret}))
    assert result.exit_code == 0 and secret not in result.stdout
    assert (
        run(
            "profile",
            "add",
            "az",
            "--base-url",
            "http://x/v1",
            "--header",
            "api-key: AZURESECRETKEY0000111",
        ).exit_code
        == 0
    )
    for args in (("config", "show"), ("config", "show", "--json")):
        shown = run(*args).stdout
        assert secret not in shown and "AZURESECRETKEY0000111" not in shown
    assert mask_secrets({"headers": {"x": "abcdefghijklmnop"}}) == {"headers": {"x": "abc…mnop"}}


def test_a_header_http_cannot_carry_is_refused(run: Run) -> None:
    result = run("profile", "add", "p", "--base-url", "http://x/v1", "--header", "X-Name: Zoë")
    assert result.exit_code != 0 and "ASCII" in result.output
    assert "Traceback" not in result.output
