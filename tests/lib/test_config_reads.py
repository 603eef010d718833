"""agctl.config.file's reads for display: masked config and values, profile listings, the URL
a dry run shows."""

from __future__ import annotations

import json

from agctl.config.file import (
    Config,
    Profile,
    Resolved,
    masked_config,
    masked_value,
    profile_listing,
)

KEY = "sk-0123456789abcdef"


def secret_config() -> Config:
    return Config(
        default_profile="ds",
        profiles={
            "ds": Profile(preset="deepseek", api_key=KEY),
            "own": Profile(
                base_url="https://user:hunter2@gpu.example/v1",
                model="qwen",
                api_key_env="OWN_KEY",
                headers={"Authorization": "Bearer secret-token-value"},
            ),
        },
    )


def test_the_masked_config_shows_no_secret_and_no_unset_field() -> None:
    masked = masked_config(secret_config())
    text = json.dumps(masked)
    assert KEY not in text and "hunter2" not in text and "secret-token-value" not in text
    assert masked["profiles"]["ds"]["api_key"] == "sk-…cdef"
    assert "base_url" not in masked["profiles"]["ds"]  # unset: left out


def test_a_masked_value_masks_through_tables_and_at_the_key() -> None:
    config = secret_config()
    # Read at its own key, a secret is masked once more: nothing of it shows.
    assert masked_value(config, "profiles.ds.api_key") == "****"
    assert masked_value(config, "profiles.own.headers.Authorization") == "****"
    whole = masked_value(config, "profiles.own")
    assert whole["headers"] == {"Authorization": "Bea…alue"}
    assert "hunter2" not in whole["base_url"]
    assert masked_value(config, "default_profile") == "ds"
    assert masked_value(config, "profiles.nosuch.model") is None


def test_a_profile_listing_falls_back_to_its_preset() -> None:
    ds, own = profile_listing(secret_config())
    assert ds == {
        "name": "ds",
        "default": True,
        "provider": "openai",
        "preset": "deepseek",
        "base_url": "https://api.deepseek.com/v1",
        "model": "deepseek-chat",
        "api_key": "sk-…cdef",
    }
    assert (own["name"], own["default"], own["model"], own["api_key"]) == (
        "own",
        False,
        "qwen",
        "$OWN_KEY",
    )
    assert "hunter2" not in own["base_url"]


def test_the_request_url_of_an_openai_compatible_provider_only() -> None:
    settings = Resolved(provider="openai", model="m", base_url="https://u:pw@h.example/v1/")
    url = settings.request_url()
    assert url is not None and url.endswith("@h.example/v1/chat/completions")
    assert "pw" not in url
    assert Resolved(provider="offline", model="m", base_url="https://h/v1").request_url() is None
    assert Resolved(provider="openai", model="m").request_url() is None
