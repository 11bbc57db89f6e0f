"""A tiny in-memory Kafka broker for client unit tests (no storage, no server package).

It speaks the real wire protocol through kio: ApiVersions, Metadata, Produce, Fetch and
ListOffsets, for one node. Tests can inject partition errors into Produce responses,
delay responses, and restrict the advertised versions, to exercise retries, timeouts,
pipelining and version negotiation deterministically.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.schema.index import api_key_map, schema_name_map

from tidegate.protocol.framing import FrameDecoder, encode_frame
from tidegate.protocol.headers import encode_response_header, parse_request_header
from tidegate.protocol.messages import (
    build,
    decode,
    encode,
    is_flexible,
    ms,
    request_class,
    response_class,
)
from tidegate.records.batch import set_base_offset, validate_batch
from tidegate.records.record import iter_batches


def kio_range(api_key: int) -> tuple[int, int]:
    vs = sorted(schema_name_map[api_key_map[api_key]])
    return vs[0], vs[-1]


@dataclass
class Partition:
    batches: list[bytes] = field(default_factory=list)
    next_offset: int = 0


@dataclass
class FakeBroker:
    topics: dict[str, int] = field(default_factory=dict)  # name -> partitions
    versions: dict[int, tuple[int, int]] = field(default_factory=lambda: {
        k: kio_range(k) for k in (0, 1, 2, 3, 18)})
    produce_errors: dict[tuple[str, int], list[int]] = field(
        default_factory=lambda: defaultdict(list))
    delay_s: dict[int, float] = field(default_factory=dict)  # api key -> response delay
    requests: list[tuple[int, int]] = field(default_factory=list)  # (api_key, version)
    produce_requests: int = 0
    log: dict[tuple[str, int], Partition] = field(default_factory=lambda: defaultdict(Partition))
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    port: int = 0
    connections: int = 0
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    async def start(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        """Stop listening and drop every client connection (the log is kept)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.close()
        self._writers.clear()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def topic_id(self, name: str) -> uuid.UUID:
        return self.topic_ids.setdefault(name, uuid.uuid4())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        decoder = FrameDecoder()
        lock = asyncio.Lock()
        pending: list[asyncio.Task[None]] = []
        order: asyncio.Queue[asyncio.Future[bytes | None]] = asyncio.Queue()

        async def respond() -> None:
            while True:
                fut = await order.get()
                data = await fut
                if data is not None:
                    async with lock:
                        writer.write(data)

        responder = asyncio.create_task(respond())
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    fut: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
                    order.put_nowait(fut)
                    pending.append(asyncio.create_task(self._answer(frame, fut)))
        except ConnectionError:
            pass
        finally:
            responder.cancel()
            for t in pending:
                t.cancel()
            writer.close()

    async def _answer(self, frame: bytes, fut: asyncio.Future[bytes | None]) -> None:
        api_key = int.from_bytes(frame[:2], "big")
        version = int.from_bytes(frame[2:4], "big")
        self.requests.append((api_key, version))
        lo, hi = self.versions.get(api_key, (0, -1))
        if api_key == 18 and not lo <= version <= hi:
            cid = int.from_bytes(frame[4:8], "big")
            body = build(response_class(18, 0), {"error_code": 35, "api_keys": [
                {"api_key": 18, "min_version": lo, "max_version": hi}]})
            fut.set_result(encode_frame(encode_response_header(cid, False) + encode(body)))
            return
        header, pos = parse_request_header(frame, is_flexible(api_key, version))
        req = decode(request_class(api_key, version), frame, pos)
        await asyncio.sleep(self.delay_s.get(api_key, 0))
        handler = getattr(self, f"_api_{api_key}")
        data = handler(req)
        if api_key == 1 and not any(p["records"] or p["error_code"]
                                    for t in data["responses"] for p in t["partitions"]):
            # long poll, briefly (an error is answered at once, as a broker does)
            await asyncio.sleep(min(ms(req.max_wait), 100) / 1000)
        if data is None:
            fut.set_result(None)
            return
        cls = response_class(api_key, version)
        flexible = bool(getattr(cls, "__flexible__", False)) and api_key != 18
        fut.set_result(encode_frame(encode_response_header(header.correlation_id, flexible)
                                    + encode(build(cls, data))))

    def _api_18(self, req: Any) -> dict[str, Any]:
        return {"error_code": 0, "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi}
            for k, (lo, hi) in sorted(self.versions.items())]}

    def _api_3(self, req: Any) -> dict[str, Any]:
        names = list(self.topics) if req.topics is None else [t.name for t in req.topics]
        topics = []
        for name in names:
            if name not in self.topics:
                topics.append({"name": name, "error_code": 3, "partitions": []})
                continue
            topics.append({"name": name, "error_code": 0, "topic_id": self.topic_id(name),
                           "partitions": [{"partition_index": p, "leader_id": 1,
                                           "error_code": 0, "replica_nodes": [1],
                                           "isr_nodes": [1]}
                                          for p in range(self.topics[name])]})
        return {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.port}],
                "controller_id": 1, "cluster_id": "fake", "topics": topics}

    def _name(self, t: Any, attr: str = "name") -> str:
        name = getattr(t, attr, None)
        if name:
            return str(name)
        by_id = {v: k for k, v in self.topic_ids.items()}
        return by_id[t.topic_id]

    def _api_0(self, req: Any) -> dict[str, Any] | None:
        self.produce_requests += 1
        responses = []
        for t in req.topic_data:
            name = self._name(t)
            parts = []
            for p in t.partition_data:
                errors = self.produce_errors.get((name, p.index))
                if errors:
                    parts.append({"index": p.index, "error_code": errors.pop(0),
                                  "base_offset": -1})
                    continue
                part = self.log[(name, p.index)]
                buf = bytearray(p.records)
                header = validate_batch(buf)
                base = part.next_offset
                set_base_offset(buf, 0, base)
                part.batches.append(bytes(buf))
                part.next_offset = base + header.last_offset_delta + 1
                parts.append({"index": p.index, "error_code": 0, "base_offset": base,
                              "log_append_time": -1, "log_start_offset": 0})
            responses.append({"name": name, "topic_id": self.topic_ids.get(name),
                              "partition_responses": parts})
        if req.acks == 0:
            return None
        return {"responses": responses}

    def _api_1(self, req: Any) -> dict[str, Any]:
        responses = []
        for t in req.topics:
            name = self._name(t, "topic")
            parts = []
            for p in t.partitions:
                part = self.log[(name, p.partition)]
                if p.fetch_offset > part.next_offset:
                    parts.append({"partition_index": p.partition, "error_code": 1,
                                  "high_watermark": part.next_offset, "records": None})
                    continue
                out = b""
                for b in part.batches:
                    (hdr, _), = iter_batches(b)
                    if hdr.next_offset > p.fetch_offset and len(out) < p.partition_max_bytes:
                        out += b
                parts.append({"partition_index": p.partition, "error_code": 0,
                              "high_watermark": part.next_offset,
                              "last_stable_offset": part.next_offset, "log_start_offset": 0,
                              "aborted_transactions": [], "records": out})
            responses.append({"topic": name, "topic_id": self.topic_ids.get(name),
                              "partitions": parts})
        return {"throttle_time": 0, "error_code": 0, "responses": responses}

    def _api_2(self, req: Any) -> dict[str, Any]:
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                part = self.log[(t.name, p.partition_index)]
                ts = p.timestamp
                offset, found_ts = -1, -1
                if ts == -2:
                    offset = 0
                elif ts == -1:
                    offset = part.next_offset
                else:
                    for b in part.batches:
                        for _, records in iter_batches(b):
                            for r in records:
                                if offset < 0 and r.timestamp >= ts:
                                    offset, found_ts = r.offset, r.timestamp
                parts.append({"partition_index": p.partition_index, "error_code": 0,
                              "offset": offset, "timestamp": found_ts})
            topics.append({"name": t.name, "partitions": parts})
        return {"topics": topics}


__all__ = ["FakeBroker"]


@contextlib.contextmanager
def on_loop_thread(topics: dict[str, int]) -> Iterator[FakeBroker]:
    """A `FakeBroker` served from its own loop thread, for blocking-client tests."""
    with serve_on_loop_thread(FakeBroker(topics=topics)) as b:
        yield b


_B = TypeVar("_B", bound=FakeBroker)


@contextlib.contextmanager
def serve_on_loop_thread(b: _B) -> Iterator[_B]:
    """`b` (a `FakeBroker` or a subclass) served from its own loop thread."""
    from tidegate.client.loop_thread import LoopThread

    host = LoopThread("fake-broker")
    host.run(b.start())
    try:
        yield b
    finally:
        host.run(b.stop())
        host.stop()
