"""Frame decoding: any split of a byte stream yields the same frames; bad sizes raise."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.protocol.framing import FrameDecoder, FrameTooLargeError, encode_frame


@given(st.lists(st.binary(max_size=300), max_size=20), st.data())
@settings(max_examples=200)
def test_any_chunking_gives_same_frames(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    dec = FrameDecoder()
    out: list[bytes] = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out += dec.feed(stream[prev:cut])
        prev = cut
    assert out == payloads
    assert dec.buffered == 0


@pytest.mark.parametrize("size", [-1, -(2**31), 1001])
def test_bad_sizes_are_rejected(size: int) -> None:
    dec = FrameDecoder(max_frame_bytes=1000)
    with pytest.raises(FrameTooLargeError):
        dec.feed(struct.pack(">i", size) + b"x" * 10)


def test_partial_frame_waits() -> None:
    dec = FrameDecoder()
    assert dec.feed(struct.pack(">i", 10) + b"abc") == []
    assert dec.pending_frame_size() == 10
    assert dec.feed(b"defghij") == [b"abcdefghij"]


def test_mutable_chunks_are_copied_not_referenced() -> None:
    """A caller may reuse its receive buffer: a partial frame must not change with it."""
    dec = FrameDecoder()
    chunk = bytearray(struct.pack(">i", 6) + b"abc")
    assert dec.feed(chunk) == []
    chunk[4:7] = b"XYZ"
    assert dec.feed(memoryview(bytearray(b"def"))) == [b"abcdef"]
    assert dec.buffered == 0


def test_size_prefix_split_across_chunks() -> None:
    dec = FrameDecoder()
    stream = encode_frame(b"hello") + encode_frame(b"") + encode_frame(b"world")
    out = [f for b in stream for f in dec.feed(bytes([b]))]
    assert out == [b"hello", b"", b"world"]
    assert dec.pending_frame_size() is None
