"""Garbled request bodies for the hand-written decoders' tests (test_produce_request.py,
test_txn_requests.py, test_txn_offsets.py): one way to damage a body, and the check
that kio (behind `guard.check`) and the hand decoder refuse it in both or in neither.

The one accepted difference: kio refuses a tagged field it does not know, Kafka's
parsers (and the hand decoders) skip it, as a newer client may send one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

# the @given arguments of a garbling: where to cut, where to write, what, and how
GARBLINGS: dict[str, st.SearchStrategy[Any]] = {
    "cut": st.integers(0, 10_000),
    "at": st.integers(0, 10_000),
    "junk": st.binary(min_size=1, max_size=6),
    "how": st.sampled_from(["cut", "set", "insert"]),
}


def garble(raw: bytes, cut: int, at: int, junk: bytes, how: str) -> bytes:
    """`raw` cut short, overwritten with `junk` at some point, or with `junk` inserted."""
    i = at % (len(raw) + 1)
    if how == "cut":
        return raw[: cut % (len(raw) + 1)]
    if how == "set":
        return raw[:i] + junk + raw[i + len(junk):]
    return raw[:i] + junk + raw[i:]


def assert_both_or_neither(bad: bytes, kio: Callable[[bytes], Any],
                           hand: Callable[[bytes], Any], hand_error: type[Exception],
                           label: str) -> None:
    """`kio(bad)` and `hand(bad)` (each returning comparable plain values) both fail,
    or both succeed with the same values."""
    try:
        want: Any = kio(bad)
    except KeyError as e:  # an unknown tagged field: kio refuses it, Kafka skips it
        assert "Unknown tagged field" in str(e)
        want = "skipped"
    except Exception:
        want = "error"
    try:
        got: Any = hand(bad)
        if want == "skipped":
            got = "skipped"
    except hand_error:
        got = "error"
    if want == "skipped" and got == "error":  # a later fault kio never reached
        return
    assert got == want, f"{label}: {bad.hex()}"
