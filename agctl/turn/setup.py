"""Everything a model call needs, resolved once: config, settings, window, provider, options.

Shared by turns, replays, compression, summaries and merges, from the CLI or a script.
What a command line chose for a turn (TurnChoice) becomes, in one call (plan_turn),
what send_turn and replay take: the options, with the tools and hooks, and the provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from agctl.base.vocab import ApproveMode
    from agctl.config.file import Config, Resolved
    from agctl.config.specs import ToolSpec
    from agctl.providers.base import Provider
    from agctl.store import Store
    from agctl.turn.hooks import Hooks
    from agctl.turn.mcp import McpTools
    from agctl.turn.send import TurnOptions
    from agctl.turn.steps import ToolBox
    from agctl.turn.tools import Answer, AskFn


class ModelChoice(NamedTuple):
    """What a caller chose for a model call, each None when not chosen: the settings that
    override the session's (profile, model, provider kind) and where replies come from
    (`script` for the scripted offline provider, `cassette` for the replay one)."""

    profile: str | None = None
    model: str | None = None
    provider: str | None = None
    script: Path | None = None
    cassette: Path | None = None


class ToolsChoice(NamedTuple):
    """Which tools a turn offers (`names`, or `every` one defined) and how their calls
    are answered: with a cassette, from its recordings unless `live`; `approve` is the
    --approve mode (auto: run without asking; never: deny every call)."""

    names: tuple[str, ...] = ()
    every: bool = False
    live: bool = False
    tools_file: Path | None = None
    approve: ApproveMode | None = None

    @property
    def chosen(self) -> bool:
        return self.every or bool(self.names)


# The fields of TurnOptions that limit a turn's tool loop (TurnChoice.loop).
TOOL_LOOP_FIELDS = (
    "tool_choice",
    "max_steps",
    "tool_jobs",
    "max_calls_per_reply",
    "max_calls_per_turn",
)


class TurnChoice:
    """What a command line chose for the turns it sends: the model and where its replies
    come from, the tools offered and the limits of their `loop` (TOOL_LOOP_FIELDS; a
    limit of calls None or left out is the config's), the cassette `record` appends every
    request and answer to, and `no_hooks` (--no-hooks). A plain class, as is TurnPlan:
    a NamedTuple's fields cost ~0.2M instructions each to define, and every turn imports
    this module."""

    __slots__ = ("loop", "model", "no_hooks", "record", "tools")

    def __init__(
        self,
        model: ModelChoice | None = None,
        tools: ToolsChoice | None = None,
        loop: Mapping[str, Any] | None = None,
        record: Path | None = None,
        no_hooks: bool = False,
    ) -> None:
        self.model = model if model is not None else ModelChoice()
        self.tools = tools if tools is not None else ToolsChoice()
        self.loop = dict(loop or {})
        self.record = record
        self.no_hooks = no_hooks


class ModelSetup(NamedTuple):
    """The config, the resolved settings and the model's window for one session."""

    config: Config
    settings: Resolved
    window: int
    script: Path | None = None
    cassette: Path | None = None

    @classmethod
    def resolve(
        cls,
        store: Store | None,
        session_id: str,
        *,
        profile: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        script: Path | None = None,
        cassette: Path | None = None,
        config: Config | None = None,
    ) -> ModelSetup:
        """Settings by precedence (flag > env > session > profile > preset > default);
        `cassette` means the replay provider, `script` the scripted offline one. With no
        `store`, no session has a say (an evaluation's throwaway sessions)."""
        from agctl.config.file import ConfigFile, resolve
        from agctl.context.budget import context_window

        config = config if config is not None else ConfigFile().load()
        session = store.load_session(session_id) if store is not None else None
        settings = resolve(config, session=session, profile=profile, model=model, provider=provider)
        if cassette is not None:
            settings.provider = "replay"
        elif script is not None:
            settings.provider = "offline"
        window = settings.context_window or context_window(settings.model, config.context_windows)
        return cls(config, settings, window, script, cassette)

    @classmethod
    def chosen(
        cls,
        store: Store | None,
        session_id: str,
        choice: ModelChoice,
        *,
        config: Config | None = None,
    ) -> ModelSetup:
        """`resolve` with what a command line chose, given as one value."""
        return cls.resolve(
            store,
            session_id,
            profile=choice.profile,
            model=choice.model,
            provider=choice.provider,
            script=choice.script,
            cassette=choice.cassette,
            config=config,
        )

    def provider(self, record: Path | None = None) -> Provider:
        from agctl.providers import build_provider

        return build_provider(
            self.settings, script=self.script, cassette=self.cassette, record=record
        )

    def offered_specs(
        self, chosen: ToolsChoice, mcp: McpTools | None = None
    ) -> dict[str, ToolSpec]:
        """The tools `chosen` offers, by name in the order named (every one defined for
        `every`, an MCP server's after the argv tools); a name SERVER__TOOL of a configured
        MCP server is that server's tool, from `mcp`; a name found nowhere is NotFound,
        naming the tools there are."""
        return self._offered(chosen, mcp)[0]

    def _offered(
        self, chosen: ToolsChoice, mcp: McpTools | None
    ) -> tuple[dict[str, ToolSpec], set[str]]:
        """`offered_specs`, and the names of those an MCP server runs: a name defined as
        an argv tool too (`tool add` refuses one, a tools file may not) is the argv tool,
        offered and run alike."""
        from agctl.base.errors import NotFound
        from agctl.turn.tools import tool_registry

        registry = tool_registry(self.config, self.settings.profile, chosen.tools_file)
        if chosen.every:
            every = mcp.every_spec() if mcp is not None else {}
            served_specs = {name: spec for name, spec in every.items() if name not in registry}
            return {**registry, **served_specs}, set(served_specs)
        served = [
            n for n in chosen.names if n not in registry and mcp is not None and mcp.serves(n)
        ]
        missing = [name for name in chosen.names if name not in registry and name not in served]
        if missing:
            known = ", ".join(sorted(registry)) or "none is defined ('agctl tool add')"
            servers = ", ".join(sorted(self.config.mcp_servers))
            hint = f"an MCP server's tool is SERVER__TOOL (servers: {servers})" if servers else None
            raise NotFound(f"no tool named {', '.join(missing)} (tools: {known})", hint=hint)
        specs = {
            name: registry[name] if name in registry else self._served(mcp, name)
            for name in dict.fromkeys(chosen.names)
        }
        return specs, set(served)

    def offered_specs_now(self, chosen: ToolsChoice) -> dict[str, ToolSpec]:
        """`offered_specs` with the MCP servers' tools as they list them now (or as the
        cassette recorded them), every server closed after: what a turn would offer."""
        mcp = self._mcp_tools(chosen, replaying=self.cassette is not None and not chosen.live)
        try:
            return self.offered_specs(chosen, mcp)
        finally:
            if mcp is not None:
                mcp.close()

    @staticmethod
    def _served(mcp: McpTools | None, name: str) -> ToolSpec:
        assert mcp is not None
        return mcp.spec(name)

    def toolbox(
        self,
        chosen: ToolsChoice,
        *,
        record: Path | None = None,
        data_dir: Path | None = None,
        ask: AskFn | None = None,
        hooks: Hooks | None = None,
        answers: Mapping[str, Answer] | None = None,
    ) -> ToolBox | None:
        """What answers a turn's tool calls: None when no tool is offered; the cassette's
        recordings when replies come from one (unless `chosen.live`), an MCP server's tools
        defined as the cassette's requests offered them; else the tools themselves
        (`answers`: by call id, given in advance), an MCP server's on a connection that
        ends with the turn, each answer also appended to `record` when recording."""
        if not chosen.chosen:
            if chosen.live or chosen.approve is not None or answers:
                from agctl.base.errors import UsageError

                raise UsageError("no tool is offered: name one with -T/--tool, or --tools all")
            return None
        from agctl.providers.cassette import CassetteTools, RecordingTools
        from agctl.turn.tools import LiveTools, definitions

        replaying = self.cassette is not None and not chosen.live
        mcp = self._mcp_tools(chosen, replaying)
        try:
            specs, served = self._offered(chosen, mcp)
        except BaseException:
            if mcp is not None:
                mcp.close()  # what a toolbox never made had opened
            raise
        if replaying:
            assert self.cassette is not None
            return CassetteTools(self.cassette, definitions(specs.values()))
        from agctl.turn.mcp import McpClient

        client = mcp if isinstance(mcp, McpClient) else None
        live = LiveTools(
            specs,
            approve=chosen.approve,
            ask=ask,
            data_dir=data_dir,
            hooks=hooks,
            answers=answers,
            mcp=client,
            served=served,
        )
        return RecordingTools(live, record) if record is not None else live

    def _mcp_tools(self, chosen: ToolsChoice, replaying: bool) -> McpTools | None:
        """Where the MCP tools `chosen` names come from (None: no server is configured,
        and no cassette is replayed, which may offer those of servers configured nowhere)."""
        from agctl.turn.mcp import mcp_tools, servers_in_use

        in_use = servers_in_use(self.config)
        if not in_use.servers and not replaying:
            return None
        return mcp_tools(in_use, cassette=self.cassette if replaying else None)

    def hooks(self, cwd: Path | None = None, *, no_hooks: bool = False) -> Hooks | None:
        """The hooks of this setup's config and profile and of the project in `cwd`
        (default: where agctl runs); None when there are none to run (agctl.turn.hooks is
        not even loaded then)."""
        return command_hooks(self.config, self.settings.profile, cwd, no_hooks=no_hooks)

    def turn_options(self, *, checkpoint: bool | None = None, **fields: Any) -> TurnOptions:
        """Turn options from the config (prices, checkpoints, window, compression, the
        limits of tool calls a field leaves None) and `fields` (slot, temperature,
        max_tokens, system, scratch, stream, ...); `model_options` (a mapping of KEY to
        VALUE) checked against the wire of the provider in use."""
        from agctl.turn.send import TurnOptions

        config = self.config
        for limit in ("max_calls_per_reply", "max_calls_per_turn"):
            if fields.get(limit) is None:
                fields[limit] = getattr(config, limit)
        if "model_options" in fields:
            from agctl.providers.options import checked_options

            fields["model_options"] = checked_options(
                dict(fields["model_options"]), self.settings.provider
            )
        return TurnOptions(
            model=self.settings.model,
            prices=config.price_overrides(),
            checkpoint=config.auto_checkpoint if checkpoint is None else checkpoint,
            window=self.window,
            auto_compress=config.auto_compress,
            keep_recent=config.compress_keep_recent,
            fail_on_loss=config.fail_on_loss(),
            **fields,
        )


class TurnPlan:
    """A turn assembled from what its command line chose: the setup (which provider, at
    which URL) and the options send_turn and replay take, the tools and hooks in them."""

    __slots__ = ("options", "record", "setup")

    def __init__(self, setup: ModelSetup, options: TurnOptions, record: Path | None) -> None:
        self.setup = setup
        self.options = options
        self.record = record

    def provider(self) -> Provider:
        """The provider the turns are sent to, built when they are (it may refuse: a
        missing key, a missing cassette), appending to the `record` cassette if any."""
        return self.setup.provider(record=self.record)

    def request(self, store: Store, session_id: str, prompt: str) -> dict[str, Any]:
        """What a dry run shows: the exact request this turn would send, and where."""
        import orjson

        from agctl.base.redact import mask_url
        from agctl.providers import wire_for
        from agctl.turn.send import prepare_turn

        prepared = prepare_turn(store, session_id, prompt, self.options)
        settings = self.setup.settings
        request = prepared.request
        wire = wire_for(settings)
        url = body = None
        if wire is not None:
            body = orjson.loads(wire.body(request))  # the bytes the wire would send
            if settings.base_url:
                url = mask_url(wire.url(settings.base_url, request))
        return {
            "provider": settings.provider,
            "url": url,
            "slot": prepared.slot.id,
            "turn": request.context.turn,
            "tokens": prepared.tokens,
            "request": request.payload() if body is None else body,
        }


def plan_turn(
    store: Store,
    session_id: str | None,
    chosen: TurnChoice,
    *,
    dry_run: bool = False,
    ask: Callable[[], AskFn | None] | None = None,
    answers: Mapping[str, Answer] | None = None,
    **fields: Any,
) -> TurnPlan:
    """The one place a turn is assembled: the session's settings with what was chosen,
    the hooks (none for a `dry_run`, which fires nothing), the tools (`ask` makes the
    question a tool set to ask puts, when a tool is offered; `answers`: by call id,
    given in advance) and the options (`fields`: slot, temperature, on_call, ...). No
    `session_id`: as for a session yet to start, with no settings of its own."""
    if session_id is None:
        setup = ModelSetup.chosen(None, "", chosen.model)
    else:
        setup = ModelSetup.chosen(store, session_id, chosen.model)
    hooks = None if dry_run else setup.hooks(no_hooks=chosen.no_hooks)
    asks = ask() if ask is not None and chosen.tools.chosen and not dry_run else None
    toolbox = setup.toolbox(
        chosen.tools,
        record=chosen.record,
        data_dir=store.local_dir,
        ask=asks,
        hooks=hooks,
        answers=answers,
    )
    options = setup.turn_options(tools=toolbox, hooks=hooks, **chosen.loop, **fields)
    return TurnPlan(setup, options, chosen.record)


def command_hooks(
    config: Config, profile: str | None, cwd: Path | None = None, *, no_hooks: bool = False
) -> Hooks | None:
    """A command's hooks (agctl.turn.hooks.Hooks), or None when it has none to run: no hook in
    the config or the profile, and no project file in `cwd` (cheap: one stat)."""
    import os

    from agctl.config.file import PROJECT_HOOKS_FILE

    where = Path.cwd() if cwd is None else cwd
    chosen = config.profiles.get(profile) if profile else None
    configured = bool(config.hooks) or bool(chosen is not None and chosen.hooks)
    if not configured and not os.path.lexists(where / PROJECT_HOOKS_FILE):
        return None
    from agctl.turn.hooks import Hooks

    found = Hooks(config, profile, where, no_hooks=no_hooks)
    return found if found else None


def hooks_in_use(cwd: Path | None = None, *, no_hooks: bool = False) -> Hooks | None:
    """The hooks of a command that calls no model (rollback, fork): the config's, the
    profile in use's (agctl.turn.hooks.profile_in_use), the project's in `cwd`; None when
    there are none to run."""
    from agctl.config.file import ConfigFile
    from agctl.turn.hooks import profile_in_use

    config = ConfigFile().load()
    return command_hooks(config, profile_in_use(config), cwd, no_hooks=no_hooks)
