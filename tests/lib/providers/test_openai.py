"""The OpenAI-compatible provider on its own (over real HTTP: tests/cli/test_turn_http.py)."""

from __future__ import annotations

import pytest

from agctl.base.errors import ProviderError
from agctl.providers.base import ChatRequest
from agctl.providers.openai import HttpSettings, OpenAIProvider


def test_an_unsupported_url_is_not_retried() -> None:
    slept: list[float] = []
    provider = OpenAIProvider(
        HttpSettings(base_url="ftp://example.invalid/v1", max_retries=3), sleep=slept.append
    )
    with pytest.raises(ProviderError, match="cannot send"):
        list(provider.stream(ChatRequest(model="m", messages=[{"role": "user", "content": "x"}])))
    assert slept == []
