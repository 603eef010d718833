"""`agctl store gc` through the CLI: the id map in --json, a line a session in text."""

from __future__ import annotations

import json
from collections.abc import Callable

from click.testing import Result


def test_store_gc_reclaims_after_a_prune_and_prints_the_id_map(
    run: Callable[..., Result],
) -> None:
    assert run("session", "new", "s").exit_code == 0
    for text in ("one", "two", "three", "four"):
        assert run("turn", "send", text).exit_code == 0
    assert run("ckpt", "prune", "--keep", "1", "--all").exit_code == 0
    kept = json.loads(run("ckpt", "list", "--json").output)

    dry = json.loads(run("store", "gc", "--dry-run", "--json").output)
    result = run("store", "gc", "--json")

    assert result.exit_code == 0
    (session,) = json.loads(result.output)["sessions"]
    assert dry["dry_run"] and dry["sessions"][0]["bytes_after"] == session["bytes_after"]
    assert session["rewritten"] and session["bytes_after"] < session["bytes_before"]
    assert sorted(session["ids"]) == sorted(c["id"] for c in kept)
    listed = json.loads(run("ckpt", "list", "--json").output)
    assert [c["id"] for c in listed] == [session["ids"][c["id"]] for c in kept]
    again = run("store", "gc", "--session", "s")
    assert again.exit_code == 0 and again.output.strip() == "s  nothing to reclaim"
