"""Type stub of the optional C extension built from `_speedups.c` (see `_accel.py`)."""

from collections.abc import Sequence
from typing import TypeVar

_T = TypeVar("_T")

_Buffer = bytes | bytearray | memoryview
_Header = tuple[str, bytes | None]

def decode_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    /,
) -> list[tuple[int, int, bytes | None, bytes | None, tuple[_Header, ...]]]: ...
def decode_records_as(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    cls: type[_T],
    topic: str,
    partition: int,
    timestamp_type: int,
    /,
) -> list[_T]: ...
def gc_track(obj: object, /) -> None: ...
def validate_records(
    data: _Buffer, count: int, base_timestamp: int, /
) -> tuple[int | None, int | None, int, int]: ...
def parse_header(buf: _Buffer, pos: int, cls: type[_T], /) -> _T: ...
def check_batch(
    buf: _Buffer, pos: int, cls: type[_T], scan: bool, /
) -> tuple[_T, tuple[int | None, int | None, int, int] | None]: ...
def stamp_header(
    buf: _Buffer, pos: int, base_offset: int, leader_epoch: int | None, cls: type[_T], /
) -> tuple[bytearray, _T]: ...
def encode_record(
    buf: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: _Buffer | None,
    value: _Buffer | None,
    headers: Sequence[tuple[str, _Buffer | None]] = (),
    /,
) -> None: ...

class RecordBuffer:
    """C version of `builder._PyRecordBuffer`; `BatchBuilder`'s base class."""

    @property
    def _buf(self) -> bytearray: ...
    @property
    def _count(self) -> int: ...
    @property
    def _base_ts(self) -> int: ...
    @property
    def _max_ts(self) -> int: ...
    def __len__(self) -> int: ...
    def append(
        self,
        timestamp: int,
        key: _Buffer | None,
        value: _Buffer | None,
        headers: Sequence[tuple[str, _Buffer | None]] = (),
    ) -> int: ...
    def estimated_size(self) -> int: ...
