"""Turns sent again on a branch of their own: a reply regenerated (`retry_turn`) or a
prompt edited (`edit_turn`), the slot they came from kept as it was.

Each makes a new slot, derived from the slot the turn was on with its messages before
the prompt (agctl.store.slots.derive_slot's `upto`), sends the prompt there as an
ordinary turn (agctl.turn.send.send_turn), committed whole or not at all, and once it
is committed makes the new slot current. On failure the current slot stays what it was
(a retry again retries the same reply) and the new slot keeps the draft, for
'turn send --resume-draft --slot NEW'. What `turn retry`, `turn edit` and the chat's
/retry and /edit do.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, NamedTuple

from agctl.base.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from agctl.context.models import Slot
    from agctl.providers.base import Event, Provider
    from agctl.store import Store
    from agctl.turn.send import TurnOptions, TurnResult

# A branch's name: its root slot's, then what made it and a number (default-retry-2).
_BRANCH_SUFFIX = re.compile(r"-(?:retry|edit)-\d+$")


class Branch(NamedTuple):
    """A slot made to send a prompt again: its name, the slot it came from, the prompt,
    and the position the prompt takes in it (the messages before it are the parent's)."""

    slot: str
    parent: str
    prompt: str
    position: int


def branch_name(taken: set[str], parent: str, kind: str) -> str:
    """The first free `<root>-<kind>-<n>`, `root` the parent's name without a suffix of
    this kind (a retry of default-retry-1 is default-retry-2, not default-retry-1-retry-1)."""
    root = _BRANCH_SUFFIX.sub("", parent)
    number = 1
    while _numbered(root, kind, number) in taken:
        number += 1
    return _numbered(root, kind, number)


def _numbered(root: str, kind: str, number: int) -> str:
    """`<root>-<kind>-<n>`, the root cut to fit an id (a parent near MAX_ID_LENGTH long
    would give a name the user never typed and the store refuses)."""
    from agctl.base.ids import MAX_ID_LENGTH

    suffix = f"-{kind}-{number}"
    return root[: MAX_ID_LENGTH - len(suffix)] + suffix


def last_prompt(slot: Slot) -> int:
    """The position of the slot's last user message: the prompt a retry sends again."""
    for position in range(len(slot.messages) - 1, -1, -1):
        if slot.messages[position].role == "user":
            return position
    raise UsageError(f"slot {slot.id} has no prompt to send again (no user message)")


def retry_branch(store: Store, session_id: str, slot: str | None = None) -> Branch:
    """A new slot with `slot`'s (default: the current one's) messages before its last
    prompt; the prompt, to be sent there again."""
    source = store.load_slot(session_id, slot)
    index = last_prompt(source)
    return _branch(store, session_id, source, index, source.messages[index].text(), "retry")


def edit_branch(
    store: Store, session_id: str, index: int, text: str, slot: str | None = None
) -> Branch:
    """A new slot with `slot`'s messages before message `index` (a user message;
    negative counts from the end, as 'msg' does), to send `text` there instead."""
    source = store.load_slot(session_id, slot)
    position = source.position(index)
    role = source.messages[position].role
    if role != "user":
        raise UsageError(
            f"message {position} of slot {source.id} is not a prompt but the {role}'s: only a "
            "user message is edited and sent again ('agctl msg edit' changes any in place)"
        )
    if not text.strip():
        raise UsageError("the edited prompt is empty")
    return _branch(store, session_id, source, position, text, "edit")


def _branch(
    store: Store, session_id: str, source: Slot, index: int, prompt: str, kind: str
) -> Branch:
    name = branch_name(set(store.slot_ids(session_id)), source.id, kind)
    store.derive_slot(session_id, name, source=source.id, upto=index)
    return Branch(name, source.id, prompt, index)


def send_on_branch(
    store: Store,
    session_id: str,
    branch: Branch,
    provider: Provider,
    options: TurnOptions,
    on_event: Callable[[Event], None] | None = None,
) -> TurnResult:
    """Send the branch's prompt as a turn on the branch; once committed, make it current."""
    from agctl.turn.send import send_turn

    options = replace(options, slot=branch.slot)
    result = send_turn(store, session_id, branch.prompt, provider, options, on_event=on_event)
    store.use_slot(session_id, branch.slot)
    return result


def retry_turn(
    store: Store,
    session_id: str,
    provider: Provider,
    options: TurnOptions,
    on_event: Callable[[Event], None] | None = None,
    on_branch: Callable[[Branch], None] | None = None,
) -> TurnResult:
    """Regenerate the last reply of `options.slot` (default: the current slot) on a new
    slot, the old one kept: `retry_branch` (told to `on_branch`), then the prompt sent
    there."""
    branch = retry_branch(store, session_id, options.slot)
    if on_branch is not None:
        on_branch(branch)
    return send_on_branch(store, session_id, branch, provider, options, on_event)


def edit_turn(
    store: Store,
    session_id: str,
    index: int,
    text: str,
    provider: Provider,
    options: TurnOptions,
    on_event: Callable[[Event], None] | None = None,
    on_branch: Callable[[Branch], None] | None = None,
) -> TurnResult:
    """Send `text` in place of the prompt at `index` of `options.slot`, on a new slot with
    the messages before it: `edit_branch` (told to `on_branch`), then the prompt sent
    there."""
    branch = edit_branch(store, session_id, index, text, options.slot)
    if on_branch is not None:
        on_branch(branch)
    return send_on_branch(store, session_id, branch, provider, options, on_event)


class SlotDiff(NamedTuple):
    """Two slots compared: how many first messages they share, and a unified diff of their
    messages (one line a line of text, each message's first line naming its index and
    role; a tool call as `→ name(arguments)`)."""

    a: str
    b: str
    shared: int
    lines: list[str]

    def to_dict(self) -> dict[str, object]:
        return {"a": self.a, "b": self.b, "shared": self.shared, "diff": self.lines}


def message_lines(slot: Slot) -> list[str]:
    """A slot's messages as the lines `compare_slots` diffs."""
    lines = []
    for index, message in enumerate(slot.messages):
        text = message.text().split("\n")
        calls = [f"→ {c.function.name}({c.function.arguments})" for c in message.tool_calls or ()]
        first, *rest = [*text, *calls] if text != [""] or not calls else calls
        lines.append(f"#{index} {message.role}: {first}")
        lines += [f"   {line}" for line in rest]
    return lines


def compare_slots(
    store: Store, session_id: str, a: str | None = None, b: str | None = None
) -> SlotDiff:
    """Slot `a` (default: the one `b` was derived from) against slot `b` (default: the
    current one): what a retry or an edit changed. UsageError when `b` has no parent and
    `a` is not given."""
    import difflib

    right = store.load_slot(session_id, b)
    if a is None:
        a = right.config.source.parent_id
        if a is None:
            raise UsageError(f"slot {right.id} was not derived from another: name the slot A")
    left = store.load_slot(session_id, a)
    shared = 0
    for old, new in zip(left.messages, right.messages, strict=False):
        if old.model_dump(exclude={"created_at"}) != new.model_dump(exclude={"created_at"}):
            break
        shared += 1
    lines = difflib.unified_diff(
        message_lines(left), message_lines(right), left.id, right.id, lineterm="", n=1
    )
    return SlotDiff(left.id, right.id, shared, list(lines))
