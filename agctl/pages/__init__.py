"""Self-contained HTML pages: one file that works offline and from file://, its data embedded
as JSON no message can break out of, and a hand-written script allowed by its hash alone.

One mechanism for every page agctl writes (`session export --format html`, `session graph
--format html`): a page is a title, static HTML (what shows with scripts off), a JSON
document and a script that reads it. The Content-Security-Policy forbids every fetch, so a
page can never reach the network, and only the page's own script and style may run.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from agctl.context.models import Message

DATA_ID = "agctl-data"
REDACTED = "(text redacted)"

# Inside a JSON string these stand for themselves as \u escapes, and outside strings JSON
# has none of them: no `</script>`, `<!--` or `]]>` can form, and no line separator ends a
# JavaScript line.
_JSON_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def embed_json(data: Any) -> str:
    """`data` as JSON safe to put between `<script type="application/json">` tags."""
    return orjson.dumps(data).decode().translate(_JSON_ESCAPES)


def text(value: object) -> str:
    """User text as HTML text or an attribute value: escaped, NUL shown as U+FFFD (as a
    parser would), so the page's markup is only agctl's."""
    return html.escape(str(value).replace("\0", "\ufffd"), quote=True)


def asset(name: str) -> str:
    """A script or style shipped beside this module (hand-written, never minified)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _digest(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


def page(*, title: str, body: str, data: Any, scripts: Sequence[str], style: str) -> str:
    """The whole page. `body` is trusted markup (built with `text`); `data` becomes the
    JSON the scripts read from `#agctl-data`; the policy allows these scripts and this style
    by their hashes and nothing from anywhere."""
    script = "\n".join(scripts)
    policy = "; ".join(
        [
            "default-src 'none'",
            f"script-src {_digest(script)}",
            f"style-src {_digest(style)}",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{text(title)}</title>\n<style>{style}</style>\n</head>\n<body>\n"
        f"{body}\n"
        f'<script type="application/json" id="{DATA_ID}">{embed_json(data)}</script>\n'
        f"<script>{script}</script>\n</body>\n</html>\n"
    )


def message_entry(message: Message, *, redact: bool) -> dict[str, Any]:
    """A message as the pages show it; with `redact`, without any text (content, reasoning,
    tool arguments), so the page can be shared."""
    entry: dict[str, Any] = {
        "role": message.role,
        "text": None if redact else message.text(),
        "tokens": message.token_count(),
    }
    for key in ("name", "tool_call_id", "model"):
        value = getattr(message, key)
        if value is not None:
            entry[key] = value
    if message.reasoning and not redact:
        entry["reasoning"] = message.reasoning
    if message.created_at is not None:
        entry["created_at"] = message.created_at.isoformat()
    if message.tool_calls:
        entry["tool_calls"] = [
            {
                "id": call.id,
                "name": call.function.name,
                "arguments": None if redact else call.function.arguments,
            }
            for call in message.tool_calls
        ]
    return entry
