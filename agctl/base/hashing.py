"""Every digest agctl stores or compares, defined once.

Checkpoint logs, slot documents (derive's branch hashes), drafts and cassettes keep these
digests on disk, so the bytes hashed and the algorithm are a file format: changing either
orphans what was stored (tests/lib/test_hashing.py pins a known digest of each).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from pydantic import BaseModel

LINE_SUM_LENGTH = 8  # hex digits


def canonical_json(value: Any) -> bytes:
    """A JSON value as hashed: compact, keys sorted, so equal values give equal bytes."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def content_hash(value: Any) -> str:
    """BLAKE2b-128 of a JSON value's canonical bytes: what checkpoint records are keyed by."""
    return data_hash(canonical_json(value))


def message_hash(message: BaseModel) -> str:
    """The content hash of a message (or any document) as it is stored."""
    return content_hash(message.model_dump(mode="json"))


def message_hashes(messages: Iterable[BaseModel]) -> list[str]:
    return [message_hash(m) for m in messages]


def data_hash(data: bytes) -> str:
    """BLAKE2b-128 of raw bytes: any byte changed, lost or added shows."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def line_sum(data: bytes) -> bytes:
    """The checksum a checkpoint log line carries: 8 hex digits of BLAKE2b over its JSON."""
    return hashlib.blake2b(data, digest_size=LINE_SUM_LENGTH // 2).hexdigest().encode()


def request_fingerprint(model_input: Any) -> str:
    """SHA-256 of a model input's canonical bytes: how a cassette finds a recorded reply."""
    return hashlib.sha256(canonical_json(model_input)).hexdigest()
