"""Fetch sessions (KIP-227) over the wire: a session opened by a full fetch, incremental
fetches that list and answer only what changed, the session errors, and the Java-style
and librdkafka-style (sessionless) fetchers side by side on one broker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import BrokerProcess
from tests.integration.rawclient import RawClient

from tidegate.common.errors import ErrorCode

FETCH = 1
V = 12  # names topics (v13+ names them by id; the session logic is the same)
TOPIC = "sessions"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("sessions") / "data",
                      overrides={"max.incremental.fetch.session.cache.slots": "2"})
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 3, 1)]).values():
        f.result(10)
    try:
        yield b
    finally:
        b.stop()


def _produce(b: BrokerProcess, partition: int, n: int) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(TOPIC, f"v{i}".encode(), partition=partition)
    assert p.flush(10) == 0


def _fetch(c: RawClient, session_id: int, epoch: int, parts: dict[int, int],
           forgotten: tuple[int, ...] = (), wait_ms: int = 0) -> Any:
    return c.call(FETCH, V, {
        "cluster_id": None, "replica_id": -1, "max_wait": wait_ms, "min_bytes": 1,
        "max_bytes": 1 << 20, "isolation_level": 0, "session_id": session_id,
        "session_epoch": epoch,
        "topics": [{"topic": TOPIC, "partitions": [
            {"partition": p, "current_leader_epoch": -1, "fetch_offset": o,
             "last_fetched_epoch": -1, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20} for p, o in parts.items()]}] if parts else [],
        "forgotten_topics_data": (
            [{"topic": TOPIC, "partitions": list(forgotten)}] if forgotten else []),
        "rack_id": "",
    })


def _answered(resp: Any) -> dict[int, Any]:
    return {int(p.partition_index): p for t in resp.responses for p in t.partitions}


def test_session_lists_and_answers_only_what_changed(broker: BrokerProcess) -> None:
    _produce(broker, 0, 3)
    c = RawClient(broker.bootstrap)
    try:
        full = _fetch(c, 0, 0, {0: 0, 1: 0, 2: 0})
        assert full.error_code == 0 and full.session_id > 0
        assert sorted(_answered(full)) == [0, 1, 2]  # the opening fetch answers in full
        assert _answered(full)[0].records and _answered(full)[0].high_watermark == 3
        sid = full.session_id

        # the fetcher moved partition 0 on (listed at its new offset); nothing else
        # changed: nothing comes back
        quiet = _fetch(c, sid, 1, {0: 3})
        assert quiet.error_code == 0 and quiet.session_id == sid
        assert _answered(quiet) == {}

        # partition 2 gets data: answered without being listed, read at the position
        # the session holds
        _produce(broker, 2, 2)
        inc = _fetch(c, sid, 2, {})
        got = _answered(inc)
        assert sorted(got) == [2] and got[2].high_watermark == 2 and got[2].records

        # forgetting partition 2: new data there is no longer answered
        _fetch(c, sid, 3, {2: 2})
        _fetch(c, sid, 4, {}, forgotten=(2,))
        _produce(broker, 2, 1)
        assert _answered(_fetch(c, sid, 5, {})) == {}
        _produce(broker, 1, 1)
        assert sorted(_answered(_fetch(c, sid, 6, {}, wait_ms=2000))) == [1]

        # a replayed epoch and an unknown session: Kafka's errors, nothing read
        stale = _fetch(c, sid, 6, {})
        assert stale.error_code == ErrorCode.invalid_fetch_session_epoch
        assert stale.responses == ()
        unknown = _fetch(c, 2**30, 1, {})
        assert unknown.error_code == ErrorCode.fetch_session_id_not_found

        # epoch -1 closes it: the fetch is answered in full, sessionless
        closing = _fetch(c, sid, -1, {0: 0})
        assert closing.error_code == 0 and closing.session_id == 0
        assert sorted(_answered(closing)) == [0]
        assert _fetch(c, sid, 7, {}).error_code == ErrorCode.fetch_session_id_not_found
    finally:
        c.close()


def test_sessionless_and_session_fetchers_side_by_side(broker: BrokerProcess) -> None:
    """librdkafka never asks for a session; it must read as before while raw session
    fetchers fill the cache (2 slots here) and get refused a third (session id 0)."""
    _produce(broker, 1, 5)
    raws = [RawClient(broker.bootstrap) for _ in range(3)]
    try:
        ids = [_fetch(c, 0, 0, {1: 0}).session_id for c in raws]
        assert ids[0] > 0 and ids[1] > 0 and ids[2] == 0  # no slot left, nothing stale
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "side",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe([TOPIC])
            seen = 0
            for _ in range(50):
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None and msg.partition() == 1:
                    seen += 1
                if seen >= 5:
                    break
            assert seen >= 5
        finally:
            consumer.close()
    finally:
        for c in raws:
            c.close()
