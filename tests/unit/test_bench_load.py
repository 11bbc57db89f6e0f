"""bench/load.py without a broker: which load `--load auto` picks and its fallback, the C
load's build, and the broker's malloc settings (server/malloc_tuning.py) it measures."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from bench import load

from tidegate.server import malloc_tuning


def test_auto_falls_back_to_python_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "unavailable",
                        lambda name: None if name == "python" else f"no {name} here")
    chosen, notes = load.choose("auto")
    assert chosen == "python"
    assert notes == ["c load unavailable: no c here", "java load unavailable: no java here"]
    chosen, notes = load.choose("c")
    assert chosen == "python" and notes[-1] == "falling back to the python load"


def test_the_c_load_builds_and_checks_its_arguments(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "C_BINARY", tmp_path / "load_producer")
    why = load.unavailable("c")
    if why is not None and "missing" in why:
        pytest.skip(why)  # no librdkafka-dev: `make deps-system`
    assert why is None
    out = subprocess.run([str(load.C_BINARY)], capture_output=True, text=True)
    assert out.returncode == 2 and "usage" in out.stderr
    assert load.choose("auto")[0] == "c"


def test_malloc_tuning_applies_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEGATE_MALLOC_TUNING", "0")
    assert malloc_tuning.tune() is False
    monkeypatch.delenv("TIDEGATE_MALLOC_TUNING")
    assert malloc_tuning.tune() is True  # glibc (Debian): mallopt takes both settings
