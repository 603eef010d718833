"""API keys, from the environment or a profile, reach no file and no output, not even in part:
not through a malformed reply that echoes them, nor through a malformed secret header.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from pathlib import Path

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI
from helpers import assert_refused

from agctl.config.file import mask
from agctl.store import Store

Run = Callable[..., Result]


# ---- secrets ---------------------------------------------------------------------------------

ENV_KEY = "sk-env-hostile-Jd83KsQp1Wm5Xt7ZaB4c"


PROFILE_KEY = "sk-prof-hostile-Pq92LsMx4Vn6Yt8RcD5e"


MODEL = "fake-model"


def fragments(secret: str, size: int = 10) -> list[bytes]:
    """Every `size`-character piece of the secret (the mask shows 3 + 4 characters)."""
    return [secret[i : i + size].encode() for i in range(len(secret) - size + 1)]


def assert_secret_not_shown(secret: str, outputs: list[Result]) -> None:
    pieces = fragments(secret)
    for number, result in enumerate(outputs):
        for stream, data in (("stdout", result.stdout_bytes), ("stderr", result.stderr_bytes)):
            assert not any(piece in data for piece in pieces), f"output {number}: {stream}"


def assert_secret_nowhere(
    secret: str, root: Path, outputs: list[Result], allowed: Collection[Path] = ()
) -> None:
    """No piece of the secret in any file under `root` (but `allowed`) or any output."""
    pieces = fragments(secret)
    scanned = [p for p in root.rglob("*") if p.is_file() and p not in allowed]
    assert scanned, "nothing was written at all"
    for path in scanned:
        data = path.read_bytes()
        assert not any(piece in data for piece in pieces), f"{path} holds the key"
    assert_secret_not_shown(secret, outputs)


@pytest.mark.parametrize("source", ["env", "profile"])
def test_an_api_key_reaches_no_file_and_no_output(
    run: Run,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    isolated_env: Path,
    source: str,
) -> None:
    key = ENV_KEY if source == "env" else PROFILE_KEY
    outputs: list[Result] = []

    def step(*args: str, code: int = 0, input: bytes | None = None) -> Result:
        result = run(*args, input=input)
        assert result.exit_code == code, (args, result.output)
        outputs.append(result)
        return result

    cassette = tmp_path / "out" / "turns.cassette"
    cassette.parent.mkdir()
    transcript = tmp_path / "chat.jsonl"
    transcript.write_text('{"input": "first replayed"}\n{"input": "second replayed"}\n')
    with FakeOpenAI(api_key=key) as server:
        if source == "env":
            monkeypatch.setenv("AGCTL_PROVIDER", "openai")
            monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
            monkeypatch.setenv("AGCTL_MODEL", MODEL)
            monkeypatch.setenv("AGCTL_API_KEY", key)
        else:
            step(
                "profile", "add", "work", "--base-url", server.base_url, "--model", MODEL,
                "--api-key", key, "--default",
            )  # fmt: skip
            step("profile", "add", "piped", "--base-url", server.base_url, "--api-key", "-",
                 input=key.encode())  # fmt: skip
            step("profile", "list")
            step("profile", "list", "--json")
        step("config", "set", "max_retries", "1")
        step("session", "new", "s", "--system", "Be brief.")
        step("-v", "turn", "send", "plain", "--record", str(cassette))
        step("-vv", "turn", "send", "streamed", "--stream", "--record", str(cassette))
        step("turn", "send", "as json", "--json")
        step("turn", "send", "as lines", "--jsonl", "--stream")
        server.fail("status", status=429, message=f"slow down, {key}", retry_after=0.01)
        step("-vv", "turn", "send", "after a 429")
        server.fail("status", status=401, message=f"Incorrect API key provided: {key}")
        refused = step("-vv", "turn", "send", "refused", "--record", str(cassette), code=6)
        assert "Incorrect API key provided" in refused.stderr
        server.fail("status", status=400, message=f"bad request (key {key})")
        step("-v", "turn", "send", "--resume-draft", "--stream", "--jsonl", code=6)
        step("-v", "turn", "send", "--resume-draft")
        step("-vv", "turn", "replay", str(transcript), "--record", str(cassette))
        step("turn", "send", "dry", "--dry-run")
        step("-vv", "turn", "send", "dry", "--dry-run", "--json")
        assert all(r.headers["authorization"] == f"Bearer {key}" for r in server.requests)
    shown = step("config", "show")
    assert str(mask(key)) in shown.stdout
    step("config", "show", "--json")
    step("-vv", "session", "show", "--json")
    step("slot", "show", "--view", "--json")
    step("session", "export", "-o", str(tmp_path / "out" / "session.json"))
    step("msg", "export", "--format", "jsonl", "-o", str(tmp_path / "out" / "messages.jsonl"))
    step("session", "export")
    listing = step("ckpt", "list", "--json")
    ids = [row["id"] for row in json.loads(listing.stdout)]
    assert len(ids) >= 5
    step("ckpt", "create", "--label", "after the turns")
    step("ckpt", "show", ids[-1], "--messages", "--json")
    step("ckpt", "show", ids[0])
    step("ckpt", "diff", ids[-1])
    step("ckpt", "diff", ids[-1], ids[0], "--json")
    step("-v", "ckpt", "rollback", ids[-1])
    step("-v", "ckpt", "fork", ids[0], "--id", "forked")
    step("-v", "turn", "send", "offline now", "--cassette", str(cassette), code=6)
    step("turn", "replay", str(transcript), "--cassette", str(cassette), "-s", "forked", code=6)
    step("ckpt", "prune", "--keep", "2")

    assert cassette.stat().st_size > 0 and (tmp_path / "out" / "session.json").exists()
    config_file = tmp_path / "xdg-config" / "agctl" / "config.json"
    allowed: set[Path] = set()
    if source == "profile":
        assert key.encode() in config_file.read_bytes()
        assert config_file.stat().st_mode & 0o777 == 0o600
        allowed = {config_file}
    assert_secret_nowhere(key, tmp_path, outputs, allowed)
    assert store.load_session("forked").turn_count > 0


def test_a_key_echoed_in_a_malformed_reply_is_not_leaked_even_in_part(
    run: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with FakeOpenAI() as server:
        monkeypatch.setenv("AGCTL_PROVIDER", "openai")
        monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
        monkeypatch.setenv("AGCTL_MODEL", MODEL)
        monkeypatch.setenv("AGCTL_API_KEY", ENV_KEY)
        assert run("session", "new", "s").exit_code == 0
        server.fail("garbage", body=b"<html>" + b"x" * 170 + ENV_KEY.encode() + b"</html>")
        result = run("turn", "send", "hi", "--no-stream")
    assert_refused(result, code=6, says="malformed response")
    assert_secret_nowhere(ENV_KEY, tmp_path, [result])


@pytest.mark.parametrize(
    "header",
    [f"Authorization Bearer {ENV_KEY}", f"api-key={ENV_KEY}"],
    ids=["space", "equals"],
)
def test_a_malformed_secret_header_is_refused_without_echoing_it(
    run: Run, tmp_path: Path, header: str
) -> None:
    result = run("profile", "add", "az", "--base-url", "http://x/v1", "--header", header)
    assert result.exit_code == 2
    assert "--header" in result.stderr
    assert_secret_not_shown(ENV_KEY, [result])
