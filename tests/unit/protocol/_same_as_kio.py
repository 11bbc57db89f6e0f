"""`assert_same_as_kio`: a hand-written response encodes to kio's bytes, decodes strictly
as kio's class, and counts the same errors for the request metrics."""

from __future__ import annotations

from typing import Any

from tidegate.protocol.messages import decode, encode
from tidegate.server.metrics.requests import count_errors


def assert_same_as_kio(hand: Any, want: Any, kio_class: type, label: str) -> None:
    raw = encode(hand)
    assert raw == encode(want), label
    decode(kio_class, raw, strict=True)
    got_counts: dict[int, int] = {}
    want_counts: dict[int, int] = {}
    count_errors(hand, got_counts)
    count_errors(want, want_counts)
    assert got_counts == want_counts, label
