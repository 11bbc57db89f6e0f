"""`FakeBroker` plus InitProducerId and the broker's sequence checks, for producer tests.

Per partition and producer id it keeps the last 5 batches' sequence ranges and offsets:
a repeat of one is answered NONE with its original offset, a batch continuing the last
sequence is written, anything else is OUT_OF_ORDER_SEQUENCE_NUMBER; an unknown producer
id is accepted at any sequence (as Kafka >= 2.5). `drop_after_write` lists Produce
request numbers (1-based) after which every connection is closed without an answer,
the batch being written: the client sees a lost response. `seen` records every
(partition, producer id, epoch, base sequence, count) the broker received.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tidegate.records.batch import set_base_offset, validate_batch

from .fake_broker import FakeBroker, kio_range

__all__ = ["FakeIdempotentBroker"]

Key = tuple[str, int]


@dataclass
class FakeIdempotentBroker(FakeBroker):
    next_producer_id: int = 1000
    init_requests: list[tuple[int, int]] = field(default_factory=list)  # (pid, epoch) sent
    drop_after_write: set[int] = field(default_factory=set)
    seen: list[tuple[Key, int, int, int, int]] = field(default_factory=list)
    # (key, pid) -> deque of (first seq, last seq, base offset), newest last
    producers: dict[tuple[Key, int], deque[tuple[int, int, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.versions[22] = kio_range(22)

    def _api_22(self, req: Any) -> dict[str, Any]:
        self.init_requests.append(
            (
                int(req.producer_id) if hasattr(req, "producer_id") else -1,
                int(req.producer_epoch) if hasattr(req, "producer_epoch") else -1,
            )
        )
        pid = self.next_producer_id
        self.next_producer_id += 1
        return {"throttle_time": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}

    def _api_0(self, req: Any) -> dict[str, Any] | None:
        self.produce_requests += 1
        drop = self.produce_requests in self.drop_after_write
        responses = []
        for t in req.topic_data:
            name = self._name(t)
            parts = []
            for p in t.partition_data:
                parts.append({"index": p.index, **self._write((name, p.index), p.records)})
            responses.append(
                {"name": name, "topic_id": self.topic_ids.get(name), "partition_responses": parts}
            )
        if drop:
            for w in list(self._writers):
                w.close()
            return None
        return {"responses": responses}

    def _write(self, key: Key, records: bytes) -> dict[str, Any]:
        errors = self.produce_errors.get(key)
        if errors:
            return {"error_code": errors.pop(0), "base_offset": -1}
        buf = bytearray(records)
        h = validate_batch(buf)
        count = h.last_offset_delta + 1
        self.seen.append((key, h.producer_id, h.producer_epoch, h.base_sequence, count))
        cache = None
        if h.producer_id >= 0:
            cache = self.producers.setdefault((key, h.producer_id), deque(maxlen=5))
            first, last = h.base_sequence, h.last_sequence
            for f, lst, off in cache:
                if (f, lst) == (first, last):
                    return {
                        "error_code": 0,
                        "base_offset": off,
                        "log_append_time": -1,
                        "log_start_offset": 0,
                    }
            if cache and first != (cache[-1][1] + 1) % (1 << 31):
                return {"error_code": 45, "base_offset": -1}
        part = self.log[key]
        base = part.next_offset
        set_base_offset(buf, 0, base)
        part.batches.append(bytes(buf))
        part.next_offset = base + count
        if cache is not None:
            cache.append((h.base_sequence, h.last_sequence, base))
        return {"error_code": 0, "base_offset": base, "log_append_time": -1, "log_start_offset": 0}

    def values(self, topic: str, partition: int) -> list[bytes | None]:
        from tidegate.records.record import iter_batches

        out: list[bytes | None] = []
        for b in self.log[(topic, partition)].batches:
            for _, records in iter_batches(b):
                out.extend(r.value for r in records)
        return out
