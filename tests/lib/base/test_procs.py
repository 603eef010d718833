"""agctl.base.procs for a process a library starts for agctl (an MCP server): found by
the file it writes its errors to, and killed with its group."""

from __future__ import annotations

import subprocess
import tempfile

from agctl.base.procs import child_writing_to, kill_group


def test_a_child_is_found_by_its_stderr_and_killed_with_its_group() -> None:
    with tempfile.TemporaryFile() as errlog, tempfile.TemporaryFile() as other:
        child = subprocess.Popen(
            ["sleep", "600"], stdin=subprocess.DEVNULL, stderr=errlog, start_new_session=True
        )
        try:
            found = child_writing_to(errlog)
            assert found is not None and found.pid == child.pid
            assert child_writing_to(other) is None
            kill_group(found)
            assert child.wait(timeout=60) == -9
        finally:
            child.kill()
            child.wait()
