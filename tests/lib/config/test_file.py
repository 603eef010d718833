"""Configuration: the file, profiles, presets and the precedence of settings."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from agctl.base.errors import AlreadyExists, CorruptDocument, NotFound, UsageError
from agctl.base.vocab import PRESETS
from agctl.config.file import (
    Config,
    ConfigFile,
    Profile,
    Resolved,
    mask,
    masked_config,
    masked_value,
    profile_from,
    profile_listing,
    resolve,
)
from agctl.context.models import Session
from agctl.context.pricing import Price


@pytest.fixture
def config_store(tmp_path: Path) -> ConfigFile:
    return ConfigFile(tmp_path / "cfg" / "config.json")


def test_missing_file_means_defaults(config_store: ConfigFile) -> None:
    config = config_store.load()
    assert config.max_retries == 3 and config.profiles == {} and config.auto_checkpoint


def test_saved_file_is_private(config_store: ConfigFile) -> None:
    config_store.add_profile("work", Profile(preset="openai", api_key="sk-secret-0123456789"))
    mode = stat.S_IMODE(config_store.path.stat().st_mode)
    assert mode == 0o600
    assert config_store.load().profiles["work"].api_key == "sk-secret-0123456789"


def test_adding_a_profile_changes_no_default_and_duplicates_are_refused(
    config_store: ConfigFile,
) -> None:
    config_store.add_profile("a", Profile(preset="deepseek"))
    config_store.add_profile("b", Profile(preset="ollama"))
    assert config_store.load().default_profile is None, "turns stay offline until chosen"
    with pytest.raises(AlreadyExists):
        config_store.add_profile("a", Profile())
    config_store.add_profile("a", Profile(preset="zhipu"), replace=True)
    assert config_store.load().profiles["a"].preset == "zhipu"
    with pytest.raises(UsageError, match="unknown preset"):
        config_store.add_profile("c", Profile(preset="nonesuch"))
    config_store.remove_profile("a")
    assert config_store.load().default_profile is None
    with pytest.raises(NotFound):
        config_store.remove_profile("a")


def test_a_profile_added_as_the_default_is_saved_with_it(config_store: ConfigFile) -> None:
    config = config_store.add_profile("123", Profile(preset="openai"), make_default=True)
    assert config.default_profile == "123" == config_store.load().default_profile
    config_store.add_profile("b", Profile(preset="ollama"))
    assert config_store.load().default_profile == "123", "only --default changes it"
    with pytest.raises(AlreadyExists):
        config_store.add_profile("b", Profile(), make_default=True)
    assert config_store.load().default_profile == "123", "a refused profile changes nothing"


def test_set_dotted_keys_with_validation(config_store: ConfigFile) -> None:
    config_store.set("max_retries", "5")
    config_store.set("prices.my-model", '{"prompt": 1.5, "completion": 3}')
    config_store.set("prices.my-model.prompt", "2")
    config = config_store.load()
    assert config.max_retries == 5
    assert config.price_overrides() == {"my-model": Price(2.0, 3.0)}
    # Cache prices go beside them, and a config without them reads as before.
    config_store.set("prices.my-model.cache_read", "0.2")
    assert config_store.load().price_overrides() == {"my-model": Price(2.0, 3.0, 0.2)}
    with pytest.raises(UsageError, match="cache_write"):
        config_store.set("prices.my-model.cache_write", "-1")
    # And the price of the cache writes kept an hour.
    config_store.set("prices.my-model.cache_write_1h", "4")
    assert config_store.load().price_overrides() == {
        "my-model": Price(2.0, 3.0, 0.2, cache_write_1h=4.0)
    }
    with pytest.raises(UsageError, match="cache_write_1h"):
        config_store.set("prices.my-model.cache_write_1h", "-1")
    with pytest.raises(UsageError, match="max_retries"):
        config_store.set("max_retries", "many")
    with pytest.raises(UsageError):
        config_store.set("read_timeout", "-1")
    assert config_store.load().max_retries == 5


def test_corrupt_config_names_the_file(config_store: ConfigFile) -> None:
    config_store.path.parent.mkdir(parents=True)
    config_store.path.write_text(json.dumps({"max_retries": "lots"}))
    with pytest.raises(CorruptDocument, match="max_retries"):
        config_store.load()


def test_mask_never_shows_a_usable_key() -> None:
    assert mask("sk-abcdefghijklmnop") == "sk-…mnop"
    assert mask("short") == "****"
    assert mask(None) is None


def test_default_is_offline_with_no_key_and_no_network() -> None:
    settings = resolve(Config(), env={"OPENAI_API_KEY": "sk-from-env"})
    assert settings.provider == "offline" and settings.model == "offline"
    assert settings.sources["provider"] == "default"


def test_precedence_flag_env_session_profile_preset() -> None:
    config = Config(
        default_profile="ds",
        profiles={"ds": Profile(preset="deepseek", model="deepseek-reasoner")},
    )
    env = {"DEEPSEEK_API_KEY": "ds-key"}
    assert resolve(config, env=env).model == "deepseek-reasoner"
    session = Session(id="s", model="session-model")
    assert resolve(config, session=session, env=env).model == "session-model"
    env_model = {**env, "AGCTL_MODEL": "env-model"}
    assert resolve(config, session=session, env=env_model).model == "env-model"
    flagged = resolve(config, session=session, model="flag-model", env=env_model)
    assert flagged.model == "flag-model" and flagged.sources["model"] == "flag"
    no_model = Config(default_profile="ds", profiles={"ds": Profile(preset="deepseek")})
    preset_model = resolve(no_model, env=env)
    assert preset_model.model == "deepseek-chat" and preset_model.sources["model"] == "preset"
    assert preset_model.base_url == "https://api.deepseek.com/v1"
    assert (
        preset_model.api_key == "ds-key" and preset_model.sources["api_key"] == "$DEEPSEEK_API_KEY"
    )


def test_profile_choice_flag_env_session_default() -> None:
    config = Config(
        default_profile="a",
        profiles={"a": Profile(model="ma"), "b": Profile(model="mb"), "c": Profile(model="mc")},
    )
    assert resolve(config, env={}).profile == "a"
    assert resolve(config, session=Session(id="s", profile="b"), env={}).profile == "b"
    env = {"AGCTL_PROFILE": "c"}
    assert resolve(config, session=Session(id="s", profile="b"), env=env).profile == "c"
    assert resolve(config, profile="b", env=env).model == "mb"


def test_a_preset_name_works_as_a_profile() -> None:
    settings = resolve(Config(), profile="ollama", env={"OPENAI_API_KEY": "sk-openai"})
    assert settings.provider == "openai"
    assert settings.base_url == "http://localhost:11434/v1"
    assert settings.api_key is None, "an OpenAI key must not be sent to another server"
    with pytest.raises(NotFound, match="presets"):
        resolve(Config(), profile="nope", env={})


def test_openai_fallback_variables_never_redirect_another_preset() -> None:
    env = {"OPENAI_BASE_URL": "http://proxy/v1", "OPENAI_API_KEY": "sk-o"}
    ds = resolve(Config(), profile="deepseek", env=env)
    assert ds.base_url == "https://api.deepseek.com/v1" and ds.api_key is None
    plain = Config(default_profile="p", profiles={"p": Profile(model="gpt-4o")})
    settings = resolve(plain, env=env)
    assert settings.base_url == "http://proxy/v1" and settings.api_key == "sk-o"
    assert resolve(plain, env={}).base_url == "https://api.openai.com/v1"
    agctl_env = {**env, "AGCTL_BASE_URL": "http://mine/v1", "AGCTL_API_KEY": "k2"}
    both = resolve(Config(), profile="deepseek", env=agctl_env)
    assert (both.base_url, both.api_key) == ("http://mine/v1", "k2")


def test_profile_key_from_its_own_variable_then_the_file() -> None:
    profile = Profile(base_url="http://x/v1", model="m", api_key="file-key", api_key_env="MY_KEY")
    config = Config(default_profile="p", profiles={"p": profile})
    assert resolve(config, env={"MY_KEY": "env-key"}).api_key == "env-key"
    assert resolve(config, env={}).api_key == "file-key"


def test_env_provider_and_missing_model() -> None:
    with pytest.raises(UsageError, match="no model"):
        resolve(Config(), env={"AGCTL_PROVIDER": "openai", "AGCTL_BASE_URL": "http://x/v1"})
    with pytest.raises(UsageError, match="unknown provider"):
        resolve(Config(), env={"AGCTL_PROVIDER": "carrier-pigeon"})
    settings = resolve(Config(), env={"AGCTL_PROVIDER": "openai", "AGCTL_MODEL": "m"})
    assert settings.base_url == "https://api.openai.com/v1"


def test_public_view_masks_the_key() -> None:
    settings = Resolved(provider="openai", model="m", api_key="sk-0123456789abcdef")
    public = settings.public()
    assert public["api_key"] == "sk-…cdef"
    assert "sk-0123456789abcdef" not in json.dumps(public)


def test_a_key_is_stripped_and_checked_without_being_shown() -> None:
    assert (
        resolve(
            Config(),
            env={"AGCTL_API_KEY": "sk-abc\n", "AGCTL_PROVIDER": "openai", "AGCTL_MODEL": "m"},
        ).api_key
        == "sk-abc"
    )
    with pytest.raises(UsageError, match="AGCTL_API_KEY") as caught:
        resolve(Config(), env={"AGCTL_API_KEY": "sk-\u2018x\u2019"})
    assert "\u2018" not in str(caught.value)


def test_the_openai_key_goes_only_toward_openai() -> None:
    config = Config(profiles={"box": Profile(base_url="http://gpu-box:8000/v1", model="m")})
    env = {"OPENAI_API_KEY": "sk-openai-0123456789"}
    assert resolve(config, profile="box", env=env).api_key is None
    openai = Config(profiles={"o": Profile(model="gpt-4o")})
    assert resolve(openai, profile="o", env=env).api_key == "sk-openai-0123456789"
    proxied = resolve(openai, profile="o", env={**env, "OPENAI_BASE_URL": "http://proxy/v1"})
    assert proxied.api_key == "sk-openai-0123456789"


@pytest.mark.parametrize(
    "key",
    ["auto_checkpont", "profiles.x.provder", "profiles", "max_retries.deep", "prices.m.cheap"],
)
def test_config_set_refuses_unknown_keys(tmp_path: Path, key: str) -> None:
    with pytest.raises(UsageError):
        ConfigFile(tmp_path / "config.json").set(key, "1")
    assert not (tmp_path / "config.json").exists()


def test_a_symlinked_config_file_is_read(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "config.json"
    real.parent.mkdir()
    real.write_text(json.dumps({"max_retries": 9}))
    link = tmp_path / "config.json"
    link.symlink_to(real)
    assert ConfigFile(link).load().max_retries == 9


# agctl.config.file's reads for display: masked config and values, profile listings, the URL
# a dry run shows.


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


def test_each_wire_posts_to_its_own_endpoint_and_offline_has_none() -> None:
    from agctl.providers import wire_for
    from agctl.providers.base import ChatRequest

    request = ChatRequest(model="m", messages=[{"role": "user", "content": "x"}])
    openai = wire_for(Resolved(provider="openai", model="m"))
    assert openai is not None
    assert openai.url("https://h.example/v1/", request) == "https://h.example/v1/chat/completions"
    assert wire_for(Resolved(provider="offline", model="m")) is None
    assert wire_for(Resolved(provider="replay", model="m")) is None


@pytest.mark.parametrize(
    ("kind", "url", "variables"),
    [
        ("anthropic", "https://api.anthropic.com", ("ANTHROPIC_API_KEY",)),
        (
            "gemini",
            "https://generativelanguage.googleapis.com",
            ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
        ),
    ],
)
def test_a_native_wire_reaches_its_own_service_with_its_own_key(
    kind: str, url: str, variables: tuple[str, ...]
) -> None:
    env = {name: f"key-{name}" for name in variables} | {"OPENAI_API_KEY": "sk-openai"}
    by_flag = resolve(Config(), provider=kind, env=env)
    by_preset = resolve(Config(), profile=kind, env=env)
    for settings in (by_flag, by_preset):
        assert (settings.provider, settings.base_url) == (kind, url)
        # The first variable wins where the service's SDK has two (Google prefers its own).
        assert settings.api_key == f"key-{variables[0]}"
        assert settings.model == PRESETS[kind].model
    assert by_flag.key_env == variables[-1]
    if len(variables) > 1:
        assert resolve(Config(), provider=kind, env={variables[1]: "only"}).api_key == "only"
    # Never the OpenAI key, and never the service's key toward another server.
    assert resolve(Config(), provider=kind, env={"OPENAI_API_KEY": "sk"}).api_key is None
    box = Config(profiles={"box": Profile(provider=kind, base_url="http://box:1/", model="m")})
    assert resolve(box, profile="box", env=env).api_key is None


def test_a_profile_names_its_wire_settings_and_a_preset_its_wire() -> None:
    profile = profile_from({"preset": "claude", "cache_ttl": "1h", "thinking_budget": 2048})
    assert (profile.provider, profile.cache_ttl, profile.thinking_budget) == (
        "anthropic",
        "1h",
        2048,
    )
    config = Config(profiles={"c": profile})
    settings = resolve(config, profile="c", env={"ANTHROPIC_API_KEY": "k"})
    assert (settings.cache_ttl, settings.thinking_budget, settings.api_key) == ("1h", 2048, "k")
    assert resolve(Config(), profile="google", env={}).provider == "gemini"
    assert profile_from({"preset": "deepseek"}).provider == "openai"
    assert profile_from({}).provider == "openai"
    with pytest.raises(UsageError, match="cache_ttl"):
        profile_from({"provider": "anthropic", "cache_ttl": "2h"})
    # What is left unset stays out of the file.
    assert "cache_ttl" not in profile_from({"provider": "anthropic"}).model_dump()


def test_anthropic_refuses_a_thinking_budget_below_its_least() -> None:
    from agctl.providers import wire_for

    settings = Resolved(provider="anthropic", model="m", thinking_budget=100)
    with pytest.raises(UsageError, match="1024"):
        wire_for(settings)
