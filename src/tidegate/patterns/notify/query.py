"""The receiving side's reconciliation query (seed 001: the sender "provides a query
interface so the receiver can check and recover lost messages").

`NotificationQuery` answers, from the topics alone, what was sent since a time (or one
notification by id), each with its delivery state from the delivery log: ``delivered``,
``retry`` (failed so far, will be tried again), ``dead-lettered`` or ``pending`` (no
attempt logged yet). `query_app` serves it over HTTP (aiohttp):

- ``GET /notifications?since_ms=T[&key=K][&limit=N]``
- ``GET /notifications/<topic:partition:offset>``

Each query reads the source partitions from ``since_ms`` to their end and the delivery
log from its beginning (its retention bounds the cost): it is meant for occasional
reconciliation, not for every request.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from tidegate.client import Consumer, ConsumerRecord, TopicPartition
from tidegate.patterns._config import consumer_settings
from tidegate.patterns.notify.tracker import notification_id

__all__ = ["NotificationQuery", "query_app"]


def _read(c: Consumer, start: Mapping[TopicPartition, int], timeout_s: float
          ) -> list[ConsumerRecord]:
    """Every record from `start` to each partition's end (as of now)."""
    ends = c.end_offsets(list(start))
    todo = {tp: off for tp, off in start.items() if off < ends.get(tp, 0)}
    if not todo:
        return []
    c.assign(list(todo))
    for tp, off in todo.items():
        c.seek(tp, off)
    out: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while todo and time.monotonic() < deadline:
        for r in c.poll(200):
            out.append(r)
        todo = {tp: o for tp, o in todo.items() if c.position(tp) < ends[tp]}
    return out


def _describe(r: ConsumerRecord, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    d: dict[str, Any] = {"id": notification_id(r), "topic": r.topic,
                         "partition": r.partition, "offset": r.offset,
                         "timestamp": r.timestamp,
                         "key": r.key.decode("utf-8", "replace") if r.key else None}
    try:
        d["value"] = r.value.decode() if r.value is not None else None
    except UnicodeDecodeError:
        d["value_base64"] = base64.b64encode(r.value or b"").decode()
    d["state"] = attempts[-1]["outcome"] if attempts else "pending"
    d["attempts"] = attempts
    return d


class NotificationQuery:
    def __init__(self, config: Mapping[str, object], topics: Sequence[str],
                 log_topic: str = "notify.log", timeout_s: float = 30.0) -> None:
        self.config = dict(config)
        self.topics = list(topics)
        self.log_topic = log_topic
        self.timeout_s = timeout_s

    def _consumer(self) -> Consumer:
        return Consumer({**consumer_settings(self.config),
                         "group.id": f"tidegate-notify-query-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})

    def _attempts(self, ids: set[str]) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
        # A consumer of its own: reassigning one consumer to another topic costs a
        # metadata round and a fetch wait (seconds) per query.
        with self._consumer() as c:
            tps = [TopicPartition(self.log_topic, p)
                   for p in c.partitions_for_topic(self.log_topic)]
            for r in _read(c, c.beginning_offsets(tps), self.timeout_s):
                nid = r.key.decode() if r.key else ""
                if nid in out and r.value:
                    out[nid].append(json.loads(r.value))
        return out

    def since(self, since_ms: int, key: str | None = None, limit: int = 1000
              ) -> list[dict[str, Any]]:
        """The source records written at or after `since_ms` (and with `key`), oldest
        first per partition, at most `limit`, each with its delivery state."""
        with self._consumer() as c:
            tps = [TopicPartition(t, p) for t in self.topics for p in c.partitions_for_topic(t)]
            found = c.offsets_for_times({tp: since_ms for tp in tps})
            ends = c.end_offsets(tps)
            start = {tp: (o.offset if o is not None else ends[tp]) for tp, o in found.items()}
            records = [r for r in _read(c, start, self.timeout_s)
                       if key is None or r.key == key.encode()][:limit]
        attempts = self._attempts({notification_id(r) for r in records})
        return [_describe(r, attempts[notification_id(r)]) for r in records]

    def get(self, nid: str) -> dict[str, Any] | None:
        """One notification by id (``topic:partition:offset``); None if there is none."""
        topic, _, rest = nid.rpartition(":")
        topic, _, part = topic.rpartition(":")
        try:
            tp, offset = TopicPartition(topic, int(part)), int(rest)
        except ValueError:
            return None
        if topic not in self.topics:
            return None
        with self._consumer() as c:
            if tp.partition not in c.partitions_for_topic(topic):
                return None
            records = [r for r in _read(c, {tp: offset}, self.timeout_s) if r.offset == offset]
        if not records:
            return None
        return _describe(records[0], self._attempts({nid})[nid])


def query_app(query: NotificationQuery) -> web.Application:
    """The query over HTTP; each request runs the blocking query in a thread."""

    async def since(request: web.Request) -> web.Response:
        try:
            since_ms = int(request.query.get("since_ms", "0"))
            limit = int(request.query.get("limit", "1000"))
        except ValueError:
            return web.json_response({"error": "since_ms and limit are integers"}, status=400)
        found = await asyncio.to_thread(query.since, since_ms, request.query.get("key"), limit)
        return web.json_response({"notifications": found})

    async def one(request: web.Request) -> web.Response:
        found = await asyncio.to_thread(query.get, request.match_info["nid"])
        if found is None:
            return web.json_response({"error": "no such notification"}, status=404)
        return web.json_response(found)

    app = web.Application()
    app.router.add_get("/notifications", since)
    app.router.add_get("/notifications/{nid}", one)
    return app
