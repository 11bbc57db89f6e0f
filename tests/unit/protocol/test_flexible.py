"""The shared readers of flexible versions' unsigned varints and tagged-field sections
(protocol/flexible.py), used by headers.py, guard.py and produce_request.py."""

from __future__ import annotations

import pytest

from tidegate.protocol.flexible import read_uvarint, skip_tagged_fields


class Bad(ValueError):
    pass


@pytest.mark.parametrize(("raw", "value"), [
    (b"\x00", 0), (b"\x7f", 127), (b"\x80\x01", 128), (b"\xff\xff\xff\xff\x0f", 2**32 - 1)])
def test_read_uvarint(raw: bytes, value: int) -> None:
    assert read_uvarint(b"\x09" + raw + b"\x09", 1, len(raw) + 1, Bad) == (value, len(raw) + 1)


@pytest.mark.parametrize(("raw", "end", "message"), [
    (b"\x80\x80", 2, "truncated varint"),
    (b"\x80\x01", 1, "truncated varint"),  # `end` bounds the read, not len(buf)
    (b"\x80\x80\x80\x80\x80\x01", 6, "varint too long"),  # over 5 bytes, as Kafka
])
def test_bad_uvarints_raise_the_callers_error(raw: bytes, end: int, message: str) -> None:
    with pytest.raises(Bad, match=message):
        read_uvarint(raw, 0, end, Bad)


def test_skip_tagged_fields_visits_each_field_and_skips_it() -> None:
    seen: list[tuple[int, int, int]] = []
    # two fields: tag 0 with 2 bytes, tag 5 with none; then a trailing byte
    buf = b"\x02" + b"\x00\x02ab" + b"\x05\x00" + b"Z"
    pos = skip_tagged_fields(buf, 0, len(buf), Bad, lambda *a: seen.append(a))
    assert buf[pos:] == b"Z"
    assert seen == [(0, 3, 5), (5, 7, 7)]
    assert skip_tagged_fields(buf, 0, len(buf), Bad) == pos


@pytest.mark.parametrize(("buf", "message"), [
    (b"\x7f\x00\x00", "127 tagged fields in 2 bytes"),
    (b"\x01\x03\x05ab", "tagged field 3 of 5 bytes runs past the end"),
    (b"\x01\x03", "truncated varint"),
])
def test_bad_tagged_sections_raise_the_callers_error(buf: bytes, message: str) -> None:
    with pytest.raises(Bad, match=message):
        skip_tagged_fields(buf, 0, len(buf), Bad)
