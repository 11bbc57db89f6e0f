"""Record batch compression codecs (attributes bits 0-2), backed by cramjam.

What each codec means on the wire, as the Java client and broker write it:

- GZIP: a gzip stream (RFC 1952); several concatenated members are accepted.
- SNAPPY: the snappy-java ("xerial") stream: the 16-byte header
  ``\\x82SNAPPY\\x00`` + int32 version + int32 compatible-version, then blocks of
  ``[int32 length][raw snappy block]``. librdkafka writes plain raw snappy instead, so
  `decompress` accepts both (as librdkafka, snappy-java and kafka-python do: a stream
  that starts with the magic is xerial, anything else is raw). `compress` writes xerial
  with 32 KiB blocks, like the Java client; every Kafka reader accepts that. The
  version fields are not checked, because some producers write them little-endian.
- LZ4: the standard LZ4 frame format (KIP-57). `compress` writes independent blocks and
  no content checksum, as Kafka's own KafkaLZ4BlockOutputStream does, because Java
  readers do not support linked blocks.
- ZSTD: a zstd frame (or several), level 3 by default like Kafka.

Default levels follow Kafka's producer defaults: gzip 6, lz4 fast mode, zstd 3.

Invariant: `decompress` raises `CorruptRecordError` (never a codec library exception)
for any input it cannot decode, and always returns `bytes`.
"""

from __future__ import annotations

import enum
import struct

import cramjam

from tidegate.common.errors import CorruptRecordError, InvalidConfigError

__all__ = ["Codec", "codec_from_name", "compress", "decompress"]

Buffer = bytes | bytearray | memoryview


class Codec(enum.IntEnum):
    """Compression codec ids, as stored in the low three bits of batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_BY_NAME = {
    "none": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_HEADER_SIZE = 16
XERIAL_BLOCK_SIZE = 32 * 1024
_BLOCK_LEN = struct.Struct(">i")

ZSTD_DEFAULT_LEVEL = 3
# LZ4 levels below 3 select the fast (non-HC) compressor. Kafka's default LZ4 level
# also maps to the fast compressor; cramjam's own default is HC, ten times slower.
LZ4_DEFAULT_LEVEL = 0


def codec_from_name(name: str) -> Codec:
    """Map a Kafka `compression.type` value to a codec.

    Accepts Kafka's exact (lower-case) names. The topic-level values "producer" and
    "uncompressed" mean something to the caller, not a codec, so they are rejected here
    like any unknown name.
    """
    codec = _BY_NAME.get(name)
    if codec is None:
        raise InvalidConfigError(
            f"unknown compression type {name!r}; expected one of {', '.join(_BY_NAME)}"
        )
    return codec


def compress(codec: Codec, data: Buffer, *, level: int | None = None) -> bytes:
    """Compress a records section with `codec` (`level` None = the codec's default)."""
    if codec == Codec.NONE:
        return bytes(data)
    if codec == Codec.GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == Codec.SNAPPY:
        return _xerial_compress(data)
    if codec == Codec.LZ4:
        compressor = cramjam.lz4.Compressor(
            level=LZ4_DEFAULT_LEVEL if level is None else level,
            content_checksum=False,
            block_linked=False,
        )
        # Compressor.compress takes only bytes, not other buffers.
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    if codec == Codec.ZSTD:
        return bytes(
            cramjam.zstd.compress(data, level=ZSTD_DEFAULT_LEVEL if level is None else level)
        )
    raise ValueError(f"unknown codec {codec!r}")


def decompress(codec: Codec | int, data: Buffer) -> bytes:
    """Decompress a records section; CorruptRecordError if it is not valid `codec` data."""
    if codec == Codec.NONE:
        return bytes(data)
    try:
        if codec == Codec.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Codec.SNAPPY:
            return _snappy_decompress(data)
        if codec == Codec.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == Codec.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as exc:
        # cramjam raises DecompressionError, but also ValueError/OverflowError for some
        # malformed inputs depending on version; any failure here means corrupt data.
        name = Codec(codec).name.lower()
        raise CorruptRecordError(f"cannot decompress {name} record data: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec id {int(codec)}")


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_BLOCK_LEN.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: Buffer) -> bytes:
    view = memoryview(data)
    if len(view) < XERIAL_HEADER_SIZE or view[:8] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    parts = []
    pos = XERIAL_HEADER_SIZE
    end = len(view)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError(f"snappy-java block length truncated at byte {pos}")
        (length,) = _BLOCK_LEN.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"snappy-java block of {length} bytes at byte {pos} exceeds the "
                f"{end - pos} bytes left"
            )
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(parts)
