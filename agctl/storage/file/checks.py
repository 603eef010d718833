"""The file backend's doctor: what a data dir holds that agctl did not put there, or left
behind.

It reports (and with `fix` repairs) modes open to other users, links and other
non-regular files in agctl's own places, temp files and staging or trash directories
left by killed writers, recovery journals that are not trusted, and — through the
`verify` the caller gives it (agctl.reports.checkup: the checkpoint code) — checkpoint logs whose
records fail their checks or cannot be verified (written before checksums).
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agctl.base.errors import AgctlError, DataError, StoreError
from agctl.base.fsio import PRIVATE_DIR, PRIVATE_FILE
from agctl.storage.file import layout
from agctl.storage.file.backend import (
    STALE_SECONDS,
    STALE_TEMP_SECONDS,
    FileBackend,
    stale_temp_files,
    stale_temp_files_in,
)

# A session id -> what `ckpt verify` found in its log (agctl.store.checkpoints.LogReport).
Verify = Callable[[str], Any]


@dataclass
class Finding:
    """One thing found: `kind` says what, `fixed` whether `--fix` repaired it."""

    kind: str
    path: str
    detail: str
    fixable: bool = True
    fixed: bool = False
    # A notice is worth knowing, but nothing is wrong (an old log without checksums).
    notice: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "detail": self.detail,
            "fixed": self.fixed,
            "notice": self.notice,
        }


def _walk(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every entry under `root` (not following links), parents before children."""
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            yield Path(entry.path), info
            if stat.S_ISDIR(info.st_mode):
                stack.append(Path(entry.path))


def _chmod_no_follow(path: Path, mode: int) -> None:
    """chmod through a descriptor opened without following a link, so a link swapped in
    after the walk changes nothing outside the data dir."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode) or stat.S_ISREG(os.fstat(fd).st_mode):
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _remove(path: Path, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()


class Doctor:
    """Examine a store's data dir; `fix` repairs what can be repaired safely."""

    def __init__(self, files: FileBackend, verify: Verify, *, fix: bool = False) -> None:
        self.files = files
        self.verify = verify
        self.root = files.root
        self.fix = fix
        self.findings: list[Finding] = []
        self.owner = files.owner()

    def _found(
        self,
        kind: str,
        path: Path,
        detail: str,
        repair: Any = None,
        *,
        notice: bool = False,
    ) -> None:
        finding = Finding(kind, str(path), detail, fixable=repair is not None, notice=notice)
        if self.fix and repair is not None:
            try:
                repair()
                finding.fixed = True
            except OSError as exc:
                finding.detail += f" (not fixed: {exc.strerror})"
        self.findings.append(finding)

    def run(self) -> list[Finding]:
        root = self.root
        try:
            root_info = os.stat(root)
        except FileNotFoundError:
            return self.findings
        except OSError as exc:
            raise StoreError(f"cannot read the data dir {root}: {exc.strerror}") from None
        self._journals()  # before modes are fixed: a loose journal is removed, not trusted
        self._modes(root, root_info)
        for path, info in _walk(root):
            if stat.S_ISLNK(info.st_mode):
                self._found(
                    "symlink",
                    path,
                    f"a link to {os.readlink(path)!r} where agctl keeps its own files",
                    lambda p=path: p.unlink(),
                )
                continue
            if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                self._found(
                    "not-regular",
                    path,
                    "neither a regular file nor a directory",
                    lambda p=path: p.unlink(),
                )
                continue
            if info.st_uid != self.owner:
                self._found(
                    "owner",
                    path,
                    f"owned by uid {info.st_uid}, not by the data dir's owner ({self.owner})",
                )
            self._modes(path, info)
        self._leftovers()
        self._logs()
        return self.findings

    def _modes(self, path: Path, info: os.stat_result) -> None:
        wanted = PRIVATE_DIR if stat.S_ISDIR(info.st_mode) else PRIVATE_FILE
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            self._found(
                "mode",
                path,
                f"mode {mode:03o}: open to other users (wanted {wanted:03o})",
                lambda: _chmod_no_follow(path, wanted),
            )

    def _sessions(self) -> list[Path]:
        try:
            return sorted(
                Path(e.path)
                for e in os.scandir(self.files.sessions_dir)
                if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
            )
        except OSError:
            return []

    def _leftovers(self) -> None:
        stale = stale_temp_files_in(self.root, self.owner, STALE_TEMP_SECONDS)
        for directory in self._sessions():
            stale += stale_temp_files(directory, self.owner, STALE_TEMP_SECONDS)
        for path in stale:
            self._found(
                "temp-file",
                path,
                "a temp file left by a killed writer (it may hold deleted messages)",
                lambda p=path: p.unlink(),
            )
        try:
            entries = list(os.scandir(self.files.sessions_dir))
        except OSError:
            return
        cutoff = time.time() - STALE_SECONDS
        for entry in entries:
            if not layout.is_leftover(entry.name):
                continue
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode) and info.st_mtime < cutoff:
                path = Path(entry.path)
                self._found(
                    "leftover-dir",
                    path,
                    "a staging or trash directory left by a crashed create or destroy",
                    lambda p=path, i=info: _remove(p, i),
                )

    def _journals(self) -> None:
        for directory in self._sessions():
            for name in (layout.JOURNAL, *layout.LEGACY_JOURNALS):
                path = layout.journal(directory, name)
                if not os.path.lexists(path):
                    continue
                try:
                    self.files.trusted_journal(path)
                except DataError as exc:
                    self._found(
                        "journal",
                        path,
                        getattr(exc, "reason", str(exc)),
                        lambda p=path: p.unlink(),
                    )

    def _logs(self) -> None:
        for directory in self._sessions():
            log = layout.checkpoint_log(directory)
            if not os.path.lexists(log):
                continue
            try:
                report = self.verify(directory.name)
            except AgctlError as exc:
                self._found("log", log, str(exc))
                continue
            for problem in report.problems:
                self._found("log", log, problem)
            for bad in report.bad_checkpoints:
                self._found("checkpoint", log, f"checkpoint {bad['id']}: {bad['reason']}")
            if report.unverifiable:
                self._found(
                    "unverifiable",
                    log,
                    f"{report.unverifiable} records written before checksums: readable, "
                    "but a changed byte in them cannot be detected",
                    notice=True,
                )


def diagnose(files: FileBackend, verify: Verify, *, fix: bool = False) -> list[Finding]:
    """Every finding in the data dir (repaired where safe, with `fix`)."""
    return Doctor(files, verify, fix=fix).run()
