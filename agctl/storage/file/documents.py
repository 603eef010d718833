"""A document's bytes in the file backend, and back: its JSON, with its revision first."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from agctl.base.errors import CorruptDocument, SchemaTooNew
from agctl.base.validation import validation_summary
from agctl.context.models import Document
from agctl.storage.file import layout

D = TypeVar("D", bound=Document)
CACHE_FILES = {"heads": layout.HEADS, "index": layout.INDEX}
# A document at least this large is put through a temp file, not inline in the journal.
LARGE_PUT = 256 * 1024


def invalid_document(exc: ValidationError) -> str:
    return f"invalid document: {validation_summary(exc, 'document')}"


def parse_document(raw: bytes, model: type[D], path: Path | str) -> D:
    """A document from its bytes, or CorruptDocument / SchemaTooNew naming `path`."""
    try:
        return model.from_json(raw)
    except SchemaTooNew as exc:
        raise SchemaTooNew(exc.kind, exc.found, exc.supported, path) from None
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise CorruptDocument(path, "not valid JSON") from None
        raise CorruptDocument(path, invalid_document(exc)) from None


def dump_document(document: Document) -> bytes:
    """A document's bytes as stored: its JSON with its revision as the first key (which
    no dump holds, see Document.rev)."""
    data = document.model_dump_json(indent=2).encode()
    return b'{\n  "rev": %d,' % document.rev + data[1:] + b"\n"
