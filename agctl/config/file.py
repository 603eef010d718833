"""User configuration: profiles, presets, retries, prices; and resolving a turn's settings.

The file is `config.json` under platformdirs' user config dir (or `AGCTL_CONFIG`), written
atomically with mode 0600 because a profile may hold an API key.

Precedence for each setting: flag > environment > session > profile > preset > default.
`AGCTL_*` variables follow that order; the usual `OPENAI_API_KEY` and `OPENAI_BASE_URL`
are fallbacks, used only when the profile (and its preset) leaves the value unset, so
they never redirect a DeepSeek or Ollama profile.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Self

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from agctl.base import schema
from agctl.base.errors import CorruptDocument, NotFound, UsageError
from agctl.base.fsio import DEFAULT_LOCK_TIMEOUT, make_dirs, read_bytes, write_atomic
from agctl.base.ids import validate_id
from agctl.base.paths import default_config_path
from agctl.base.redact import mask_url
from agctl.base.validation import validation_summary, wire_setting_problem
from agctl.base.vocab import (
    BASE_URL_VARIABLES,
    CONFIG_KEYS,
    KEY_VARIABLES,
    PRESET_ALIASES,
    PRESETS,
    PROVIDERS,
    WIRES,
    CacheTtl,
    Preset,
    ProviderName,
)
from agctl.context.models import (
    EAGER,
    Deferred,
    Document,
    Model,
    Session,
    _empty_dict,
    _empty_list,
    _optional,
    shared_field,
)
from agctl.context.pricing import Price as PriceRow
from agctl.storage.urls import (
    STORED_PASSWORD,
    check_role,
    check_schema,
    has_password,
    parse_store,
    redact,
)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from agctl.config.specs import McpServerSpec, ToolSpec

OFFLINE_MODEL = "offline"

schema.CURRENT.setdefault("config", (1, 0))
schema.MIGRATIONS.setdefault("config", [])


def preset_named(name: str) -> Preset | None:
    return PRESETS.get(PRESET_ALIASES.get(name, name))


def _is_empty(value: object) -> bool:
    return not value


# The project's hooks file, relative to the directory agctl runs in.
PROJECT_HOOKS_FILE = Path(".agctl") / "hooks.json"
# The project's MCP servers file (a JSON object of servers by name), likewise.
PROJECT_MCP_FILE = Path(".agctl") / "mcp.json"


def _tool_table() -> Any:
    from agctl.config.specs import ToolTable

    return ToolTable


def _mcp_table() -> Any:
    from agctl.config.specs import McpTable

    return McpTable


def _hook_list() -> Any:
    from agctl.config.specs import HookSpec

    return list[HookSpec]


# `Config.tools` and `Profile.tools`: tools by name; `Config.hooks` and `Profile.hooks`.
# Validated by agctl.config.specs's models, imported only when the config holds some.
LazyToolTable = Annotated[dict[str, Any], Deferred(_tool_table)]
LazyHookList = Annotated[list[Any], Deferred(_hook_list)]
LazyMcpTable = Annotated[dict[str, Any], Deferred(_mcp_table)]


class Profile(Model):
    model_config = EAGER
    provider: ProviderName = "openai"
    preset: str | None = None
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    headers: dict[str, str] = shared_field(default_factory=_empty_dict)
    cassette: str | None = None
    context_window: PositiveInt | None = None
    # Send prompt_cache_key (OpenAI's cache routing); None: only to OpenAI itself, since
    # another server may refuse a field it does not know.
    prompt_cache_key: bool | None = _optional()
    # The Anthropic wire: how long the cache entries its breakpoints write are kept (None:
    # 5 minutes); writes kept an hour cost more (agctl.context.pricing).
    cache_ttl: CacheTtl | None = _optional()
    # The Anthropic and Gemini wires: the model's thinking budget in tokens (None: the
    # model's default; Anthropic thinks only when given one, of at least 1024; Gemini: 0
    # turns thinking off where the model allows, -1 lets it choose).
    thinking_budget: int | None = _optional(ge=-1)
    # Tools by name, overriding the config's of the same name for turns of this profile.
    tools: LazyToolTable = shared_field(default_factory=_empty_dict, exclude_if=_is_empty)
    # Run after the config's own hooks of the same event, when this profile is in use.
    hooks: LazyHookList = shared_field(default_factory=_empty_list, exclude_if=_is_empty)

    @model_validator(mode="after")
    def _wire_settings_fit_the_wire(self) -> Self:
        problem = wire_setting_problem(self.provider, self.cache_ttl, self.thinking_budget)
        if problem is not None:
            raise ValueError(problem)
        return self

    @field_validator("headers")
    @classmethod
    def _headers_fit_http(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not name.isascii() or not value.isascii() or "\n" in value or "\r" in value:
                raise ValueError(f"header {name!r} must be ASCII on one line")
        return headers


def profile_from(fields: Mapping[str, Any]) -> Profile:
    """A validated profile, or a UsageError saying which field is wrong; without a
    provider, its preset's (else openai)."""
    if fields.get("provider") is None and isinstance(fields.get("preset"), str):
        preset = preset_named(fields["preset"])
        fields = {**fields, "provider": preset.provider if preset is not None else None}
    try:
        return Profile.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        raise UsageError(f"invalid profile: {validation_summary(exc, 'profile')}") from None


class Price(Model):
    """A model's price in US dollars per million tokens; it wins over every price table."""

    prompt: float = shared_field(ge=0)
    completion: float = shared_field(ge=0)
    # Input read from, and written to, the provider's cache; unset: the prompt price (an
    # override names the whole price, so no table's cache price is mixed into it).
    cache_read: float | None = _optional(ge=0)
    cache_write: float | None = _optional(ge=0)
    # Of the writes, those kept an hour (Anthropic's 1-hour TTL); unset: the write price.
    cache_write_1h: float | None = _optional(ge=0)


class StoreSettings(Model):
    """The config's `store` table: the store's URL (never with a password: libpq reads one
    from its own files and environment), the schema of a PostgreSQL store, and the role
    other than the user's whose schema is accepted as shared (agctl.storage.factory)."""

    model_config = ConfigDict(
        validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )
    url: str | None = None
    # "schema" is a BaseModel method's name: the field is db_schema, "schema" in the file.
    db_schema: str | None = Field(default=None, alias="schema")
    shared_schema_owner: str | None = None
    # Seconds a command waits out a PostgreSQL server that does not answer (None: 5).
    connect_patience: float | None = Field(default=None, ge=0, le=3600, allow_inf_nan=False)

    @field_validator("url")
    @classmethod
    def _url_names_a_store(cls, url: str | None) -> str | None:
        if url is not None:
            if has_password(url):
                raise ValueError(STORED_PASSWORD)
            try:
                parse_store(url, origin="")
            except UsageError as exc:
                raise ValueError(str(exc)) from None
        return url

    @field_validator("db_schema")
    @classmethod
    def _schema_is_a_name(cls, name: str | None) -> str | None:
        try:
            return None if name is None else check_schema(name, "")
        except UsageError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("shared_schema_owner")
    @classmethod
    def _owner_is_a_role(cls, name: str | None) -> str | None:
        try:
            return None if name is None else check_role(name, "")
        except UsageError as exc:
            raise ValueError(str(exc)) from None


def _store_unset(settings: StoreSettings) -> bool:
    return (
        settings.url is None
        and settings.db_schema is None
        and settings.shared_schema_owner is None
        and settings.connect_patience is None
    )


# Constraints several settings share, each made once (agctl.context.models.shared_field).
Seconds = Annotated[float, shared_field(gt=0, allow_inf_nan=False)]
CallLimit = Annotated[int, shared_field(ge=1)]


class Config(Document):
    kind: ClassVar[str] = "config"
    default_profile: str | None = None
    auto_checkpoint: bool = True
    auto_compress: bool = True
    compress_keep_recent: NonNegativeInt = 6
    # `ctx compress` folds at least this many tokens or none: a compression re-sends
    # uncached what follows the immutable zone (its summary and the kept messages, ~2,000
    # tokens at the defaults), and each later turn saves the folded tokens, cached at a
    # tenth: 2,048 folded pay for that in about nine turns; 200 would take ninety.
    compress_min_tokens: NonNegativeInt = 2048
    # The kinds of fact a compression may not lose ('instructions,paths', 'any'): one
    # that would is refused (exit 7). Left out of the file while unset.
    compress_fail_on_loss: str | None = _optional()
    context_windows: dict[str, PositiveInt] = shared_field(default_factory=_empty_dict)
    max_retries: int = Field(default=3, ge=0, le=20)
    connect_timeout: Seconds = 10.0
    read_timeout: Seconds = 120.0
    # The whole request, from sending it to the last byte of the reply.
    request_timeout: Seconds = 600.0
    max_reply_bytes: PositiveInt = 16 * 1024 * 1024
    # A server asking to wait longer than this before a retry fails the turn at once.
    max_retry_wait: float = Field(default=60.0, ge=0, allow_inf_nan=False)
    # How long a writer waits for another process's lock on a session.
    lock_timeout: Seconds = DEFAULT_LOCK_TIMEOUT
    # How many tool calls one reply, and one whole turn, may ask for (--max-calls-per-*).
    max_calls_per_reply: CallLimit = 32
    max_calls_per_turn: CallLimit = 128
    prices: dict[str, Price] = shared_field(default_factory=_empty_dict)
    profiles: dict[str, Profile] = shared_field(default_factory=_empty_dict)
    # Tools by name (agctl.turn.tools): left out of the file while there are none.
    tools: LazyToolTable = shared_field(default_factory=_empty_dict, exclude_if=_is_empty)
    # MCP servers by name, whose tools a turn offers as SERVER__TOOL (agctl.turn.mcp).
    mcp_servers: LazyMcpTable = shared_field(default_factory=_empty_dict, exclude_if=_is_empty)
    # Hooks, run in this order at their events (agctl.turn.hooks).
    hooks: LazyHookList = shared_field(default_factory=_empty_list, exclude_if=_is_empty)
    # Project hooks files (PROJECT/.agctl/hooks.json, the project directory with links
    # resolved, the rest as the project holds it -> the sha256 `agctl hook trust` pinned):
    # a file runs only while its content has that hash. A project's MCP servers file
    # (PROJECT/.agctl/mcp.json, `agctl mcp trust`) is pinned here alike.
    trusted_hook_files: dict[str, str] = shared_field(
        default_factory=_empty_dict, exclude_if=_is_empty
    )
    # Where the sessions are when neither --store nor AGCTL_STORE says (agctl.storage.factory).
    store: StoreSettings = Field(default_factory=StoreSettings, exclude_if=_store_unset)

    @field_validator("compress_fail_on_loss", mode="before")
    @classmethod
    def _kinds_of_fact(cls, spec: Any) -> Any:
        """The kinds as one comma list, checked ('config set' reads '["paths"]' as a list)."""
        from agctl.context.artifacts import kinds_of

        if isinstance(spec, list) and all(isinstance(kind, str) for kind in spec):
            spec = ",".join(spec)
        return ",".join(kinds_of(spec)) or "none" if isinstance(spec, str) else spec

    def fail_on_loss(self) -> tuple[str, ...]:
        """The kinds of fact a compression may not lose (none unless the config says; then
        nothing is imported: every turn asks)."""
        if not self.compress_fail_on_loss:
            return ()
        from agctl.context.artifacts import kinds_of

        return kinds_of(self.compress_fail_on_loss)

    def price_overrides(self) -> dict[str, PriceRow]:
        return {
            name: PriceRow(p.prompt, p.completion, p.cache_read, p.cache_write, p.cache_write_1h)
            for name, p in self.prices.items()
        }


def mask(secret: str | None) -> str | None:
    """Enough of a key to recognise it, never enough to use it."""
    if not secret:
        return secret
    return "****" if len(secret) < 12 else f"{secret[:3]}…{secret[-4:]}"


class ConfigFile:
    """Reads and writes the config file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_config_path()

    def load(self) -> Config:
        # The user's own file: a symlink into a dotfiles repository is fine, but a FIFO
        # or a device (AGCTL_CONFIG=/dev/stdin) would hang or mislead: refused before
        # a byte is read.
        try:
            raw = read_bytes(self.path, "config", follow=True)
        except NotFound:
            return Config()
        try:
            return Config.model_validate_json(raw)
        except ValidationError as exc:
            reason = f"invalid config: {validation_summary(exc, 'document')}"
            raise CorruptDocument(self.path, reason) from None

    def save(self, config: Config) -> None:
        """Write the config atomically, 0600; through a link, to the file it names."""
        target = Path(os.path.realpath(self.path))
        make_dirs(target.parent)
        write_atomic(target, config.model_dump_json(indent=2, exclude_none=True).encode())

    def set(self, key: str, value: str) -> Config:
        """Set a dotted key (`max_retries`, `prices.gpt-4o.prompt`, `profiles.x.model`)."""
        config = self.load()
        data = config.model_dump(mode="json")
        parts = key.split(".")
        node: Any = data
        for part in parts[:-1]:
            if not isinstance(node, dict):
                raise UsageError(f"config key {key!r}: {part!r} is not a table")
            node = node.setdefault(part, {})
        if not isinstance(node, dict) or not parts[-1]:
            raise UsageError(f"config key {key!r} cannot be set")
        _check_key(key, parts)
        node[parts[-1]] = _parse_value(value)
        try:
            updated = Config.model_validate(data)
        except ValidationError as exc:
            raise UsageError(f"config key {key!r}: {validation_summary(exc)}") from None
        self.save(updated)
        return updated

    def add_profile(
        self, name: str, profile: Profile, *, replace: bool = False, make_default: bool = False
    ) -> Config:
        """Keep `profile` as `name` (and make it the default) in one write of the config."""
        validate_id(name, "profile")
        config = self.load()
        if name in config.profiles and not replace:
            from agctl.base.errors import AlreadyExists

            raise AlreadyExists(f"profile {name!r} already exists (use --replace)")
        if profile.preset is not None and preset_named(profile.preset) is None:
            raise UsageError(
                f"unknown preset {profile.preset!r}; choose from {', '.join(sorted(PRESETS))}"
            )
        replaced = config.profiles.get(name)
        if replaced is not None and not profile.hooks:
            # Its hooks are managed with `agctl hook add --profile`: a new endpoint keeps them.
            profile = profile.model_copy(update={"hooks": replaced.hooks})
        config.profiles[name] = profile
        if make_default:
            config.default_profile = name
        self.save(config)
        return config

    def remove_profile(self, name: str) -> Config:
        config = self.load()
        if name not in config.profiles:
            raise NotFound(f"profile {name!r} not found")
        del config.profiles[name]
        if config.default_profile == name:
            config.default_profile = None
        self.save(config)
        return config

    def add_tool(
        self, spec: ToolSpec, *, profile: str | None = None, replace: bool = False
    ) -> bool:
        """Keep `spec` in the config, or in `profile`'s tools; whether it replaced one."""
        config = self.load()
        tools = self._tool_table(config, profile)
        server = spec.name.partition("__")[0]
        if "__" in spec.name and server in config.mcp_servers:
            from agctl.base.errors import AlreadyExists

            raise AlreadyExists(
                f"tool {spec.name!r} would be MCP server {server!r}'s: a name SERVER__TOOL of "
                "a configured MCP server is that server's tool",
                hint="give the tool another name",
            )
        if spec.name in tools and not replace:
            from agctl.base.errors import AlreadyExists

            where = f" in profile {profile!r}" if profile else ""
            raise AlreadyExists(
                f"tool {spec.name!r} already exists{where}", hint="replace it with --force"
            )
        replaced = spec.name in tools
        tools[spec.name] = spec
        self.save(config)
        return replaced

    def remove_tool(self, name: str, *, profile: str | None = None) -> Config:
        config = self.load()
        tools = self._tool_table(config, profile)
        if name not in tools:
            where = f" in profile {profile!r}" if profile else " in the config"
            raise NotFound(f"tool {name!r} not found{where}")
        del tools[name]
        self.save(config)
        return config

    def add_mcp_server(self, spec: McpServerSpec, *, replace: bool = False) -> bool:
        """Keep the MCP server `spec` in the config; whether it replaced one."""
        config = self.load()
        prefix = f"{spec.name}__"
        tables = [config.tools, *(profile.tools for profile in config.profiles.values())]
        taken = sorted({name for table in tables for name in table if name.startswith(prefix)})
        if taken:
            from agctl.base.errors import AlreadyExists

            raise AlreadyExists(
                f"MCP server {spec.name!r} would serve the names of tools already defined "
                f"({', '.join(taken)}): a name SERVER__TOOL of a configured MCP server is that "
                "server's tool",
                hint="give the server another name, or rename those tools",
            )
        if spec.name in config.mcp_servers and not replace:
            from agctl.base.errors import AlreadyExists

            raise AlreadyExists(
                f"MCP server {spec.name!r} already exists", hint="replace it with --force"
            )
        replaced = spec.name in config.mcp_servers
        config.mcp_servers[spec.name] = spec
        self.save(config)
        return replaced

    def remove_mcp_server(self, name: str) -> McpServerSpec:
        """Forget the MCP server `name`; the spec it had."""
        config = self.load()
        if name not in config.mcp_servers:
            known = ", ".join(sorted(config.mcp_servers)) or "none"
            raise NotFound(f"MCP server {name!r} not found (servers: {known})")
        spec: McpServerSpec = config.mcp_servers.pop(name)
        self.save(config)
        return spec

    @staticmethod
    def _tool_table(config: Config, profile: str | None) -> dict[str, ToolSpec]:
        if profile is None:
            return config.tools
        if profile not in config.profiles:
            known = ", ".join(sorted(config.profiles)) or "none"
            raise NotFound(f"profile {profile!r} not found (profiles: {known})")
        return config.profiles[profile].tools


def _check_key(key: str, parts: list[str]) -> None:
    """Refuse a key the config does not have, so a typo is not silently kept."""
    from agctl.config.specs import McpServerSpec, ToolSpec

    nested: dict[str, type[BaseModel] | None] = {
        **{"profiles": Profile, "prices": Price, "context_windows": None},
        **{"tools": ToolSpec, "mcp_servers": McpServerSpec},
    }
    top = parts[0]
    if top not in Config.model_fields or top in ("schema_version",):
        raise UsageError(f"unknown config key {key!r}; known: {', '.join(sorted(CONFIG_KEYS))}")
    if top in nested:
        if len(parts) < 2 or not parts[1]:
            raise UsageError(f"config key {key!r} needs a name: {top}.NAME")
        model = nested[top]
        if len(parts) > 2 and (model is None or parts[2] not in model.model_fields):
            known = ", ".join(model.model_fields) if model else "none"
            raise UsageError(f"unknown field {parts[2]!r} in {key!r} (fields: {known})")
    elif top == "store":
        fields = ("url", "schema", "shared_schema_owner", "connect_patience")
        if len(parts) != 2 or parts[1] not in fields:
            known = ", ".join(f"store.{field}" for field in fields)
            raise UsageError(f"unknown config key {key!r}; the store's are {known}")
    elif len(parts) > 1:
        raise UsageError(f"config key {top!r} has no sub-keys")


def mask_secrets(data: Any) -> Any:
    """A copy of config data with every API key, header value and URL password masked."""
    if isinstance(data, dict):
        masked: dict[str, Any] = {}
        for key, value in data.items():
            if key == "api_key" and isinstance(value, str):
                masked[key] = mask(value)
            elif key == "base_url" and isinstance(value, str):
                masked[key] = mask_url(value)
            elif key == "url" and isinstance(value, str):  # store.url
                masked[key] = redact(value)
            elif key == "headers" and isinstance(value, dict):
                masked[key] = {name: mask(str(v)) for name, v in value.items()}
            else:
                masked[key] = mask_secrets(value)
        return masked
    if isinstance(data, list):
        return [mask_secrets(item) for item in data]
    return data


def masked_config(config: Config) -> dict[str, Any]:
    """The config as `config show` prints it: the fields set, every secret masked."""
    masked: dict[str, Any] = mask_secrets(config.model_dump(mode="json", exclude_none=True))
    return masked


def masked_value(config: Config, key: str) -> Any:
    """The value at dotted `key` (as `config set` names it), secrets masked; None when the
    config has nothing there. A key or a header value is masked even when it is read
    through a table (`profiles.x`) or its own key (`profiles.x.headers.Authorization`)."""
    node: Any = mask_secrets(config.model_dump(mode="json"))
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if key.endswith("api_key") or ".headers." in key:
        node = mask(str(node))
    return node


def profile_listing(config: Config) -> list[dict[str, Any]]:
    """Every profile by name, as `profile list` shows it: a base URL or a model the
    profile leaves to its preset is the preset's; the key masked, or the variable it
    comes from."""
    rows = []
    for name, profile in sorted(config.profiles.items()):
        preset = preset_named(profile.preset) if profile.preset else None
        rows.append(
            {
                "name": name,
                "default": name == config.default_profile,
                "provider": profile.provider,
                "preset": profile.preset,
                "base_url": mask_url(profile.base_url or (preset.base_url if preset else None)),
                "model": profile.model or (preset.model if preset else None),
                "api_key": mask(profile.api_key)
                or (f"${profile.api_key_env}" if profile.api_key_env else None),
            }
        )
    return rows


def _parse_value(value: str) -> Any:
    """JSON when it parses (numbers, booleans, null, objects), else the plain string."""
    import orjson

    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


@dataclass
class Resolved:
    """The settings of one turn, each with where it came from."""

    provider: str
    model: str
    profile: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    key_env: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    cassette: str | None = None
    context_window: int | None = None
    max_retries: int = 3
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    request_timeout: float = 600.0
    max_reply_bytes: int = 16 * 1024 * 1024
    max_retry_wait: float = 60.0
    prompt_cache_key: bool = False
    cache_ttl: CacheTtl | None = None  # None: 5 minutes
    thinking_budget: int | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The settings with the key and the base URL's password masked, for display."""
        return {
            "provider": self.provider,
            "model": self.model,
            "profile": self.profile,
            "base_url": mask_url(self.base_url),
            "api_key": mask(self.api_key),
            "headers": sorted(self.headers),
            "sources": self.sources,
        }


def _checked_key(key: str, source: str) -> str:
    """Strip the newline an env file or a secret mount leaves; refuse what HTTP cannot carry.

    The error never shows the key itself.
    """
    key = key.strip()
    if not key or any(not ("!" <= char <= "~") for char in key):
        raise UsageError(
            f"the API key from {source} contains spaces or non-ASCII characters and cannot "
            "be sent in an HTTP header (smart quotes from a copy, perhaps?)"
        )
    return key


def _first(*candidates: tuple[str, Any]) -> tuple[Any, str]:
    for source, value in candidates:
        if value not in (None, ""):
            return value, source
    return None, "unset"


def resolve(
    config: Config,
    *,
    session: Session | None = None,
    profile: str | None = None,
    model: str | None = None,
    provider: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Resolved:
    """Work out provider, model, endpoint and key for a turn (see the module docstring)."""
    env = os.environ if env is None else env
    name, name_source = _first(
        ("flag", profile),
        ("AGCTL_PROFILE", env.get("AGCTL_PROFILE")),
        ("session", session.profile if session else None),
        ("config default_profile", config.default_profile),
    )
    chosen = Profile(provider="offline")
    if name is not None:
        if name in config.profiles:
            chosen = config.profiles[name]
        elif (named_preset := preset_named(name)) is not None:
            chosen = Profile(provider=named_preset.provider, preset=name)
        else:
            known = ", ".join(sorted(config.profiles)) or "none"
            raise NotFound(
                f"profile {name!r} not found (profiles: {known}; presets: "
                f"{', '.join(sorted(PRESETS))})"
            )
    preset = preset_named(chosen.preset) if chosen.preset else None
    provider, provider_source = _first(
        ("flag", provider),
        ("AGCTL_PROVIDER", env.get("AGCTL_PROVIDER")),
        ("profile", chosen.provider if name is not None else None),
        ("default", "offline"),
    )
    if provider not in PROVIDERS:
        raise UsageError(f"unknown provider {provider!r}; choose from {', '.join(PROVIDERS)}")
    wire = provider in WIRES
    # No preset and no base URL anywhere means the wire's own service (OpenAI, Anthropic,
    # Google), named by its preset of the same name.
    unaimed = preset is None and chosen.base_url is None and not env.get("AGCTL_BASE_URL")
    implicit = PRESETS[provider] if unaimed and wire else None
    home = f"preset {provider}"
    endpoint = preset or implicit
    chosen_model, model_source = _first(
        ("flag", model),
        ("AGCTL_MODEL", env.get("AGCTL_MODEL")),
        ("session", session.model if session else None),
        ("profile", chosen.model),
        ("preset", endpoint.model if endpoint and wire else None),
        ("default", OFFLINE_MODEL if not wire else None),
    )
    if chosen_model is None:
        raise UsageError(
            f"no model for provider {provider!r}",
            hint="pass --model, set AGCTL_MODEL, or set one in the profile",
        )
    base_variable = BASE_URL_VARIABLES.get(provider)
    base_url, base_source = _first(
        ("AGCTL_BASE_URL", env.get("AGCTL_BASE_URL")),
        ("profile", chosen.base_url),
        ("preset", preset.base_url if preset else None),
        (str(base_variable), env.get(base_variable) if base_variable else None),
        (home, implicit.base_url if implicit else None),
    )
    keys: list[tuple[str, Any]] = [("AGCTL_API_KEY", env.get("AGCTL_API_KEY"))]
    if chosen.api_key_env:
        keys.append((f"${chosen.api_key_env}", env.get(chosen.api_key_env)))
    keys.append(("profile", chosen.api_key))
    own_keys = KEY_VARIABLES.get(provider, ())
    if preset is not None and preset.key_env:
        # A preset of a wire's own service takes any of its variables.
        named: tuple[str, ...] = own_keys if preset.key_env in own_keys else (preset.key_env,)
        keys += [(f"${name}", env.get(name)) for name in named]
    if preset is None and base_source in (base_variable, home):
        # Only toward the wire's own service (or what its base URL variable names): never
        # to another server.
        keys += [(f"${name}", env.get(name)) for name in own_keys]
    api_key, key_source = _first(*keys)
    if api_key is not None:
        api_key = _checked_key(str(api_key), key_source)
    # The variable a key is expected from: the profile's, its preset's, or the service's
    # own (a server named by a base URL variable or AGCTL_BASE_URL may need none).
    key_env = chosen.api_key_env or (preset.key_env if preset is not None else None)
    if key_env is None and base_source == home:
        key_env = own_keys[-1]
    cache_key = chosen.prompt_cache_key
    if cache_key is None:  # OpenAI itself: its preset's URL, or no URL named anywhere
        cache_key = base_url == PRESETS["openai"].base_url
    return Resolved(
        provider=provider,
        model=str(chosen_model),
        profile=name,
        base_url=base_url,
        api_key=api_key or None,
        key_env=key_env,
        headers=dict(chosen.headers),
        cassette=chosen.cassette,
        context_window=chosen.context_window,
        max_retries=config.max_retries,
        connect_timeout=config.connect_timeout,
        read_timeout=config.read_timeout,
        request_timeout=config.request_timeout,
        max_reply_bytes=config.max_reply_bytes,
        max_retry_wait=config.max_retry_wait,
        prompt_cache_key=cache_key,
        cache_ttl=chosen.cache_ttl,
        thinking_budget=chosen.thinking_budget,
        sources={
            "profile": name_source,
            "provider": provider_source,
            "model": model_source,
            "base_url": base_source,
            "api_key": key_source,
        },
    )
