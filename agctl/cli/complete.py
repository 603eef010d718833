"""Live values for shell completion: session ids, slot names, checkpoint ids, profiles,
models.

Every TAB re-runs the CLI, so for a file store these read only directory listings and
small files, with the standard library's json: no pydantic, no httpx, no agctl.store. A
store elsewhere (PostgreSQL: --store, AGCTL_STORE or the config's store.url) has no files
to read: its sessions, slots and drafts come from its tables through psycopg alone
(agctl.storage.postgres.listing), its checkpoints through its backend (slower: the core
and a connection).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agctl.storage.file import layout

if TYPE_CHECKING:
    from collections.abc import Callable

    from click.shell_completion import CompletionItem

    from agctl.storage.factory import StoreChoice
    from agctl.storage.postgres.listing import Listing
    from agctl.store import Store


def _given(ctx: click.Context, name: str) -> Any:
    """A global option's value wherever it was given (the global options write into the
    App object the contexts share)."""
    here: click.Context | None = ctx
    while here is not None:
        value = getattr(here.obj, name, None)
        if value is not None:
            return value
        here = here.parent
    return None


def store_choice(ctx: click.Context) -> StoreChoice | None:
    """The store the command line being completed uses (--store anywhere, AGCTL_STORE, the
    config's store.url, else the data dir: --data-dir anywhere, AGCTL_DATA_DIR, the
    platform's); None when what names it is not a store. Chosen once a TAB."""
    from agctl.base.errors import AgctlError
    from agctl.storage.factory import choose_store

    if "agctl.store_choice" not in ctx.meta:  # shared by every context of the command line
        try:
            choice: StoreChoice | None = choose_store(
                _given(ctx, "store_arg"),
                origin=_given(ctx, "store_origin") or "--store",
                data_dir=_given(ctx, "data_dir"),
                config=_store_config(ctx),
            )
        except AgctlError:
            choice = None
        ctx.meta["agctl.store_choice"] = choice
    found: StoreChoice | None = ctx.meta["agctl.store_choice"]
    return found


def data_dir(ctx: click.Context) -> Path | None:
    """The directory of the file store the command line uses; None for another store."""
    choice = store_choice(ctx)
    return None if choice is None else choice.spec.path


def _elsewhere(ctx: click.Context) -> bool:
    """Whether the store is not a file store (its values come through its backend)."""
    choice = store_choice(ctx)
    return choice is not None and choice.spec.path is None


def backend_store(ctx: click.Context) -> Store | None:
    """The store the command line uses when it is not a file store, opened once a TAB;
    None for a file store, or when it cannot be opened."""
    if not _elsewhere(ctx):
        return None
    if "agctl.backend_store" not in ctx.meta:
        from agctl.store import Store

        try:
            store: Store | None = Store(choice=store_choice(ctx), patient=False)
        except Exception:  # a missing driver, a server down: a TAB offers nothing, quietly
            store = None
        ctx.meta["agctl.backend_store"] = store
    opened: Store | None = ctx.meta["agctl.backend_store"]
    return opened


T = TypeVar("T")
S = TypeVar("S", "Store", "Listing")


def _in_selected(
    ctx: click.Context, source: S | None, read: Callable[[S, str], list[T]]
) -> list[T]:
    """`read(source, session)` for the session the command line selects (-s, else this
    machine's `session use`), from a store that is not a file store (its backend or its
    tables); nothing when it cannot be read. The source is closed after (a TAB's
    contexts never are: its connections are released now)."""
    if source is None:
        return []
    try:
        wanted = _given(ctx, "session_arg") or source.current_session_id()
        sid = _pick(wanted, source.session_ids()) if wanted else None
        return [] if sid is None else read(source, sid)
    except Exception:  # as above: a TAB never shows a traceback
        return []
    finally:
        source.close()


def _from_backend(ctx: click.Context, read: Callable[[Store, str], list[T]]) -> list[T]:
    """`read(store, session)` for the selected session, through the store's backend."""
    return _in_selected(ctx, backend_store(ctx), read)


def _listing(ctx: click.Context) -> Listing | None:
    """A connection for the lists of a PostgreSQL store (one attempt); None for another
    store, or when it cannot be reached (a TAB offers nothing, quietly)."""
    choice = store_choice(ctx)
    if choice is None or choice.spec.kind != "postgres" or choice.spec.dsn is None:
        return None
    try:
        from agctl.storage.postgres.listing import Listing

        return Listing(choice.spec.dsn, choice.schema, choice.local_dir)
    except Exception:  # no psycopg, a server down, a bad URL: nothing to offer
        return None


def _listed(ctx: click.Context, read: Callable[[Listing, str], list[str]]) -> list[str]:
    """`read(listing, session)` for the selected session, from a PostgreSQL store's tables."""
    return _in_selected(ctx, _listing(ctx), read)


def _pick(wanted: str, ids: list[str]) -> str | None:
    """`wanted` among `ids`, or the one id it is a unique prefix of."""
    if wanted in ids:
        return wanted
    matches = [sid for sid in ids if sid.startswith(wanted)]
    return matches[0] if len(matches) == 1 else None


def _open_regular(path: Path, *, follow: bool = False) -> Any:
    """A regular file opened for reading, never blocking on a FIFO (a TAB must not hang)
    and, unless `follow` (the user's config), never through a link; else OSError."""
    import stat

    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return os.fdopen(fd, "rb")


def _read_json(path: Path, *, follow: bool = False) -> Any:
    import json

    try:
        with _open_regular(path, follow=follow) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _session_ids(root: Path) -> list[str]:
    try:
        names = os.listdir(layout.sessions_dir(root))
    except OSError:
        return []
    return sorted(n for n in names if not n.startswith("."))


def selected_session_dir(ctx: click.Context) -> Path | None:
    """The directory of the session the command line selects in a file store, if it
    selects one: -s (here or globally), AGCTL_SESSION, `use`."""
    root = data_dir(ctx)
    if root is None:
        return None
    wanted = _given(ctx, "session_arg")  # set by a command's own -s too
    if not wanted:
        try:
            with _open_regular(layout.current_pointer(root)) as handle:
                wanted = handle.read().decode("utf-8", "replace").strip()
        except OSError:
            return None
    sid = _pick(str(wanted), _session_ids(root))
    return None if sid is None else layout.session_dir(root, sid)


def _about(title: object, system_prompt: object) -> str | None:
    """A session's description: its title, else its system prompt, on one short line."""
    return " ".join(str(title or system_prompt or "").split())[:60] or None


def complete_sessions(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Session ids, described by their title or system prompt."""
    from click.shell_completion import CompletionItem

    root = data_dir(ctx)
    if root is None:
        return _backend_sessions(ctx, incomplete)
    items = []
    for sid in _session_ids(root):
        if not sid.startswith(incomplete):
            continue
        document = _read_json(layout.session_document(layout.session_dir(root, sid))) or {}
        about = _about(document.get("title"), document.get("system_prompt"))
        items.append(CompletionItem(sid, help=about))
    return items


def _backend_sessions(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    from click.shell_completion import CompletionItem

    listing = _listing(ctx)
    if listing is None:
        return []
    try:
        sessions = listing.sessions()
    except Exception:  # a TAB never shows a traceback
        return []
    finally:
        listing.close()
    return [
        CompletionItem(sid, help=_about(doc.get("title"), doc.get("system_prompt")))
        for sid, doc in sessions
        if sid.startswith(incomplete)
    ]


def _document_ids(folder: Path) -> list[str]:
    """The ids of the documents in one of a session's folders (none if it cannot be read)."""
    try:
        return layout.document_ids(os.listdir(folder))
    except OSError:
        return []


def complete_slots(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Slot names of the selected session."""
    from click.shell_completion import CompletionItem

    if _elsewhere(ctx):
        slots = _listed(ctx, lambda listing, sid: listing.slot_ids(sid))
    else:
        directory = selected_session_dir(ctx)
        if directory is None:
            return []
        slots = _document_ids(layout.slots_dir(directory))
    return [CompletionItem(name) for name in slots if name.startswith(incomplete)]


def complete_draft_slots(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Slots of the selected session that have a draft (a removed slot's included)."""
    from click.shell_completion import CompletionItem

    if _elsewhere(ctx):
        drafts = _listed(ctx, lambda listing, sid: listing.draft_slots(sid))
        return [CompletionItem(name) for name in sorted(drafts) if name.startswith(incomplete)]
    directory = selected_session_dir(ctx)
    if directory is None:
        return []
    slots = set(_document_ids(layout.drafts_dir(directory)))
    legacy = _read_json(layout.legacy_draft(directory))  # not adopted yet (see Store)
    if isinstance(legacy, dict) and isinstance(legacy.get("slot"), str):
        slots.add(legacy["slot"])
    return [CompletionItem(name) for name in sorted(slots) if name.startswith(incomplete)]


def complete_checkpoints(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Checkpoint ids of the selected session, newest first, described by turn and label."""
    import json

    found: dict[str, str] = {}
    if _elsewhere(ctx):
        found = dict(_from_backend(ctx, _checkpoints))
        return _checkpoint_items(found, incomplete)
    directory = selected_session_dir(ctx)
    if directory is None:
        return []
    removed = set(_read_json(layout.removed_checkpoints(directory)) or [])
    try:
        with _open_regular(layout.checkpoint_index(directory)) as handle:
            for line in handle:
                try:  # JSON, a tab and its checksum (agctl.storage.encoding.encode_record)
                    entry = json.loads(line.rpartition(b"\t")[0] or line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("id") not in removed:
                    label = entry.get("label") or ""
                    found[str(entry["id"])] = f"turn {entry.get('turn_index')} {label}".strip()
    except OSError:
        return []
    return _checkpoint_items(found, incomplete)


def _checkpoints(store: Store, session_id: str) -> list[tuple[str, str]]:
    """A session's checkpoints and their descriptions, through its store's backend."""
    from agctl.store.checkpointer import Checkpointer

    return [
        (c.id, f"turn {c.turn_index} {c.label or ''}".strip())
        for c in Checkpointer(store).summaries(session_id)
    ]


def _checkpoint_items(found: dict[str, str], incomplete: str) -> list[CompletionItem]:
    """Checkpoint ids newest first (ids sort by creation), described."""
    from click.shell_completion import CompletionItem

    ordered = sorted(found, reverse=True, key=lambda c: (len(c), c))
    return [CompletionItem(c, help=found[c]) for c in ordered if c.startswith(incomplete)]


def _store_config(ctx: click.Context) -> dict[str, Any]:
    """The config as far as choosing the store needs it: a config that never mentions a
    store is not parsed (a TAB on a file store loads no json for it)."""
    if "agctl.config.file" not in ctx.meta:
        from agctl.base.paths import default_config_path

        try:
            with _open_regular(default_config_path(), follow=True) as handle:
                mentioned = b'"store"' in handle.read()
        except OSError:
            mentioned = False
        if not mentioned:
            return {}
    return _config(ctx)


def _config(ctx: click.Context) -> dict[str, Any]:
    """The config file, read once a TAB ({} when it cannot be)."""
    if "agctl.config.file" not in ctx.meta:
        from agctl.base.paths import default_config_path

        data = _read_json(default_config_path(), follow=True)
        ctx.meta["agctl.config.file"] = data if isinstance(data, dict) else {}
    config: dict[str, Any] = ctx.meta["agctl.config.file"]
    return config


def complete_profiles(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Profiles of the config, then the presets (usable as profiles)."""
    from click.shell_completion import CompletionItem

    from agctl.base.vocab import PRESET_NAMES

    profiles = _config(ctx).get("profiles") or {}
    items = [CompletionItem(name, help="profile") for name in sorted(profiles)]
    items += [CompletionItem(name, help="preset") for name in PRESET_NAMES if name not in profiles]
    return [item for item in items if item.value.startswith(incomplete)]


def complete_models(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Models named in the config: profiles' models, priced models, windows."""
    from click.shell_completion import CompletionItem

    config = _config(ctx)
    names = {p.get("model") for p in (config.get("profiles") or {}).values() if isinstance(p, dict)}
    names |= set(config.get("prices") or {}) | set(config.get("context_windows") or {})
    return [CompletionItem(n) for n in sorted(n for n in names if n) if n.startswith(incomplete)]


def complete_tools(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Tools of the config and of its profiles."""
    from click.shell_completion import CompletionItem

    config = _config(ctx)
    names = set(config.get("tools") or {})
    for profile in (config.get("profiles") or {}).values():
        if isinstance(profile, dict):
            names |= set(profile.get("tools") or {})
    return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]


def complete_templates(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The templates' names: their files in the config dir's templates/."""
    from click.shell_completion import CompletionItem

    from agctl.base.paths import templates_dir

    try:
        entries = os.listdir(templates_dir())
    except OSError:
        return []
    names = (entry.removesuffix(".yaml") for entry in entries if entry.endswith(".yaml"))
    return [
        CompletionItem(name)
        for name in sorted(names)
        if name.startswith(incomplete) and not name.startswith(".")
    ]
