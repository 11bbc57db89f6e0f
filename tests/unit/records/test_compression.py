"""Codecs: round trips, the framings other clients write, and corrupt input."""

from __future__ import annotations

import gzip
import struct
import types

import cramjam
import pytest
from aiokafka import codec as aiokafka_codec
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_python_codec

from tidegate.common.errors import CorruptRecordError, InvalidConfigError
from tidegate.records.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    Codec,
    codec_from_name,
    compress,
    decompress,
)

ALL = list(Codec)
COMPRESSED = [c for c in Codec if c != Codec.NONE]
PAYLOADS = [b"", b"x", b"hello world " * 1000, bytes(range(256)) * 600]  # last: 5 blocks


@given(st.sampled_from(ALL), st.binary(max_size=2000))
@settings(max_examples=150)
def test_round_trip(codec: Codec, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", ALL)
@pytest.mark.parametrize("data", PAYLOADS, ids=["empty", "one", "text", "multiblock"])
def test_round_trip_buffers(codec: Codec, data: bytes) -> None:
    for wrap in (bytes, bytearray, memoryview, lambda b: memoryview(b"--" + b)[2:]):
        compressed = compress(codec, wrap(data))
        assert isinstance(compressed, bytes)
        out = decompress(codec, wrap(compressed))
        assert isinstance(out, bytes)
        assert out == data


# -- Other implementations as oracles, both directions -----------------------------

AIOKAFKA = {
    Codec.GZIP: (aiokafka_codec.gzip_encode, aiokafka_codec.gzip_decode),
    Codec.SNAPPY: (aiokafka_codec.snappy_encode, aiokafka_codec.snappy_decode),
    Codec.LZ4: (aiokafka_codec.lz4_encode, aiokafka_codec.lz4_decode),
    Codec.ZSTD: (aiokafka_codec.zstd_encode, aiokafka_codec.zstd_decode),
}


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("data", PAYLOADS[1:], ids=["one", "text", "multiblock"])
def test_aiokafka_codecs_agree(codec: Codec, data: bytes) -> None:
    encode, decode = AIOKAFKA[codec]
    assert decompress(codec, encode(data)) == data
    assert decode(compress(codec, data)) == data


@pytest.fixture
def kafka_python_snappy(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python's own xerial framing, over cramjam's raw snappy blocks (python-snappy
    is not installed)."""
    shim = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(b)),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(b)),
    )
    monkeypatch.setattr(kafka_python_codec, "snappy", shim)


@pytest.mark.usefixtures("kafka_python_snappy")
@pytest.mark.parametrize("data", PAYLOADS[1:], ids=["one", "text", "multiblock"])
def test_kafka_python_snappy_agrees(data: bytes) -> None:
    xerial = kafka_python_codec.snappy_encode(data)
    raw = kafka_python_codec.snappy_encode(data, xerial_compatible=False)
    assert xerial.startswith(XERIAL_MAGIC)
    assert decompress(Codec.SNAPPY, xerial) == data
    assert decompress(Codec.SNAPPY, raw) == data
    assert kafka_python_codec.snappy_decode(compress(Codec.SNAPPY, data)) == data


@pytest.mark.parametrize("data", PAYLOADS[1:], ids=["one", "text", "multiblock"])
def test_gzip_matches_stdlib(data: bytes) -> None:
    assert decompress(Codec.GZIP, gzip.compress(data)) == data
    assert gzip.decompress(compress(Codec.GZIP, data)) == data
    # Concatenated members (GZIPInputStream reads them all).
    assert decompress(Codec.GZIP, gzip.compress(data) + gzip.compress(b"!")) == data + b"!"


# -- Framing details -------------------------------------------------------------------


def test_snappy_writes_xerial_blocks_of_32k() -> None:
    data = bytes(range(256)) * 300  # 76800 bytes: blocks of 32768, 32768, 11264
    out = compress(Codec.SNAPPY, data)
    assert out[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    pos, sizes = 16, []
    while pos < len(out):
        (n,) = struct.unpack_from(">i", out, pos)
        sizes.append(len(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + n])))
        pos += 4 + n
    assert sizes == [XERIAL_BLOCK_SIZE, XERIAL_BLOCK_SIZE, len(data) - 2 * XERIAL_BLOCK_SIZE]


def test_snappy_reads_raw_blocks_like_librdkafka() -> None:
    data = b"librdkafka " * 500
    assert decompress(Codec.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_ignores_xerial_version_fields() -> None:
    # Some producers write version/compat little-endian; readers must not care.
    data = b"abc" * 100
    block = bytes(cramjam.snappy.compress_raw(data))
    stream = XERIAL_MAGIC + struct.pack("<ii", 1, 1) + struct.pack(">i", len(block)) + block
    assert decompress(Codec.SNAPPY, stream) == data
    assert decompress(Codec.SNAPPY, XERIAL_MAGIC + b"\0" * 8) == b""


def test_lz4_frame_flags_match_kafka() -> None:
    out = compress(Codec.LZ4, b"lz4 " * 50_000)
    assert out[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks (Java cannot read linked blocks)
    assert not flg & 0x04  # no content checksum
    assert (bd >> 4) & 0x7 == 4  # 64 KiB max block size, like KafkaLZ4BlockOutputStream


def test_zstd_reads_streamed_and_multiframe() -> None:
    data = b"zstd " * 1000
    streamer = cramjam.zstd.Compressor()
    streamer.compress(data)
    streamed = bytes(streamer.finish())  # no content size in the frame header
    assert decompress(Codec.ZSTD, streamed) == data
    assert decompress(Codec.ZSTD, streamed + compress(Codec.ZSTD, b"!")) == data + b"!"


# -- Corrupt input ------------------------------------------------------------------------


def _xerial(*blocks: bytes) -> bytes:
    return XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"".join(blocks)


@pytest.mark.parametrize(
    ("codec", "data", "message"),
    [
        (Codec.GZIP, b"\x1f\x8b not really gzip", "gzip"),
        (Codec.GZIP, gzip.compress(b"abc" * 100, mtime=0)[:-5], "gzip"),
        (Codec.LZ4, b"", "lz4"),
        (Codec.LZ4, b"\x04\x22\x4d\x18junk", "lz4"),
        (Codec.ZSTD, b"\x28\xb5\x2f\xfd junk", "zstd"),
        (Codec.SNAPPY, b"\xff\xff\xff\xff\x0fjunk", "snappy"),
        (Codec.SNAPPY, _xerial(b"\x00\x00"), "block length truncated"),
        (Codec.SNAPPY, _xerial(struct.pack(">i", 100), b"short"), "exceeds"),
        (Codec.SNAPPY, _xerial(struct.pack(">i", -1)), "exceeds"),
        (Codec.SNAPPY, _xerial(struct.pack(">i", 4), b"\xff\xff\xff\xff"), "snappy"),
        (5, b"whatever", "unknown compression codec id 5"),
    ],
)
def test_corrupt_input_raises_corrupt_record_error(codec: int, data: bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decompress(codec, data)


@given(st.sampled_from(COMPRESSED), st.binary(max_size=200))
@settings(max_examples=300)
def test_random_input_raises_only_corrupt_record_error(codec: Codec, data: bytes) -> None:
    try:
        decompress(codec, data)
    except CorruptRecordError:
        pass


@given(st.sampled_from(COMPRESSED), st.data())
@settings(max_examples=100)
def test_damaged_output_raises_only_corrupt_record_error(codec: Codec, data: st.DataObject) -> None:
    good = bytearray(compress(codec, b"payload " * 200))
    i = data.draw(st.integers(0, len(good) - 1))
    good[i] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(good)))
    try:
        decompress(codec, bytes(good[:cut]))
    except CorruptRecordError:
        pass


# -- Names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "codec"),
    [("none", Codec.NONE), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)],
)
def test_codec_from_name(name: str, codec: int) -> None:
    assert codec_from_name(name) == codec


@pytest.mark.parametrize("name", ["producer", "uncompressed", "GZIP", "", "brotli"])
def test_codec_from_name_rejects_others(name: str) -> None:
    with pytest.raises(InvalidConfigError, match="unknown compression type"):
        codec_from_name(name)
