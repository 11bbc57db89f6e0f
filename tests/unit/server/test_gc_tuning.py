"""The broker's collector thresholds (server/gc_tuning.py): set by `tune()`, left at
CPython's defaults when turned off, the older generations' thresholds untouched."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tidegate.server import gc_tuning


@pytest.fixture
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


@pytest.mark.usefixtures("thresholds")
def test_tune_raises_only_the_young_threshold() -> None:
    gc.set_threshold(700, 11, 12)
    assert gc_tuning.tune() is True
    assert gc.get_threshold() == (gc_tuning.YOUNG_THRESHOLD, 11, 12)


@pytest.mark.usefixtures("thresholds")
def test_tune_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    gc.set_threshold(700, 10, 10)
    monkeypatch.setenv("TIDEGATE_GC_TUNING", "0")
    assert gc_tuning.tune() is False
    assert gc.get_threshold() == (700, 10, 10)
