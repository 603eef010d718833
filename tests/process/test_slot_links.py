"""A slot file replaced by a symbolic link out of the data dir, or a dangling one: no command
reads or writes through it, and none creates its target.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from helpers import refuses_and_writes_nothing

Run = Callable[..., Result]


# ---- a slot file replaced by a symlink out of the data dir ----------------------------------

THROUGH_THE_LINK = [
    ("msg", "list"),
    ("msg", "get", "0"),
    ("slot", "show"),
    ("slot", "show", "--view"),
    ("slot", "list"),
    ("session", "show"),
    ("session", "export"),
    ("msg", "export"),
    ("msg", "append", "user", "x"),
    ("msg", "edit", "0", "x"),
    ("msg", "rm", "0"),
    ("msg", "pop"),
    ("msg", "clear"),
    ("msg", "retain", "user"),
    ("msg", "import", "-", "--replace"),
    ("slot", "mode", "readonly"),
    ("slot", "set", "auto_compress", "false"),
    ("slot", "derive", "branch"),
    ("slot", "merge", "default", "--into", "default"),
    ("ctx", "compress", "--strategy", "truncate", "--keep-recent", "0", "--min-tokens", "0"),
    ("turn", "send", "hi"),
    ("turn", "replay", "-"),
    ("ckpt", "create"),
    ("ckpt", "rollback", "{ckpt}"),
]


@pytest.mark.parametrize("args", THROUGH_THE_LINK, ids=[" ".join(a) for a in THROUGH_THE_LINK])
def test_a_slot_symlinked_out_of_the_data_dir_is_neither_read_nor_written(
    run: Run,
    isolated_env: Path,
    tmp_path: Path,
    checkpoint: str,
    args: tuple[str, ...],
) -> None:
    slot_file = isolated_env / "sessions" / "s" / "slots" / "default.json"
    target = tmp_path / "outside" / "victim.json"
    target.parent.mkdir()
    target.write_bytes(slot_file.read_bytes().replace(b"hello", b"secret-outside"))
    slot_file.unlink()
    slot_file.symlink_to(target)
    original = target.read_bytes()
    stdin = b'[{"role": "user", "content": "x"}]' if "import" in args else b'{"input": "x"}\n'
    argv = [checkpoint if a == "{ckpt}" else a for a in args]
    result = refuses_and_writes_nothing(
        run, isolated_env, *argv, input=stdin, code=5, says="symbolic link"
    )
    assert "secret-outside" not in result.stderr
    assert target.read_bytes() == original
    assert slot_file.is_symlink()


def test_a_dangling_slot_symlink_is_refused_and_never_creates_its_target(
    run: Run, isolated_env: Path, tmp_path: Path, session: str
) -> None:
    link = isolated_env / "sessions" / session / "slots" / "evil.json"
    target = tmp_path / "planted.json"
    link.symlink_to(target)
    for args in (
        ("msg", "list", "--slot", "evil"),
        ("msg", "append", "user", "x", "--slot", "evil"),
    ):
        refuses_and_writes_nothing(run, isolated_env, *args, code=5, says="symbolic link")
    assert not target.exists()
