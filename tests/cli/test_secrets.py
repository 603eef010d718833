"""Secrets never shown, stored or recorded: a base URL's password, and a key a server echoes.

Real CLI runs against the fake server on loopback; afterwards every file under the data
dir, the cassette and everything printed are searched for the secret in every encoding.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from click.testing import Result
from fake_openai import FakeOpenAI

from agctl.base.redact import MARK, Redactor, mask_url, strip_userinfo
from agctl.providers.base import (
    ChatRequest,
    Event,
    ReasoningDelta,
    RedactingProvider,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from agctl.providers.offline import OfflineProvider, ScriptedReply
from agctl.store import Store

Run = Callable[..., Result]

# '/', '+' and '=' make every URL encoding differ from the key itself.
KEY = "sk-echo/Key+Zq7Xw3=Kp9Lm2Vb8N"
USER = "alice"
PASSWORD = "pw/Hd82+Ks=Pq0Wn4"
MODEL = "fake-model"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def key_forms(key: str) -> dict[str, str]:
    return {
        "plain": key,
        "quote": quote(key, safe=""),
        "quote/": quote(key),
        "quote_plus": quote_plus(key),
        "b64(user:key)": b64(f"user:{key}"),
        "b64(:key)": b64(f":{key}"),
        "b64(key)": b64(key),
    }


def password_forms() -> dict[str, str]:
    forms = {f"password {name}": form for name, form in key_forms(PASSWORD).items()}
    pair = f"{USER}:{PASSWORD}"
    forms.update({"pair": pair, "pair quoted": quote(pair, safe=""), "b64(pair)": b64(pair)})
    return forms


def every_file(*roots: Path) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
        elif root.exists():
            yield from (p for p in root.rglob("*") if p.is_file())


def assert_nowhere(forms: dict[str, str], roots: Iterable[Path], outputs: Iterable[Result]) -> None:
    files = list(every_file(*roots))
    assert files, "nothing was written at all"
    for name, form in forms.items():
        needle = form.encode()
        for path in files:
            assert needle not in path.read_bytes(), f"{path} holds the {name} form"
        for result in outputs:
            assert needle not in result.stdout_bytes, f"stdout holds the {name} form"
            assert needle not in result.stderr_bytes, f"stderr holds the {name} form"


@pytest.fixture
def sid(store: Store) -> str:
    store.create_session("s1")
    store.set_current_session("s1")
    return "s1"


def with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://{USER}:{quote(PASSWORD, safe='')}@")


# ---- the redactor ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:secret@host:8/v1", "http://u:****@host:8/v1"),
        ("https://token-only@host/v1", "https://****@host/v1"),
        ("http://host/v1", "http://host/v1"),
        ("http://host/v1/a@b", "http://host/v1/a@b"),
        ("http://u:p%40ss@host/v1?x=@", "http://u:****@host/v1?x=@"),
        ("http://u:p@ss@host/v1", "http://u:****@host/v1"),
        ("http://u:secret@[::1", "http://u:****@[::1"),
        ("u:secret@host/v1", "u:****@host/v1"),
    ],
)
def test_mask_url_hides_the_password_of_any_url_even_a_broken_one(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_strip_userinfo_keeps_the_rest_of_the_url() -> None:
    assert strip_userinfo("http://u:p@host:8/v1") == "http://host:8/v1"
    assert strip_userinfo("http://host/v1") == "http://host/v1"


def test_the_redactor_removes_every_encoding_of_the_key_and_the_password() -> None:
    redactor = Redactor.for_credentials(KEY, with_userinfo("http://h/v1"))
    forms = {**key_forms(KEY), **password_forms(), "b64(bob:key)": b64(f"bob:{KEY}")}
    for name, form in forms.items():
        cleaned = redactor.text(f"before {form} after")
        assert form not in cleaned, name
        assert cleaned.startswith("before ") and cleaned.endswith(" after"), name
    assert redactor.text("nothing secret here") == "nothing secret here"


def test_a_short_secret_is_not_hunted_in_ordinary_text() -> None:
    redactor = Redactor.for_credentials("abc", "http://u:pw@h/v1")
    assert not redactor
    assert redactor.text("abc pw u:pw") == "abc pw u:pw"


def test_a_key_cut_across_stream_pieces_is_still_removed() -> None:
    reply = f"the key is {KEY}, and {quote(KEY, safe='')} too"
    arguments = json.dumps({"token": b64(f"user:{KEY}")})
    script = [
        ScriptedReply(
            content=reply,
            reasoning=KEY,
            tool_calls=[{"id": "c1", "name": "f", "arguments": arguments}],
        )
    ]

    class Pieces(OfflineProvider):
        """The scripted reply, one character an event."""

        def stream(self, request: ChatRequest) -> Iterator[Event]:
            for event in super().stream(request):
                if isinstance(event, TextDelta | ReasoningDelta):
                    yield from (type(event)(char) for char in event.text)
                elif isinstance(event, ToolCallDelta) and event.arguments:
                    for char in event.arguments:
                        yield ToolCallDelta(event.index, arguments=char)
                else:
                    yield event

    provider = RedactingProvider(Pieces(script), Redactor.for_credentials(KEY, None))
    events = list(provider.stream(ChatRequest(model="m", messages=[])))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    args = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
    assert text == "the key is ***, and *** too"
    assert reasoning == "***"
    assert b64(f"user:{KEY}") not in args
    assert list(json.loads(args)) == ["token"], "the arguments are still JSON"
    assert isinstance(events[-2], Usage), "held text is flushed before usage and finish"


# ---- a password in the base URL ----------------------------------------------------------


def test_a_base_url_password_authenticates_and_is_shown_or_stored_nowhere(
    run: Run, sid: str, server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = with_userinfo(server.base_url)
    masked = f"http://{USER}:****@127.0.0.1:{server.port}/v1"
    outputs: list[Result] = []

    def step(*args: str, code: int = 0) -> Result:
        result = run(*args)
        assert result.exit_code == code, result.output
        outputs.append(result)
        return result

    cassette = tmp_path / "turns.cassette"
    step("config", "set", "max_retries", "0")
    step("profile", "add", "proxied", "--base-url", url, "--model", MODEL, "--default")
    listed = step("profile", "list")
    assert masked in listed.stdout
    assert json.loads(step("profile", "list", "--json").stdout)[0]["base_url"] == masked
    shown = json.loads(step("config", "show", "--json").stdout)
    assert shown["config"]["profiles"]["proxied"]["base_url"] == masked
    assert shown["resolved"]["base_url"] == masked
    assert masked in step("config", "show").stdout
    step("config", "set", "profiles.proxied.base_url", url)
    dry = json.loads(step("turn", "send", "dry", "--dry-run").stdout)
    assert dry["url"] == f"{masked}/chat/completions"

    server.reply(text=f"you sent {b64(f'{USER}:{PASSWORD}')} and {PASSWORD}")
    sent = step("-vv", "turn", "send", "hello", "--record", str(cassette))
    assert "you sent *** and ***" in sent.stdout
    assert f"POST {masked}/chat/completions" in sent.stderr
    assert server.requests[-1].headers["authorization"] == f"Basic {b64(f'{USER}:{PASSWORD}')}"

    server.fail("status", status=401, message=f"bad credentials {USER}:{PASSWORD}")
    refused = step("-vv", "turn", "send", "refused", "--stream", "--record", str(cassette), code=6)
    assert masked in refused.stderr and "bad credentials" in refused.stderr
    server.fail("status", status=502, message=f"upstream said {quote(PASSWORD, safe='')}")
    step("-vv", "turn", "send", "--resume-draft", code=6)
    draft = Store(tmp_path / "data").load_draft(sid, "default")
    assert draft.error is not None and masked in draft.error

    monkeypatch.setenv("AGCTL_BASE_URL", with_userinfo("http://[::1"))
    step("turn", "send", "--resume-draft", code=2)

    assert_nowhere(password_forms(), [tmp_path / "data", cassette], outputs)


def test_a_bare_token_in_the_url_is_masked_and_sent(
    run: Run, sid: str, server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "tok-Zq7Xw3Kp9Lm2"
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_MODEL", MODEL)
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url.replace("//", f"//{token}@"))
    run("config", "set", "max_retries", "0")
    server.fail("status", status=400, message=f"no such token {token}")
    result = run("turn", "send", "hi")
    assert result.exit_code == 6
    assert "http://****@127.0.0.1" in result.stderr
    assert token not in result.stderr
    assert server.requests[0].headers["authorization"] == f"Basic {b64(token + ':')}"


# ---- a key echoed by the server ----------------------------------------------------------


@pytest.fixture
def wired(server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> FakeOpenAI:
    monkeypatch.setenv("AGCTL_PROVIDER", "openai")
    monkeypatch.setenv("AGCTL_BASE_URL", server.base_url)
    monkeypatch.setenv("AGCTL_MODEL", MODEL)
    monkeypatch.setenv("AGCTL_API_KEY", KEY)
    return server


def echo_of(forms: Iterable[str]) -> str:
    return " ".join(f"[{form}]" for form in forms)


@pytest.mark.parametrize("chunk_size", [None, 1, 4, 7])
@pytest.mark.parametrize("mode", ["--no-stream", "--stream", "--jsonl", "--json"])
def test_a_key_echoed_in_a_reply_is_kept_out_of_slot_log_cassette_and_output(
    run: Run, sid: str, wired: FakeOpenAI, tmp_path: Path, mode: str, chunk_size: int | None
) -> None:
    forms = key_forms(KEY)
    echoed = echo_of(forms.values())
    cassette = tmp_path / "echo.cassette"
    run("config", "set", "max_retries", "0")
    wired.reply(
        text=f"Your key: {echoed}",
        reasoning=f"I will repeat {echoed}",
        tool_calls=[{"name": "store", "arguments": {"key": KEY, "all": echoed}}],
        chunk_size=chunk_size,
    )
    extra = ["--stream"] if mode == "--json" else []
    sent = run(*(["--json"] if mode == "--json" else []), "turn", "send", "echo", mode, *extra,
               "--record", str(cassette))  # fmt: skip
    assert sent.exit_code == 0, sent.output
    slot = json.loads(run("slot", "show", "--json").stdout)
    reply = next(m for m in slot["messages"] if m["role"] == "assistant")
    assert reply["content"].startswith("Your key: [***]")
    assert reply["tool_calls"][0]["function"]["name"] == "store"
    assert json.loads(reply["tool_calls"][0]["function"]["arguments"])["key"] == "***"

    wired.fail("status", status=400, message=f"bad key {quote(KEY, safe='')} ({b64(':' + KEY)})")
    failed = run("turn", "send", "again", mode)
    assert failed.exit_code == 6
    assert "bad key ***" in failed.stderr

    assert_nowhere(forms, [tmp_path / "data", cassette], [sent, failed])


def test_a_key_echoed_mid_stream_in_an_error_is_redacted(
    run: Run, sid: str, wired: FakeOpenAI, tmp_path: Path
) -> None:
    run("config", "set", "max_retries", "0")
    wired.fail("sse", events=[{"error": {"message": f"key {quote_plus(KEY)} is over quota"}}])
    result = run("turn", "send", "hi", "--stream")
    assert result.exit_code == 6
    assert "key *** is over quota" in result.stderr
    assert_nowhere(key_forms(KEY), [tmp_path / "data"], [result])


@pytest.mark.parametrize(
    "header", ["api-key: azureSECRET12345", "Authorization: Bearer hdrTOKEN98765"]
)
def test_a_header_secret_echoed_in_a_reply_is_redacted(
    run: Run, sid: str, server: FakeOpenAI, tmp_path: Path, header: str
) -> None:
    """Before (review): only the API key and the URL password were hunted in replies; a
    secret sent in a profile's header (Azure's api-key) was stored when echoed."""
    secret = header.split()[-1]
    added = run("profile", "add", "az", "--base-url", server.base_url, "--model", MODEL,
                "--header", header, "--default")  # fmt: skip
    assert added.exit_code == 0, added.output
    cassette = tmp_path / "h.cassette"
    server.reply(text=f"the header was {secret}", chunk_size=3)
    sent = run("turn", "send", "hi", "--stream", "--record", str(cassette))
    assert sent.exit_code == 0, sent.output
    assert f"the header was {MARK}" in sent.stdout
    assert_nowhere(key_forms(secret), [tmp_path / "data", cassette], [sent])
