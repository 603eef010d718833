"""agctl's vocabulary: every closed list of names, defined once for the library and the CLI.

Standard library only: the CLI imports it on the `--help` and TAB-completion path. Each
list is a `Literal` type (for pydantic models and mypy) and the tuple of its values
(`typing.get_args`), in the order the CLI offers them; nothing else re-declares either
(tests/lib/test_vocab.py scans the package).
"""

from __future__ import annotations

from typing import Literal, NamedTuple, get_args

# The roles a stored message can have.
Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = get_args(Role)
# OpenAI's newer name for the system role: accepted on input, stored as "system".
DEVELOPER_ROLE = "developer"

# What a slot shows the model: everything, a focused window, or everything, frozen.
SlotMode = Literal["full", "focused", "readonly"]
SLOT_MODES: tuple[SlotMode, ...] = get_args(SlotMode)
# How `slot derive` starts a child slot.
DeriveStrategy = Literal["full", "focused"]
DERIVE_STRATEGIES: tuple[DeriveStrategy, ...] = get_args(DeriveStrategy)
# How `slot merge` brings a slot's new messages into another.
MergeStrategy = Literal["append", "summary"]
MERGE_STRATEGIES: tuple[MergeStrategy, ...] = get_args(MergeStrategy)
# How `ctx compress` shrinks a slot's history: a summary of the folded messages (one
# paragraph), a rolling summary in sections, an extract of their sentences, or nothing.
CompressStrategy = Literal["summarize", "rolling", "extractive", "truncate"]
COMPRESS_STRATEGIES: tuple[CompressStrategy, ...] = get_args(CompressStrategy)
# The zones of a slot, in the order a view, a walk and a checkpoint read them.
Zone = Literal["immutable", "compressed", "messages"]
ZONES: tuple[Zone, ...] = get_args(Zone)

# The provider kinds a profile or `--provider` can name.
ProviderName = Literal["openai", "anthropic", "gemini", "offline", "replay"]
PROVIDERS: tuple[ProviderName, ...] = get_args(ProviderName)
# Those that send requests over HTTP, each in its own wire format (agctl.providers.wire).
WIRES: tuple[ProviderName, ...] = ("openai", "anthropic", "gemini")
# The variables a wire's own service reads its key from, first found first (Google's SDK
# prefers GOOGLE_API_KEY when both are set), and the one its base URL may come from.
KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
}
BASE_URL_VARIABLES: dict[str, str] = {
    "openai": "OPENAI_BASE_URL",
    "anthropic": "ANTHROPIC_BASE_URL",
}
# How long a cache entry an Anthropic breakpoint writes is kept: a profile setting.
CacheTtl = Literal["5m", "1h"]
CACHE_TTLS: tuple[CacheTtl, ...] = get_args(CacheTtl)
# How `turn replay --check` compares a reply with the recorded one.
CheckMode = Literal["exact", "contains", "regex", "schema"]
CHECK_MODES: tuple[CheckMode, ...] = get_args(CheckMode)
# How `eval compaction` checks a probe's answer: the whole answer, the answer holding the
# expected text, or a judge model's verdict.
ProbeMatch = Literal["exact", "contains", "judge"]
PROBE_MATCHES: tuple[ProbeMatch, ...] = get_args(ProbeMatch)
# What `msg import` reads and `msg export` writes.
ImportFormat = Literal["auto", "openai", "jsonl"]
IMPORT_FORMATS: tuple[ImportFormat, ...] = get_args(ImportFormat)
ExportFormat = Literal["openai", "jsonl", "markdown", "text"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)
# How a tool gets its arguments: one JSON document on stdin, environment variables, or
# the JSON as its last argv element.
ToolArgsMode = Literal["stdin", "env", "argv"]
TOOL_ARGS_MODES: tuple[ToolArgsMode, ...] = get_args(ToolArgsMode)
# Whether a model's call of a tool runs without asking, after asking, or never.
ToolApproval = Literal["auto", "ask", "deny"]
TOOL_APPROVALS: tuple[ToolApproval, ...] = get_args(ToolApproval)
# `--approve` of a command that runs tools: run "ask" tools without asking, or run none.
ApproveMode = Literal["auto", "never"]
APPROVE_MODES: tuple[ApproveMode, ...] = get_args(ApproveMode)
# turn send --tools: offer every tool defined; answer calls live despite a cassette.
ToolsMode = Literal["all", "live"]
TOOLS_MODES: tuple[ToolsMode, ...] = get_args(ToolsMode)
# ctx show --tools: count every tool defined.
ToolsCounted = Literal["all"]
TOOLS_COUNTED: tuple[ToolsCounted, ...] = get_args(ToolsCounted)


class Preset(NamedTuple):
    """A known service: usable as a profile name with no configuration. Its wire is
    `provider`'s (most speak OpenAI's)."""

    base_url: str
    key_env: str | None
    model: str | None
    provider: ProviderName = "openai"


PRESETS: dict[str, Preset] = {
    "openai": Preset("https://api.openai.com/v1", "OPENAI_API_KEY", "gpt-4o-mini"),
    "deepseek": Preset("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY", "deepseek-chat"),
    "zhipu": Preset("https://open.bigmodel.cn/api/paas/v4", "ZHIPUAI_API_KEY", "glm-4-flash"),
    "ollama": Preset("http://localhost:11434/v1", None, "llama3.2"),
    "vllm": Preset("http://localhost:8000/v1", None, None),
    "llamacpp": Preset("http://localhost:8080/v1", None, None),
    "lmstudio": Preset("http://localhost:1234/v1", None, None),
    "openrouter": Preset(
        "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY", "openai/gpt-4o-mini"
    ),
    "anthropic": Preset(
        "https://api.anthropic.com", "ANTHROPIC_API_KEY", "claude-sonnet-4-5", "anthropic"
    ),
    "gemini": Preset(
        "https://generativelanguage.googleapis.com", "GEMINI_API_KEY", "gemini-2.5-flash", "gemini"
    ),
}
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)
PRESET_ALIASES = {
    "llama.cpp": "llamacpp",
    "lm-studio": "lmstudio",
    "glm": "zhipu",
    "claude": "anthropic",
    "google": "gemini",
}

# What `session set KEY` and `Store.update_session` may change.
SessionSetting = Literal[
    "title", "system_prompt", "profile", "model", "memory_in_context", "auto_compress"
]
SESSION_SETTINGS: tuple[SessionSetting, ...] = get_args(SessionSetting)
# What `slot set KEY` and `Store.update_slot` may change.
SlotSetting = Literal["auto_compress", "budget", "summary_template", "clear_tool_results"]
SLOT_SETTINGS: tuple[SlotSetting, ...] = get_args(SlotSetting)
# What `config set KEY` accepts; MODEL and NAME stand for any model or profile name.
CONFIG_KEYS: tuple[str, ...] = (
    "default_profile",
    "auto_checkpoint",
    "auto_compress",
    "compress_keep_recent",
    "compress_min_tokens",
    "compress_fail_on_loss",
    "context_windows.MODEL",
    "max_retries",
    "connect_timeout",
    "read_timeout",
    "request_timeout",
    "max_reply_bytes",
    "max_retry_wait",
    "lock_timeout",
    "max_calls_per_reply",
    "max_calls_per_turn",
    "store.url",
    "store.schema",
    "store.shared_schema_owner",
    "store.connect_patience",
    "prices.MODEL",
    "profiles.NAME",
    "tools.NAME",
    "mcp_servers.NAME",
    "hooks",
    "trusted_hook_files",
)

# The documents `agctl schema NAME` describes.
SchemaName = Literal[
    "session",
    "slot",
    "message",
    "checkpoint",
    "cassette",
    "transcript",
    "export",
    "graph",
    "config",
]
SCHEMA_NAMES: tuple[SchemaName, ...] = get_args(SchemaName)
# What `session export` writes: the whole session as JSON (for `session import`), or one
# slot's conversation as an HTML page.
SessionExportFormat = Literal["json", "html"]
SESSION_EXPORT_FORMATS: tuple[SessionExportFormat, ...] = get_args(SessionExportFormat)
# What `session graph` draws: text lanes, Mermaid, Graphviz DOT, one HTML page, the model.
GraphFormat = Literal["text", "mermaid", "dot", "html", "json"]
GRAPH_FORMATS: tuple[GraphFormat, ...] = get_args(GraphFormat)


# How `turn replay` makes its turns durable: each as it commits, or all at the end.
SyncMode = Literal["per-turn", "end"]
SYNC_MODES: tuple[SyncMode, ...] = get_args(SyncMode)

# The events a hook can be attached to, in the order a turn meets them.
HookEvent = Literal[
    "TurnStart",
    "PreToolUse",
    "PostToolUse",
    "PreCompress",
    "PostCompress",
    "TurnEnd",
    "TurnError",
    "PostRollback",
    "PostFork",
]
HOOK_EVENTS: tuple[HookEvent, ...] = get_args(HookEvent)
# What a hook's failure (an exit other than 0 and 2, a timeout, bad output) does.
HookOnError = Literal["block", "warn"]
HOOK_ON_ERRORS: tuple[HookOnError, ...] = get_args(HookOnError)
# What a PreToolUse hook decides about a tool call.
HookDecision = Literal["allow", "ask", "deny"]
HOOK_DECISIONS: tuple[HookDecision, ...] = get_args(HookDecision)
# How one hook run ended: it let the event go on, blocked it (exit 2), or failed (and its
# on_error blocked the event, or only warned).
HookRunOutcome = Literal["proceed", "blocked", "failed", "warned"]
HOOK_RUN_OUTCOMES: tuple[HookRunOutcome, ...] = get_args(HookRunOutcome)
# Where a hook is configured: the user config, a profile, or a project's hooks file.
HookSource = Literal["config", "profile", "project"]
HOOK_SOURCES: tuple[HookSource, ...] = get_args(HookSource)
# What a project's hooks file is to agctl: missing, trusted (its sha256 pinned), not yet
# trusted, changed since it was pinned, or unreadable. Only a trusted file's hooks run.
HookFileState = Literal["absent", "trusted", "untrusted", "changed", "invalid"]
HOOK_FILE_STATES: tuple[HookFileState, ...] = get_args(HookFileState)
