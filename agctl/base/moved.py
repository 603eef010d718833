"""The modules' names before they were grouped into packages (issue 26), still importable:
`import agctl.errors` gives agctl.base.errors, with a DeprecationWarning naming the new
place. Standard library only; installed by `import agctl`, it loads nothing until an old
name is imported.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

# Each module's name before the regrouping -> its name now.
MOVED = {
    f"agctl.{old}": f"agctl.{new}"
    for old, new in {
        "errors": "base.errors",
        "ids": "base.ids",
        "hashing": "base.hashing",
        "vocab": "base.vocab",
        "quoting": "base.quoting",
        "paths": "base.paths",
        "fsio": "base.fsio",
        "interrupts": "base.interrupts",
        "procs": "base.procs",
        "validation": "base.validation",
        "schema": "base.schema",
        "redact": "base.redact",
        "models": "context.models",
        "messages": "context.messages",
        "view": "context.view",
        "budget": "context.budget",
        "tokens": "context.tokens",
        "cache": "context.cache",
        "pricing": "context.pricing",
        "price_sheets": "context.price_sheets",
        "settings": "config.settings",
        "specs": "config.specs",
        "sessions": "store.sessions",
        "slots": "store.slots",
        "drafts": "store.drafts",
        "checkpoints": "store.checkpoints",
        "pack": "store.checkpoints.pack",
        "turns": "turn.send",
        "reply": "turn.reply",
        "steps": "turn.steps",
        "tools": "turn.tools",
        "hooks": "turn.hooks",
        "setup": "turn.setup",
        "replay": "turn.transcripts",
        "compress": "turn.compress",
        "merge": "turn.merge",
        "transfer": "interchange.transfer",
        "walk": "reports.walk",
        "search": "reports.search",
        "usage": "reports.usage",
        "doctor": "reports.checkup",
        "manpages": "cli.manpages",
    }.items()
}


class _Alias:
    """Loads an old name as the module it now is (the same module object)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        import importlib
        import warnings

        warnings.warn(
            f"{spec.name} is now {self.new}: import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module is the one already imported."""


class MovedModules:
    """Finds an old module name (MOVED) and gives the module it is now (a meta path
    finder: consulted only after the regular finders found nothing)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, _Alias(new))  # type: ignore[arg-type]  # a loader by shape


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
