"""The pytest plugin is registered by entry point and costs other test runs nothing.

pytest loads `tidegate.testing.plugin` in every run once tidegate is installed; it must
import nothing of the broker (or asyncio's server side) until a fixture asks, and
define no autouse fixture.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys


def test_entry_point_names_the_plugin() -> None:
    eps = [e for e in importlib.metadata.entry_points(group="pytest11") if e.name == "tidegate"]
    assert [e.value for e in eps] == ["tidegate.testing.plugin"]


def test_loading_the_plugin_imports_no_broker() -> None:
    code = ("import sys, pytest, tidegate.testing.plugin, tidegate.testing; "
            "print(sorted(m for m in sys.modules if m.startswith('tidegate')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['tidegate', 'tidegate.testing', 'tidegate.testing.plugin']"


def test_no_fixture_is_autouse() -> None:
    import inspect

    import tidegate.testing.plugin as plugin

    source = inspect.getsource(plugin)
    assert "autouse=" not in source
    for name in ("tidegate_broker", "tidegate_session_broker", "tidegate_bootstrap_servers",
                 "tidegate_broker_factory", "tidegate_config", "tidegate_session_config"):
        assert f"def {name}(" in source
