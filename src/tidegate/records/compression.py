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

Bounded output: `decompress(..., max_size=n)` never holds more than `n` bytes of output
(a compression bomb is stopped once it has produced `n` bytes, not after inflating it):
it decompresses into a buffer sized from a hint (the gzip ISIZE trailer, the zstd/LZ4
frame content size, the snappy length prefixes, else a multiple of the input) and, when
that buffer is too small, retries with one four times larger, up to `n`. Output over `n`
raises `DecompressedSizeError` (INVALID_RECORD: not retriable, so a producer fails fast
instead of resending the same batch until its delivery timeout).
"""

from __future__ import annotations

import enum
import struct

import cramjam

from tidegate.common.errors import CorruptRecordError, InvalidConfigError, InvalidRecordError

__all__ = ["Codec", "DecompressedSizeError", "codec_from_name", "compress", "decompress"]

Buffer = bytes | bytearray | memoryview


class DecompressedSizeError(InvalidRecordError):
    """Decompressed record data would exceed the caller's `max_size` (INVALID_RECORD)."""


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


def decompress(codec: Codec | int, data: Buffer, *, max_size: int | None = None) -> bytes:
    """Decompress a records section; CorruptRecordError if it is not valid `codec` data,
    DecompressedSizeError if `max_size` is given and the output would be larger."""
    if codec == Codec.NONE:
        return bytes(data)
    try:
        if max_size is not None:
            return _decompress_bounded(Codec(codec), data, max_size)
        if codec == Codec.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == Codec.SNAPPY:
            return _snappy_decompress(data)
        if codec == Codec.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == Codec.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except (CorruptRecordError, DecompressedSizeError):
        raise
    except Exception as exc:
        # cramjam raises DecompressionError, but also ValueError/OverflowError for some
        # malformed inputs depending on version; any failure here means corrupt data.
        if not 0 <= int(codec) <= 4:
            raise CorruptRecordError(f"unknown compression codec id {int(codec)}") from None
        name = Codec(codec).name.lower()
        raise CorruptRecordError(f"cannot decompress {name} record data: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec id {int(codec)}")


# cramjam's *_into functions stop, with this message, once the output buffer is full.
_BUFFER_FULL = "failed to write whole buffer"
_MIN_GUESS = 64 * 1024
_GUESS_RATIO = 8
_GROWTH = 4
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _decompress_bounded(codec: Codec, data: Buffer, max_size: int) -> bytes:
    if codec == Codec.SNAPPY:
        return _snappy_decompress(data, max_size)
    if codec == Codec.GZIP:
        into, hint = cramjam.gzip.decompress_into, _gzip_size_hint(data)
    elif codec == Codec.LZ4:
        into, hint = cramjam.lz4.decompress_into, _lz4_size_hint(data)
    elif codec == Codec.ZSTD:
        into, hint = cramjam.zstd.decompress_into, _zstd_size_hint(data)
    else:
        raise CorruptRecordError(f"unknown compression codec id {int(codec)}")
    if hint is None:
        hint = max(_MIN_GUESS, _GUESS_RATIO * len(data))
    size = max(0, min(max_size, hint))
    while True:
        buf = bytearray(size)
        try:
            n = into(data, buf)
        except Exception as exc:
            if _BUFFER_FULL not in str(exc):
                raise
            if size >= max_size:
                raise DecompressedSizeError(
                    f"{codec.name.lower()} record data decompresses to more than {max_size} bytes"
                ) from None
            size = min(max_size, max(size * _GROWTH, _MIN_GUESS))
            continue
        return bytes(buf) if n == size else bytes(memoryview(buf)[:n])


def _gzip_size_hint(data: Buffer) -> int | None:
    # ISIZE, the last 4 bytes: the (last member's) uncompressed size mod 2**32.
    if len(data) < 18:
        return None
    return int.from_bytes(memoryview(data)[-4:], "little") or None


def _zstd_size_hint(data: Buffer) -> int | None:
    """The first frame's Frame_Content_Size, when its header has one (RFC 8878 3.1.1)."""
    view = memoryview(data)
    if len(view) < 6 or view[:4] != _ZSTD_MAGIC:
        return None
    fhd = view[4]
    single_segment = (fhd >> 5) & 1
    fcs_size = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
    if not fcs_size:
        return None
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3]
    if len(view) < pos + fcs_size:
        return None
    value = int.from_bytes(view[pos : pos + fcs_size], "little")
    return value + 256 if fcs_size == 2 else value


def _lz4_size_hint(data: Buffer) -> int | None:
    """The frame's content size, when its FLG byte says it is present (bit 3)."""
    view = memoryview(data)
    if len(view) < 15 or view[:4] != _LZ4_MAGIC or not view[4] & 0x08:
        return None
    return int.from_bytes(view[6:14], "little")


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_BLOCK_LEN.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: Buffer, max_size: int | None = None) -> bytes:
    """Raw or xerial snappy. With `max_size`, every block's declared (raw snappy length
    prefix) size is added up and checked before anything is decompressed."""
    view = memoryview(data)
    if len(view) < XERIAL_HEADER_SIZE or view[:8] != XERIAL_MAGIC:
        if max_size is not None:
            _check_snappy_total(cramjam.snappy.decompress_raw_len(view), max_size)
        return bytes(cramjam.snappy.decompress_raw(view))
    if max_size is not None:
        _check_snappy_total(_xerial_total(view), max_size)
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


def _xerial_total(view: memoryview) -> int:
    total = 0
    pos = XERIAL_HEADER_SIZE
    end = len(view)
    while pos + 4 <= end:
        (length,) = _BLOCK_LEN.unpack_from(view, pos)
        pos += 4
        if length < 0 or length > end - pos:
            break  # reported by the decoding loop
        total += cramjam.snappy.decompress_raw_len(view[pos : pos + length])
        pos += length
    return total


def _check_snappy_total(total: int, max_size: int) -> None:
    if total > max_size:
        raise DecompressedSizeError(
            f"snappy record data decompresses to {total} bytes, more than {max_size}"
        )
