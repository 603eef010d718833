"""agctl.base.moved: a module's name from before the regrouping (issue 26) still imports,
as the module it now is, and says where that is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agctl.base.moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_imports_the_module_it_now_is_with_a_warning(old: str) -> None:
    """In a fresh interpreter, so the old name is imported for the first time there."""
    script = (
        "import importlib, sys, warnings\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({MOVED[old]!r})\n"
        "assert old is new, (old, new)\n"
        f"assert new.__name__ == {MOVED[old]!r}, new.__name__  # not renamed by the alias\n"
        "assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [\n"
        f"    '{old} is now {MOVED[old]}: import it from there'\n"
        "], [str(w.message) for w in caught]\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_the_old_documented_forms_still_work() -> None:
    """What the README showed before: agctl.view.request_view, agctl.errors.AgctlError, and
    the names of the modules that became packages (agctl.config, agctl.interchange)."""
    script = (
        "import warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from agctl.view import request_view\n"
        "from agctl.errors import AgctlError, NotFound\n"
        "from agctl.config import ConfigStore, resolve\n"
        "from agctl.interchange import export_session, parse_messages\n"
        "from agctl.context.view import request_view as now\n"
        "from agctl.config.file import ConfigFile\n"
        "assert request_view is now and issubclass(NotFound, AgctlError)\n"
        "assert ConfigStore is ConfigFile\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_every_old_name_is_gone_from_the_package_and_leads_somewhere() -> None:
    """No old module is left in place (the alias would never be reached), and every new
    name exists."""
    import importlib.util
    from pathlib import Path

    import agctl

    root = Path(agctl.__file__).parent
    assert [old for old in MOVED if (root / f"{old.split('.', 1)[1]}.py").exists()] == []
    assert [new for new in MOVED.values() if importlib.util.find_spec(new) is None] == []


def test_an_unknown_name_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        __import__("agctl.no_such_module")
