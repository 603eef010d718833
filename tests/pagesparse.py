"""A page as html.parser reads it: its tags, its scripts and the text of each element
class, for the pages' tests (the real browser's are in tests/browser/)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

VOID = {"meta", "br", "img", "input", "link", "hr", "wbr", "source", "area", "col", "embed"}


@dataclass
class ParsedPage:
    tags: list[str] = field(default_factory=list)
    scripts: list[tuple[str | None, str]] = field(default_factory=list)  # (type, content)
    texts: dict[str, list[str]] = field(default_factory=dict)  # class -> text of each element
    meta: dict[str, str] = field(default_factory=dict)  # http-equiv -> content

    def data(self) -> Any:
        """The embedded JSON document (the one `application/json` script)."""
        (document,) = [content for kind, content in self.scripts if kind == "application/json"]
        return json.loads(document)

    def code(self) -> list[str]:
        return [content for kind, content in self.scripts if kind != "application/json"]


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = ParsedPage()
        self.open: list[tuple[str, list[str], list[str]]] = []  # tag, classes, text parts
        self.script_type: str | None = None
        self.script: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.page.tags.append(tag)
        if tag == "meta" and values.get("http-equiv"):
            self.page.meta[str(values["http-equiv"])] = values.get("content") or ""
        if tag == "script":
            self.script_type, self.script = values.get("type"), []
        if tag not in VOID:
            self.open.append((tag, (values.get("class") or "").split(), []))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self.script is not None:
            self.page.scripts.append((self.script_type, "".join(self.script)))
            self.script = None
        while self.open:
            name, classes, parts = self.open.pop()
            content = "".join(parts)
            for name_of_class in classes:
                self.page.texts.setdefault(name_of_class, []).append(content)
            if self.open:
                self.open[-1][2].append(content)
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.script is not None:
            self.script.append(data)
        elif self.open:
            self.open[-1][2].append(data)


def parse_page(source: str) -> ParsedPage:
    parser = _Parser()
    parser.feed(source)
    parser.close()
    return parser.page
