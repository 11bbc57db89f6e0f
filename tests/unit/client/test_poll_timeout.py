"""The blocking consumer's poll wait: milliseconds, or seconds as `timeout=`."""

from __future__ import annotations

import warnings

import pytest

from tidegate.client.consumer.blocking import DEFAULT_POLL_MS, poll_timeout_ms


def test_milliseconds_and_seconds() -> None:
    assert poll_timeout_ms(None, None) == DEFAULT_POLL_MS
    assert poll_timeout_ms(250, None) == 250
    assert poll_timeout_ms(None, 1.0) == 1000
    assert poll_timeout_ms(None, 0.25) == 250
    assert poll_timeout_ms(None, 0) == 0


def test_a_float_below_one_millisecond_is_refused_with_a_hint() -> None:
    with pytest.raises(ValueError, match=r"poll\(timeout=0.5\)"):
        poll_timeout_ms(0.5, None)


def test_a_float_timeout_ms_warns() -> None:
    with pytest.warns(UserWarning, match=r"poll\(timeout=1.0\)"):
        assert poll_timeout_ms(1.0, None) == 1


def test_an_int_timeout_ms_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert poll_timeout_ms(0, None) == 0


def test_both_or_negative_are_refused() -> None:
    with pytest.raises(TypeError):
        poll_timeout_ms(100, 1.0)
    with pytest.raises(ValueError):
        poll_timeout_ms(None, -1.0)
