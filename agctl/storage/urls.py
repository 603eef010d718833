"""Store specs: the text that names where the sessions are, and that text made safe to show.

A store is named by a plain path or a `file://` URL (a file store: `--store DIR` is
`--data-dir DIR`), or by a `postgresql://` (or `postgres://`) URL, which libpq reads as it
reads any: `postgresql://user@host:5432/agctl`, `postgresql:///agctl?service=team`,
`postgresql:///agctl?host=/run/postgresql`. Anything else is a UsageError saying what is
accepted. A password may be in the URL (libpq takes it from there too), but it is never
shown: every message, log line and JSON document that names a store uses `redact`.

One query parameter is agctl's, not libpq's, and is taken out of the URL before libpq
sees it: `shared_schema_owner=ROLE` accepts a schema (and tables) owned by ROLE, another
role than the one connecting (see agctl.storage.postgres.schema.check_owner).

Standard library only, and cheap at import (the CLI's selection of the store, TAB
completion): urllib.parse and re are imported when a URL or a DSN is taken apart.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, NamedTuple

from agctl.base.errors import UsageError

FILE_SCHEME = "file"
POSTGRES_SCHEMES = ("postgresql", "postgres")
DEFAULT_SCHEMA = "agctl"
# What replaces a password.
MARK = "***"
# The connection parameters (URL query or keyword/value DSN) whose value is a secret.
SECRET_PARAMETERS = ("password", "sslpassword")
# PostgreSQL's limit on an identifier (NAMEDATALEN - 1), a schema's or a role's name.
MAX_SCHEMA = 63
# The URL's query parameter that names the role a shared schema may belong to.
SHARED_OWNER = "shared_schema_owner"
ACCEPTED = (
    "a directory or file:///PATH (a file store), or a postgresql:// URL "
    "(postgresql://HOST/DB, postgresql:///DB?service=NAME)"
)
PASSWORD_SOURCES = (
    "libpq reads it from ~/.pgpass (PGPASSFILE), a service file (PGSERVICEFILE) or PGPASSWORD"
)

StoreKind = Literal["file", "postgres"]


class StoreSpec(NamedTuple):
    """A parsed store spec: a file store's directory, or a PostgreSQL DSN as given (with
    its password, if any, for libpq; `shown` never has one) but for agctl's own parameter,
    the role whose schema is accepted (`shared_owner`)."""

    kind: StoreKind
    path: Path | None
    dsn: str | None
    shared_owner: str | None = None

    @property
    def shown(self) -> str:
        """The store as messages, logs and JSON show it."""
        return str(self.path) if self.path is not None else redact(self.dsn or "")


def file_store(path: Path) -> StoreSpec:
    return StoreSpec("file", path, None)


def parse_store(text: str, *, origin: str = "--store") -> StoreSpec:
    """The store `text` names (see the module docstring); `origin` (--store, AGCTL_STORE,
    config store.url) names it in errors."""
    if not text.strip():
        raise UsageError(f"{_at(origin)}no store given: give {ACCEPTED}")
    if "\x00" in text:
        raise UsageError(f"{_at(origin)}a store cannot contain a NUL character")
    scheme, sep, _rest = text.partition("://")
    if sep and _is_scheme(scheme):
        kind = scheme.lower()
        if kind in POSTGRES_SCHEMES:
            dsn, owner = _take_shared_owner(text, origin)
            return StoreSpec("postgres", None, dsn, owner)
        if kind == FILE_SCHEME:
            return file_store(_file_url_path(text, origin))
        raise UsageError(
            f"{_at(origin)}{_quoted(text)} is not a store agctl knows: give {ACCEPTED}"
        )
    head = text.split(":", 1)[0].lower() if ":" in text else ""
    if head in (*POSTGRES_SCHEMES, FILE_SCHEME):
        raise UsageError(f"{_at(origin)}{_quoted(text)} needs '{head}://': give {ACCEPTED}")
    if _looks_like_keywords(text):
        raise UsageError(
            f"{_at(origin)}{_quoted(text)} looks like a libpq keyword/value DSN: give it as a URL",
            hint="every keyword can be a query parameter: postgresql:///DB?host=HOST&user=NAME "
            "(a directory of that name: ./NAME)",
        )
    return file_store(_directory(Path(text), origin))


def _at(origin: str) -> str:
    """The start of a message about the store `origin` gave ("" when the caller names it)."""
    return f"{origin}: " if origin else ""


def _take_shared_owner(url: str, origin: str) -> tuple[str, str | None]:
    """`url` without its shared_schema_owner parameter (libpq refuses a parameter it does
    not know), and that parameter's role."""
    head, sep, query = url.partition("?")
    if not sep:
        return url, None
    from urllib.parse import unquote

    query, hash_, fragment = query.partition("#")
    kept, owners = [], []
    for pair in query.split("&"):
        key, _eq, value = pair.partition("=")
        if unquote(key).strip() == SHARED_OWNER:
            owners.append(unquote(value))
        else:
            kept.append(pair)
    if not owners:
        return url, None
    if len(owners) > 1:
        raise UsageError(f"{_at(origin)}{SHARED_OWNER} is given {len(owners)} times")
    rest = "&".join(kept)
    return f"{head}{'?' if rest else ''}{rest}{hash_}{fragment}", check_role(
        owners[0], f"{origin} {SHARED_OWNER}" if origin else SHARED_OWNER
    )


def _is_scheme(scheme: str) -> bool:
    return (
        scheme[:1].isascii()
        and scheme[:1].isalpha()
        and all(c.isascii() and (c.isalnum() or c in "+.-") for c in scheme)
    )


def _file_url_path(text: str, origin: str) -> Path:
    """The local path of a file:// URL (file:///data/agctl, file://localhost/data/agctl)."""
    from urllib.parse import unquote

    host, _, path = text[len("file://") :].partition("/")
    if host not in ("", "localhost"):
        raise UsageError(
            f"{_at(origin)}{_quoted(text)} names another machine: a file store is local"
        )
    if "?" in path or "#" in path:
        raise UsageError(
            f"{_at(origin)}{_quoted(text)}: a file store URL takes no query or fragment"
        )
    decoded = unquote("/" + path)
    if decoded == "/" or "\x00" in decoded:
        raise UsageError(f"{_at(origin)}{_quoted(text)} names no directory")
    return _directory(Path(decoded), origin)


def _directory(path: Path, origin: str) -> Path:
    """`path`, refused (as --data-dir refuses it) when something else than a directory is
    there, or when no file system could hold it (too long, a loop of links)."""
    import errno
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):
            raise UsageError(f"{_at(origin)}{_quoted(str(path))}: {exc.strerror}") from None
        return path
    if not stat.S_ISDIR(mode):
        raise UsageError(f"{_at(origin)}{_quoted(str(path))} is not a directory")
    return path


SHOWN_LIMIT = 80


def _quoted(text: str) -> str:
    """`text` redacted and quoted for a message, cut when long."""
    shown = redact(text)
    if len(shown) <= SHOWN_LIMIT:
        return repr(shown)
    return f"{shown[:SHOWN_LIMIT]!r}… ({len(shown)} characters)"


def _looks_like_keywords(text: str) -> bool:
    """`host=db dbname=agctl`: the keyword/value form of a DSN, not a directory's name."""
    if "=" not in text:
        return False
    import re

    return re.match(r"\s*[A-Za-z_]+\s*=", text) is not None


# ---- passwords -------------------------------------------------------------------------


def redact(dsn: str) -> str:
    """`dsn` without its passwords (the URL's userinfo password, `password=` and
    `sslpassword=` parameters, in a URL or a keyword/value DSN), each replaced by ***."""
    if "://" in dsn:
        return _redact_url(dsn)
    return _redact_keywords(dsn) if "=" in dsn else dsn


def _authority(url: str) -> tuple[int, int]:
    """Where a URL's authority (userinfo@hosts) starts and ends."""
    start = url.find("://") + 3
    end = len(url)
    for stop in "/?#":
        found = url.find(stop, start)
        if found >= 0:
            end = min(end, found)
    return start, end


def _redact_url(url: str) -> str:
    from urllib.parse import unquote

    start, end = _authority(url)
    at = url.rfind("@", start, end)
    if at >= 0:
        user, sep, _password = url[start:at].partition(":")
        if sep:
            url = url[:start] + f"{user}:{MARK}" + url[at:]
    head, sep, query = url.partition("?")
    if not sep:
        return url
    query, hash_, fragment = query.partition("#")
    pairs = []
    for pair in query.split("&"):
        key, eq, _value = pair.partition("=")
        secret = eq and unquote(key).strip().lower() in SECRET_PARAMETERS
        pairs.append(f"{key}={MARK}" if secret else pair)
    return f"{head}?{'&'.join(pairs)}{hash_}{fragment}"


_KEYWORD_SECRET = r"(?i)(?<![\w])((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)"


def _redact_keywords(text: str) -> str:
    import re

    return re.sub(_KEYWORD_SECRET, rf"\g<1>{MARK}", text)


def passwords(dsn: str) -> set[str]:
    """The secrets in `dsn`, as written and decoded (what `redact_text` removes)."""
    from urllib.parse import unquote

    found: set[str] = set()
    if "://" in dsn:
        start, end = _authority(dsn)
        at = dsn.rfind("@", start, end)
        if at >= 0:
            _user, sep, password = dsn[start:at].partition(":")
            if sep:
                found |= {password, unquote(password)}
        query = dsn.partition("?")[2].partition("#")[0]
        for pair in query.split("&") if query else ():
            key, eq, value = pair.partition("=")
            if eq and unquote(key).strip().lower() in SECRET_PARAMETERS:
                found |= {value, unquote(value), unquote(value.replace("+", " "))}
    elif "=" in dsn:
        import re

        for match in re.finditer(_KEYWORD_SECRET, dsn):
            value = match.group(2)
            found |= {value, value.strip("'").replace("\\'", "'").replace("\\\\", "\\")}
    return {secret for secret in found if secret}


def has_password(dsn: str) -> bool:
    return bool(passwords(dsn))


def redact_text(text: str, dsn: str) -> str:
    """`text` (an error message, a log line) with `dsn` redacted wherever it appears, and
    every form of its passwords (as written, decoded, URL-encoded, base64) removed."""
    secrets = passwords(dsn)
    if not secrets:
        return text
    from agctl.base.redact import Redactor, secret_forms

    text = text.replace(dsn, redact(dsn))
    forms = set(secrets)
    for secret in secrets:
        forms |= secret_forms(secret)
    return Redactor(forms).text(text)


STORED_PASSWORD = (
    "holds a password, which agctl never keeps in its config: leave it out of the URL "
    f"({PASSWORD_SOURCES})"
)


def refuse_stored_password(url: str, where: str = "config store.url") -> str:
    """`url`, unless it holds a password, which is never written to (or read from) the
    config: the UsageError says where libpq finds one."""
    if has_password(url):
        raise UsageError(f"{where} {STORED_PASSWORD}")
    return url


def check_schema(name: str, where: str = "store schema") -> str:
    """A PostgreSQL schema name agctl will create and use as is: lower-case letters,
    digits and _, not starting with a digit or pg_, at most 63 characters."""
    ok = (
        0 < len(name) <= MAX_SCHEMA
        and name.isascii()
        and (name[0].isalpha() or name[0] == "_")
        and all(c.isdigit() or c == "_" or (c.isalpha() and c.islower()) for c in name)
        and not name.startswith("pg_")
    )
    if not ok:
        raise UsageError(
            f"{_at(where)}{name!r} is not a schema name agctl uses: lower-case letters, digits "
            f"and _, not starting with a digit or pg_, at most {MAX_SCHEMA} characters"
        )
    return name


def check_role(name: str, where: str = SHARED_OWNER) -> str:
    """A PostgreSQL role's name as the server spells it (case and all): not empty, at most
    63 bytes, no control character."""
    if not name or len(name.encode()) > MAX_SCHEMA or not name.isprintable():
        raise UsageError(
            f"{_at(where)}{name!r} is not a role's name: 1 to {MAX_SCHEMA} bytes, printable"
        )
    return name
