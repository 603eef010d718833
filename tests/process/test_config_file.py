"""The config file against planted files, in real processes: a FIFO or a device as the config
is refused without hanging; a link to it is the user's own and is followed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from helpers import agctl_process


def test_a_fifo_or_device_as_the_config_is_refused_without_hanging(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Before: AGCTL_CONFIG naming a FIFO hung every command that reads the config."""
    fifo = tmp_path / "config-fifo"
    os.mkfifo(fifo, 0o600)
    for path in (fifo, Path("/dev/zero")):
        done = agctl_process({**env, "AGCTL_CONFIG": str(path)}, "config", "show", timeout=20)
        assert done.returncode == 5, done.stderr
        assert str(path) in done.stderr and "Traceback" not in done.stderr


def test_a_linked_config_is_read_and_written_through_its_link(
    env: dict[str, str], tmp_path: Path
) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "agctl.json"
    real.write_text("{}")
    link = tmp_path / "config.json"
    link.symlink_to(real)
    environ = {**env, "AGCTL_CONFIG": str(link)}
    assert agctl_process(environ, "config", "set", "lock_timeout", "5").returncode == 0
    assert link.is_symlink() and json.loads(real.read_text())["lock_timeout"] == 5
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert agctl_process(environ, "config", "set", "lock_timeout", "inf").returncode == 2
