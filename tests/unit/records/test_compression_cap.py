"""`decompress(..., max_size=n)`: output up to n bytes is returned whole, more is refused
without being inflated."""

from __future__ import annotations

import os

import pytest

from tidegate.common.errors import CorruptRecordError
from tidegate.records.compression import Codec, DecompressedSizeError, compress, decompress

CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 1000, 70_000, 300_000])
def test_output_up_to_the_cap_is_returned(codec: Codec, size: int) -> None:
    data = os.urandom(size // 2) + bytes(size - size // 2)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=size) == data
    assert decompress(codec, packed, max_size=size * 100 + 10) == data
    if size:
        with pytest.raises(DecompressedSizeError):
            decompress(codec, packed, max_size=size - 1)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.LZ4, Codec.ZSTD])
def test_concatenated_frames_and_lying_size_hints(codec: Codec) -> None:
    # Two frames: the size hint read from the first (or the gzip trailer) is too small.
    a, b = b"a" * 200_000, os.urandom(50_000)
    packed = compress(codec, a) + compress(codec, b)
    assert decompress(codec, packed, max_size=1 << 20) == a + b


@pytest.mark.parametrize("codec", CODECS)
def test_garbage_is_still_corrupt(codec: Codec) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x00\x01garbage" * 3, max_size=1 << 20)
