"""Producer ids for InitProducerId, handed out in durable blocks; and the epoch-bump rule.

Ids: like Kafka's ProducerIdManager (seed 004: blocks of 1000 reserved by a versioned write
of `/latest_producer_id_block` in ZooKeeper), ids are reserved a block at a time. The
reservation is a small JSON file, `{"version": 1, "block_start": s, "block_end": e}`,
replaced atomically (temp file, fsync, rename, fsync of the directory).

Invariant: no id is returned before the block holding it is durable in the file. A new
manager (after a clean stop or a kill -9) starts at the recorded `block_end + 1`, so ids are
unique and increasing across restarts; a crash wastes at most the rest of one block. An
unreadable file is an error, never a silent restart from 0 (that would reuse ids).

Epochs (`bump_epoch`), Kafka's exact rule: epochs are int16 and a producer id's epoch is
"exhausted" at `epoch >= Short.MAX_VALUE - 1` (32766, TransactionMetadata.isEpochExhausted).
Then the next InitProducerId rotates to a fresh producer id with epoch 0 instead of
bumping. The last value, 32767, is kept free because fencing an ongoing transaction
(PrepareEpochFence) bumps the epoch once more without returning it to the client; that
bump must not overflow. So usable epochs per id are 0..32766 and a bump from 32765 gives
32766, a bump from 32766 (or 32767) rotates.

Note for the InitProducerId handler: without a transactional id, Kafka ignores the
request's producer id / epoch and always returns `next_id()` with epoch 0 ("always
blindly accept the request"); the idempotent Java client bumps its epoch locally (KIP-360)
and only asks again when its epoch reaches 32767. `bump_epoch` is therefore the
transaction coordinator's rule; using it for id-less InitProducerId that carries a valid
(id, epoch) is harmless to clients but not what Kafka does.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

from tidegate.common.errors import ErrorCode, KafkaError, KafkaStorageError
from tidegate.storage.files import atomic_write

__all__ = [
    "MAX_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "PRODUCER_ID_BLOCK_SIZE",
    "SHORT_MAX",
    "ProducerIdManager",
    "ProducerIdsExhaustedError",
    "bump_epoch",
    "is_epoch_exhausted",
]

PRODUCER_ID_BLOCK_SIZE = 1000
SHORT_MAX = 32767
MAX_PRODUCER_ID = (1 << 63) - 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_FILE_VERSION = 1


class ProducerIdsExhaustedError(KafkaError):
    """Every int64 producer id has been handed out (Kafka: "Have exhausted all producerIds")."""

    code = ErrorCode.unknown_server_error


def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= SHORT_MAX - 1


def bump_epoch(producer_id: int, epoch: int, allocate_id: Callable[[], int]) -> tuple[int, int]:
    """The (producer id, epoch) after one bump; `allocate_id` supplies a fresh id when the
    current one has none or its epochs are exhausted. Pure apart from that call."""
    if producer_id == NO_PRODUCER_ID or is_epoch_exhausted(epoch):
        return allocate_id(), 0
    if epoch < 0:  # NO_PRODUCER_EPOCH: a new id's first epoch
        return producer_id, 0
    return producer_id, epoch + 1


class ProducerIdManager:
    """Hands out unique producer ids, reserving blocks of `block_size` durably first.

    `next_id()` does file I/O (write + fsync) once per block; call it off the event loop
    (it is thread-safe) or accept one fsync per 1000 ids."""

    def __init__(
        self,
        state_file: Path,
        block_size: int = PRODUCER_ID_BLOCK_SIZE,
        *,
        reserve: Callable[[int], tuple[int, int]] | None = None,
    ) -> None:
        """`reserve(block_size) -> (first, last)`, when given, reserves blocks elsewhere
        (a cluster: `/latest_producer_id_block` in ZooKeeper, shared by every broker)
        instead of in `state_file`; it may block, and raises a KafkaError (retriable)
        when it cannot reserve."""
        if block_size < 1:
            raise ValueError("block_size must be positive")
        self.state_file = state_file
        self.block_size = block_size
        self._reserve = reserve
        self._lock = threading.Lock()
        self._reserved_end = -1 if reserve is not None else self._read_reserved_end()
        self._next = 0
        self._block_end = -1  # no block in hand until the first next_id()

    def _read_reserved_end(self) -> int:
        """block_end recorded in the file, or -1 when there is no file yet."""
        try:
            text = self.state_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return -1
        try:
            data = json.loads(text)
            version, start, end = data["version"], data["block_start"], data["block_end"]
            if version != _FILE_VERSION or not (isinstance(start, int) and isinstance(end, int)):
                raise ValueError(f"unsupported content {data!r}")
            if not 0 <= start <= end <= MAX_PRODUCER_ID:
                raise ValueError(f"bad block [{start}, {end}]")
        except (ValueError, KeyError, TypeError) as exc:
            raise KafkaStorageError(
                f"producer id block file {self.state_file} is unreadable ({exc}); refusing to "
                "guess, as restarting from 0 would reuse producer ids"
            ) from exc
        return end

    @property
    def current_block(self) -> tuple[int, int] | None:
        """(first, last) id of the block in hand, or None before the first next_id()."""
        with self._lock:
            if self._block_end < 0:
                return None
            return self._block_end - self.block_size + 1, self._block_end

    def next_id(self) -> int:
        with self._lock:
            if self._next > self._block_end:
                self._reserve_block()
            pid = self._next
            self._next += 1
            return pid

    def bump_epoch(self, producer_id: int, epoch: int) -> tuple[int, int]:
        return bump_epoch(producer_id, epoch, self.next_id)

    def _reserve_block(self) -> None:
        if self._reserve is not None:
            start, end = self._reserve(self.block_size)
            self._reserved_end, self._next, self._block_end = end, start, end
            return
        start = self._reserved_end + 1
        end = start + self.block_size - 1
        if end > MAX_PRODUCER_ID:
            raise ProducerIdsExhaustedError(f"cannot reserve producer ids beyond {start - 1}")
        payload = {"version": _FILE_VERSION, "block_start": start, "block_end": end}
        # Durable before any id of the block leaves this object.
        atomic_write(self.state_file, json.dumps(payload).encode("utf-8"))
        self._reserved_end = end
        self._next = start
        self._block_end = end
