"""Kafka RecordBatch v2: headers, records, compression and transaction markers.

Sans-IO: bytes in, values out (and back), no clock, no sockets. Modules:

- `batch`: the 61-byte batch header: parse, validate (CRC-32C), patch in place;
- `record`: `Record` and decoding records out of batches (`decode_records`,
  `iter_batches`);
- `builder`: `BatchBuilder` / `build_batch`, records to a complete batch;
- `control`: COMMIT / ABORT control records and marker batches;
- `compression`: the gzip / snappy / lz4 / zstd codecs of attributes bits 0-2;
- `varint`: zigzag varints.

Malformed input raises `CorruptRecordError` or `InvalidRecordError` from
`tidegate.common.errors`.
"""

from tidegate.records.batch import BatchHeader, iter_headers, parse_header, validate_batch
from tidegate.records.builder import BatchBuilder, build_batch
from tidegate.records.compression import Codec, codec_from_name, compress, decompress
from tidegate.records.control import ControlType, build_control_batch, parse_control_record
from tidegate.records.record import Record, decode_records, iter_batches

__all__ = [
    "BatchBuilder",
    "BatchHeader",
    "Codec",
    "ControlType",
    "Record",
    "build_batch",
    "build_control_batch",
    "codec_from_name",
    "compress",
    "decode_records",
    "decompress",
    "iter_batches",
    "iter_headers",
    "parse_control_record",
    "parse_header",
    "validate_batch",
]
