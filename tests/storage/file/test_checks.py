"""The file backend's doctor (agctl/storage/file/checks.py) on a data dir with loose modes, a
planted link and a leftover dir: reported, then fixed."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from agctl.store import Store

Run = Callable[..., Result]


SID = "s"


def test_doctor_reports_and_fixes_modes_links_and_leftovers(
    run: Run, store: Store, isolated_env: Path, session: str
) -> None:
    os.chmod(isolated_env, 0o755)
    slot = isolated_env / "sessions" / SID / "slots" / "default.json"
    os.chmod(slot, 0o644)
    (isolated_env / "sessions" / SID / "slots" / "evil.json").symlink_to("/etc/passwd")
    trash = isolated_env / "sessions" / ".trash-old-1234"
    trash.mkdir()
    old = time.time() - 3600
    os.utime(trash, (old, old))
    result = run("doctor", "--json")
    assert result.exit_code == 5
    kinds = sorted({f["kind"] for f in json.loads(result.stdout)["findings"]})
    assert kinds == ["leftover-dir", "mode", "symlink"]
    fixed = run("doctor", "--fix")
    assert fixed.exit_code == 0, fixed.output
    assert run("doctor").exit_code == 0
    assert stat.S_IMODE(os.stat(slot).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(isolated_env).st_mode) == 0o700
    assert not trash.exists()
    assert Path("/etc/passwd").exists()
