"""Live values for shell completion: session ids, slot names, checkpoint ids, profiles,
models.

Every TAB re-runs the CLI, so these read only directory listings and small files, with the
standard library's json: no pydantic, no httpx, no agctl.store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agctl.storage.file import layout

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem


def data_dir(ctx: click.Context) -> Path:
    """--data-dir wherever it was given (the global options write into the App object
    the contexts share), else AGCTL_DATA_DIR, else the platform's."""
    here: click.Context | None = ctx
    given = None
    while here is not None and given is None:
        given = getattr(here.obj, "data_dir", None)
        here = here.parent
    given = given or os.environ.get("AGCTL_DATA_DIR")
    if given:
        return Path(given)
    import platformdirs

    return Path(platformdirs.user_data_dir("agctl"))


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


def selected_session(ctx: click.Context) -> str | None:
    """The session the command line selects: -s (here or globally), AGCTL_SESSION, `use`."""
    root = data_dir(ctx)
    here: click.Context | None = ctx
    wanted = None
    while here is not None and wanted is None:
        wanted = getattr(here.obj, "session_arg", None)  # set by a command's own -s
        here = here.parent
    if not wanted:
        try:
            with _open_regular(layout.current_pointer(root)) as handle:
                wanted = handle.read().decode("utf-8", "replace").strip()
        except OSError:
            return None
    ids = _session_ids(root)
    if wanted in ids:
        return str(wanted)
    matches = [sid for sid in ids if sid.startswith(str(wanted))]
    return matches[0] if len(matches) == 1 else None


def selected_session_dir(ctx: click.Context) -> Path | None:
    """The directory of the session the command line selects, if it selects one."""
    sid = selected_session(ctx)
    return None if sid is None else layout.session_dir(data_dir(ctx), sid)


def complete_sessions(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Session ids, described by their title or system prompt."""
    from click.shell_completion import CompletionItem

    root = data_dir(ctx)
    items = []
    for sid in _session_ids(root):
        if not sid.startswith(incomplete):
            continue
        document = _read_json(layout.session_document(layout.session_dir(root, sid))) or {}
        about = document.get("title") or document.get("system_prompt") or ""
        items.append(CompletionItem(sid, help=" ".join(str(about).split())[:60] or None))
    return items


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

    from click.shell_completion import CompletionItem

    directory = selected_session_dir(ctx)
    if directory is None:
        return []
    removed = set(_read_json(layout.removed_checkpoints(directory)) or [])
    found: dict[str, str] = {}
    try:
        with _open_regular(layout.checkpoint_index(directory)) as handle:
            for line in handle:
                try:  # JSON, a tab and its checksum (agctl.pack.encode_record)
                    entry = json.loads(line.rpartition(b"\t")[0] or line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("id") not in removed:
                    label = entry.get("label") or ""
                    found[str(entry["id"])] = f"turn {entry.get('turn_index')} {label}".strip()
    except OSError:
        return []
    ordered = sorted(found, reverse=True, key=lambda c: (len(c), c))
    return [CompletionItem(c, help=found[c]) for c in ordered if c.startswith(incomplete)]


def _config(ctx: click.Context) -> dict[str, Any]:
    path = os.environ.get("AGCTL_CONFIG")
    if path:
        config_path = Path(path)
    else:
        import platformdirs

        config_path = Path(platformdirs.user_config_dir("agctl")) / "config.json"
    data = _read_json(config_path, follow=True)
    return data if isinstance(data, dict) else {}


def complete_profiles(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Profiles of the config, then the presets (usable as profiles)."""
    from click.shell_completion import CompletionItem

    from agctl.vocab import PRESET_NAMES

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
