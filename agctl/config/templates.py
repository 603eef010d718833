"""Templates: a system prompt, a prompt with `{{ name }}` parameters, a model, model
options, tools and a slot mode, kept under a name for `turn send -t NAME` and
`session new -t NAME`.

Each is a YAML file, `templates/NAME.yaml` beside the config file (0600 in a 0700 dir):
YAML rather than JSON because a prompt is prose over several lines, which a YAML block
(`prompt: |`) keeps as typed; it is read with PyYAML's safe loader only (no tags, no
objects, no anchors or aliases), so a file is data. A JSON file is YAML too, and is
read the same.

Parameters are plain text substitution, in one pass: `{{ name }}` (spaces optional, a
name of ASCII letters, digits and '_') becomes the value given (`-p NAME VALUE`) or the
template's default; nothing else in the text is touched, a value is never read again
for parameters (a value holding `{{ x }}` stays as it is), and a template can read no
file or environment variable. `input` is the turn's PROMPT: it fills `{{ input }}`
where the template has it, else it follows the template's prompt after a blank line
(a template without a prompt sends the PROMPT as it is).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from agctl.base.errors import (
    Conflict,
    CorruptDocument,
    InvalidId,
    InvalidInput,
    NotFound,
    UsageError,
)
from agctl.base.paths import templates_dir

if TYPE_CHECKING:
    from pydantic import BaseModel

    from agctl.turn.setup import ModelChoice, ToolsChoice

PARAMETER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
# The parameter a turn's PROMPT fills.
INPUT = "input"
SUFFIX = ".yaml"
# Where an edit that did not validate is kept (beside the template, never listed).
REJECTED_SUFFIX = ".yaml.rejected"
# The largest template file read: a prompt, not a corpus.
MAX_TEMPLATE_BYTES = 1024 * 1024
# The order of a template's fields in its file, and in `template show`.
FIELDS = ("system", "prompt", "model", "options", "tools", "defaults", "slot_mode")


def parameters_of(*texts: str | None) -> list[str]:
    """The parameters `texts` use, each once, in the order they first appear."""
    found: dict[str, None] = {}
    for text in texts:
        for match in PARAMETER.finditer(text or ""):
            found.setdefault(match.group(1))
    return list(found)


def substituted(text: str, values: Mapping[str, str]) -> str:
    """`text` with each `{{ name }}` replaced by its value, in one pass."""
    return PARAMETER.sub(lambda match: values[match.group(1)], text)


class Filled(NamedTuple):
    """A template's texts with its parameters filled: what a turn sends."""

    prompt: str
    system: str | None


def _template_model() -> type[BaseModel]:
    """The template document's model, built when a template is first read or written."""
    from typing import Literal

    from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

    from agctl.base.ids import validate_id

    class TemplateDocument(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

        system: str | None = None
        prompt: str | None = None
        model: str | None = Field(default=None, min_length=1)
        options: dict[str, Any] = Field(default_factory=dict)
        tools: list[str] = Field(default_factory=list)
        defaults: dict[str, str] = Field(default_factory=dict)
        # The mode `session new -t` gives the new session's default slot.
        slot_mode: Literal["full", "focused"] | None = None

        @field_validator("defaults", mode="before")
        @classmethod
        def _numbers_as_text(cls, value: Any) -> Any:
            """A default is text; YAML reads `n: 5` as a number, taken as its text."""
            if not isinstance(value, dict):
                return value
            return {
                key: str(item) if type(item) in (int, float) else item
                for key, item in value.items()
            }

        @field_validator("options")
        @classmethod
        def _options_some_wire_takes(cls, options: dict[str, Any]) -> dict[str, Any]:
            from agctl.providers.options import checked_options

            # The wire is known when the template is used; here, any wire's keys.
            try:
                checked_options(options, None)
            except UsageError as exc:
                raise ValueError(f"{exc}; {exc.hint}" if exc.hint else str(exc)) from None
            return dict(sorted(options.items()))

        @field_validator("tools")
        @classmethod
        def _tool_names(cls, tools: list[str]) -> list[str]:
            for name in tools:
                try:
                    validate_id(name, "tool")
                except InvalidId as exc:
                    raise ValueError(str(exc)) from None
            return list(dict.fromkeys(tools))

        @field_validator("system")
        @classmethod
        def _system_without_input(cls, system: str | None) -> str | None:
            if INPUT in parameters_of(system):
                raise ValueError(
                    "the system prompt uses {{ input }}, the turn's PROMPT: a system prompt "
                    "stays the same from turn to turn (the provider's prompt cache keeps it), "
                    "so {{ input }} goes in the prompt"
                )
            return system

        @model_validator(mode="after")
        def _defaults_are_parameters(self) -> TemplateDocument:
            known = parameters_of(self.system, self.prompt)
            unknown = [name for name in self.defaults if name not in known]
            if unknown:
                raise ValueError(
                    f"a default for {', '.join(map(repr, unknown))}, which the system "
                    f"prompt and prompt do not use (parameters: {', '.join(known) or 'none'})"
                )
            if not any(getattr(self, name) for name in FIELDS):
                raise ValueError("an empty template: give a system prompt, a prompt or a model")
            return self

    return TemplateDocument


_MODEL: type[BaseModel] | None = None


def template_model() -> type[BaseModel]:
    global _MODEL
    if _MODEL is None:
        _MODEL = _template_model()
    return _MODEL


class Template:
    """A validated template (its document, a frozen pydantic model, in `doc`)."""

    __slots__ = ("doc", "name")

    def __init__(
        self, fields: Mapping[str, Any], error: Callable[[str], Exception], name: str = ""
    ) -> None:
        """Validate `fields`; a problem is `error(message)` (UsageError for a command
        line's, InvalidInput or CorruptDocument for a file's). `name` is for messages."""
        self.name = name
        from pydantic import ValidationError

        from agctl.base.validation import validation_summary

        try:
            self.doc: Any = template_model().model_validate(dict(fields))
        except ValidationError as exc:
            raise error(f"invalid template: {validation_summary(exc)}") from None

    def __getattr__(self, name: str) -> Any:
        if name in FIELDS:
            return getattr(self.doc, name)
        raise AttributeError(name)

    @property
    def parameters(self) -> list[str]:
        return parameters_of(self.doc.system, self.doc.prompt)

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, in FIELDS order: the file's content."""
        data = self.doc.model_dump()
        return {name: data[name] for name in FIELDS if data[name]}

    def text(self) -> str:
        """The template as its file holds it: readable YAML, a text of several lines as
        a block, keys in FIELDS order."""
        import yaml  # type: ignore[import-untyped]

        class Dumper(yaml.SafeDumper):  # type: ignore[misc]
            pass

        def text_block(dumper: Any, value: str) -> Any:
            style = "|" if "\n" in value and value == value.strip(" ") else None
            return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

        Dumper.add_representer(str, text_block)
        dumped: str = yaml.dump(
            self.to_dict(), Dumper=Dumper, sort_keys=False, allow_unicode=True, width=88
        )
        return dumped

    def _called(self) -> str:
        return f"template {self.name!r}" if self.name else "the template"

    def fill(self, params: Mapping[str, str], input: str = "", *, system: bool = True) -> Filled:
        """The prompt and system prompt with `params` (then the defaults) and `input` (the
        turn's PROMPT, see the module docstring). Without `system` (a turn whose system
        prompt is not the template's) the system prompt is None and its parameters need
        no value. Every parameter needed left without a value, or a parameter given that
        the template lacks, is a UsageError naming them all."""
        doc = self.doc
        needed = parameters_of(doc.system if system else None, doc.prompt)
        values = self._values(needed, params, input)
        prompt = substituted(doc.prompt or "", values)
        if input and INPUT not in values:
            prompt = f"{prompt}\n\n{input}" if prompt else input
        return Filled(prompt, self.filled_system(values) if system else None)

    def filled_system(self, values: Mapping[str, str]) -> str | None:
        """The system prompt with `values`, which must hold each of its parameters."""
        system = self.doc.system
        return substituted(system, values) if system is not None else None

    def _values(self, needed: list[str], params: Mapping[str, str], input: str) -> dict[str, str]:
        """The values of the template's parameters: `params` (any of the system prompt's
        or the prompt's), the defaults, `input`; each of those `needed` must have one."""
        known = self.parameters
        unknown = [name for name in params if name not in known]
        if unknown:
            raise UsageError(
                f"{self._called()} has no parameter {', '.join(map(repr, unknown))} "
                f"(its parameters: {', '.join(known) or 'none'})"
            )
        if input and INPUT in params:
            raise UsageError("give the input as PROMPT or as '-p input VALUE', not both")
        values = {**self.doc.defaults, **params}
        if input and INPUT in known:
            values[INPUT] = input
        missing = [name for name in needed if name not in values]
        if missing:
            raise UsageError(
                f"{self._called()} needs a value for " + ", ".join(missing),
                hint="give each with -p NAME VALUE"
                + (" (input: the PROMPT)" if INPUT in missing else ""),
            )
        return values

    def system_values(self, params: Mapping[str, str], *, used: bool = True) -> dict[str, str]:
        """The values that fill the system prompt (what a session keeps of the template):
        any of the template's parameters may be given; the system prompt's must be, when
        it is `used`."""
        return self._values(parameters_of(self.doc.system) if used else [], params, "")


class AliasRefused(Exception):
    """A YAML anchor or alias in a template (see _no_aliases_loader)."""


def _no_aliases_loader() -> type[Any]:
    """PyYAML's safe loader, refusing anchors and aliases: a template never needs one,
    and aliases nested 9 deep, 10 wide make a 500-byte file a billion nodes to walk."""
    import yaml

    class NoAliasesLoader(yaml.SafeLoader):  # type: ignore[misc]
        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                mark = event.start_mark
                raise AliasRefused(
                    f"a YAML anchor or alias (&NAME, *NAME) at line {mark.line + 1}, "
                    f"column {mark.column + 1}: a template has none; write the text out"
                )
            return super().compose_node(parent, index)

    return NoAliasesLoader


def template_from_text(data: bytes | str, where: str, name: str = "") -> Template:
    """A template read from YAML (or JSON) text; anything else is an InvalidInput saying
    what and where."""
    import yaml

    try:
        loaded = yaml.load(data, Loader=_no_aliases_loader())  # a SafeLoader
    except AliasRefused as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise InvalidInput(f"{where}: not YAML: {problem}") from None
    if not isinstance(loaded, dict):
        raise InvalidInput(f"{where}: a template is a mapping of fields ({', '.join(FIELDS)})")
    return Template(loaded, lambda message: InvalidInput(f"{where}: {message}"), name)


class TemplatedTurn(NamedTuple):
    """A turn's command line with a template applied (see templated_turn)."""

    prompt: str
    choice: ModelChoice
    tools: ToolsChoice
    fields: dict[str, Any]


def templated_turn(
    template: Template,
    params: Mapping[str, str],
    prompt: str,
    choice: ModelChoice,
    tools: ToolsChoice,
    fields: Mapping[str, Any],
    session_system: str | None = None,
) -> TemplatedTurn:
    """What a turn sends with `template`: its filled prompt (`prompt`, the PROMPT typed,
    as its input), its model unless --model, its tools with those named, its options
    under those typed (which win, key by key), and its system prompt unless --system or
    the session's own (`session_system`, e.g. this template's from 'session new -t'):
    a session's system prompt stays byte for byte what it was, turn after turn, as the
    provider's prompt cache needs, and the parameters only it uses need no value."""
    fields = dict(fields)
    uses_system = fields.get("system") is None and not session_system
    filled = template.fill(params, prompt, system=uses_system)
    if uses_system:
        fields["system"] = filled.system
    fields["model_options"] = {**template.options, **(fields.get("model_options") or {})}
    if choice.model is None and template.model is not None:
        choice = choice._replace(model=template.model)
    if template.tools:
        tools = tools._replace(names=tuple(dict.fromkeys([*template.tools, *tools.names])))
    return TemplatedTurn(filled.prompt, choice, tools, fields)


class TemplateChoice(NamedTuple):
    """The template a command line chose, loaded, with its parameters' values (`-p`)."""

    template: Template
    params: dict[str, str]

    @classmethod
    def load(cls, name: str, params: Mapping[str, str]) -> TemplateChoice:
        return cls(Templates().load(name), dict(params))

    def turn(
        self,
        prompt: str,
        choice: ModelChoice,
        tools: ToolsChoice,
        fields: Mapping[str, Any],
        session_system: str | None = None,
    ) -> TemplatedTurn:
        """What a turn sends with it (see templated_turn)."""
        return templated_turn(
            self.template, self.params, prompt, choice, tools, fields, session_system
        )

    def session_settings(self, system: str | None, model: str | None) -> dict[str, Any]:
        """What `session new -t` keeps of it (see session_settings)."""
        return session_settings(self.template, self.params, system, model)


def session_settings(
    template: Template, params: Mapping[str, str], system: str | None, model: str | None
) -> dict[str, Any]:
    """What `session new -t` keeps of `template`: its system prompt (its parameters
    filled) unless `system`, its model unless `model`, and its slot mode for the
    session's `default` slot. Its prompt, options and tools are for turns ('turn send
    -t', which then keeps this system prompt: see templated_turn)."""
    values = template.system_values(params, used=system is None)
    if system is None:
        system = template.filled_system(values)
    return {
        "system_prompt": system,
        "model": model if model is not None else template.model,
        "slot_mode": template.slot_mode,
    }


class Templates:
    """The templates directory: one YAML file a template, named by its template's name."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else templates_dir()

    def path(self, name: str) -> Path:
        from agctl.base.ids import validate_id

        return self.directory / (validate_id(name, "template") + SUFFIX)

    def names(self) -> list[str]:
        """Every template's name, sorted (a file whose name is not a valid one is not a
        template)."""
        from agctl.base.ids import validate_id

        try:
            entries = sorted(entry.name for entry in self.directory.iterdir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise InvalidInput(f"cannot list {self.directory}: {exc.strerror}") from None
        names = []
        for entry in entries:
            name = entry.removesuffix(SUFFIX)
            if entry.endswith(SUFFIX) and not entry.startswith("."):
                try:
                    names.append(validate_id(name, "template"))
                except InvalidId:
                    continue
        return names

    def _read(self, name: str) -> bytes:
        from agctl.base.fsio import read_bytes

        path = self.path(name)
        try:
            data = read_bytes(path, "template", limit=MAX_TEMPLATE_BYTES)
        except NotFound:
            known = ", ".join(self.names()) or "none ('agctl template add NAME')"
            raise NotFound(f"no template named {name!r} (templates: {known})") from None
        if len(data) > MAX_TEMPLATE_BYTES:
            raise CorruptDocument(path, f"larger than {MAX_TEMPLATE_BYTES} bytes")
        return data

    def load(self, name: str) -> Template:
        """The template `name`: NotFound (naming those there are) when there is none,
        CorruptDocument when its file does not hold one."""
        data = self._read(name)
        try:
            return template_from_text(data, str(self.path(name)), name)
        except InvalidInput as exc:
            raise CorruptDocument(self.path(name), str(exc).partition(": ")[2]) from None

    def load_all(self) -> tuple[dict[str, Template], dict[str, str]]:
        """Every template that reads, by name, and why each other one does not (a damaged
        file leaves the others listed)."""
        loaded: dict[str, Template] = {}
        problems: dict[str, str] = {}
        for name in self.names():
            try:
                loaded[name] = self.load(name)
            except (CorruptDocument, NotFound) as exc:  # NotFound: removed meanwhile
                problems[name] = str(exc)
        return loaded, problems

    def add(self, name: str, template: Template, *, replace: bool = False) -> Path:
        """Write `template` as `name` (Conflict if it exists, unless `replace`)."""
        from agctl.base.fsio import make_dirs, write_atomic

        path = self.path(name)
        if path.exists() and not replace:
            raise Conflict(
                f"template {name!r} exists", hint="--replace to replace it, or 'template edit'"
            )
        make_dirs(self.directory)
        write_atomic(path, template.text().encode())
        return path

    def remove(self, name: str) -> None:
        self._read(name)  # NotFound names the others
        self.path(name).unlink()

    def edit(self, name: str, editor: Callable[[Path], None]) -> Template:
        """Let `editor` change a copy of the template's file; a copy that holds a valid
        template replaces it, as written. Else the file is left as it was and the edit
        kept beside it (NAME.yaml.rejected), and the InvalidInput says why and where."""
        import contextlib
        import os
        import tempfile

        from agctl.base.errors import StoreError
        from agctl.base.fsio import read_bytes, write_atomic

        data = self._read(name)
        unchanged = f"template {name!r} is unchanged"
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=f".{name}.", suffix=SUFFIX)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            editor(Path(temp))
            try:  # the editor may have removed it, or left a link or a directory there
                edited = read_bytes(Path(temp), "the edit", limit=MAX_TEMPLATE_BYTES)
            except (NotFound, CorruptDocument, StoreError) as exc:
                raise InvalidInput(f"{exc}: {unchanged}") from None
            try:
                if len(edited) > MAX_TEMPLATE_BYTES:
                    raise InvalidInput(f"the edit: larger than {MAX_TEMPLATE_BYTES} bytes")
                template = template_from_text(edited, "the edit", name)
            except InvalidInput as exc:
                kept = self.directory / (name + REJECTED_SUFFIX)
                try:
                    os.replace(temp, kept)
                    hint = f"your edit is kept in {kept}"
                except OSError as failed:  # e.g. a directory there
                    hint = f"your edit could not be kept in {kept}: {failed.strerror}"
                raise InvalidInput(f"{exc}: {unchanged}", hint=hint) from None
            if edited != data:
                write_atomic(self.path(name), edited)
            return template
        finally:
            with contextlib.suppress(OSError):  # gone, or a directory the editor left
                os.unlink(temp)


def editor_command(chosen: str | None = None) -> list[str]:
    """The editor's argv: `chosen`, else $VISUAL, else $EDITOR, else vi (as git finds one),
    split as a shell would split it (no shell runs it)."""
    import os
    import shlex

    if chosen is None:
        chosen = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        words = shlex.split(chosen)
    except ValueError as exc:
        raise UsageError(f"cannot read the editor command {chosen!r}: {exc}") from None
    if not words:
        raise UsageError("the editor command is empty")
    return words


def run_editor(path: Path, chosen: str | None = None) -> None:
    """Run the editor (see editor_command) on `path` and wait for it; one that cannot
    start, or exits with a failure, is a UsageError (the template is left as it was)."""
    import subprocess

    argv = [*editor_command(chosen), str(path)]
    try:
        status = subprocess.run(argv, check=False).returncode
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the command
        problem = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise UsageError(f"cannot run the editor {argv[0]!r}: {problem}") from None
    if status != 0:
        raise UsageError(f"the editor {argv[0]!r} exited with {status}: nothing changed")
