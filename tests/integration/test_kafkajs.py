"""KafkaJS, an unmodified Node.js Kafka client, against a real Tidegate broker.

KafkaJS speaks older API versions than librdkafka (Produce v7, Fetch v11, JoinGroup v5,
Metadata v6...) and has its own group assignor, so it exercises paths the Python
clients do not. `kafkajs/driver.js` runs one KafkaJS role per process; `make test`
installs KafkaJS with npm (`tests/integration/kafkajs/package.json`).

- KafkaJS produces keyed records with headers (none and gzip: KafkaJS's built-in
  codecs), confluent-kafka reads them identically and each key sits in the partition
  Java's murmur2 partitioner picks;
- confluent-kafka produces, a KafkaJS group consumer reads everything and commits, and
  the committed offsets are what the group coordinator reports;
- KafkaJS's idempotent producer lands every record once;
- two KafkaJS members of one group split a topic's partitions, and the survivor takes
  them all when the other leaves;
- KafkaJS's admin client: create (and a duplicate create), create partitions,
  describe/alter configs, offsets, describe cluster, delete;
- KafkaJS transactions: committed data is visible and aborted data is not to KafkaJS's
  and confluent-kafka's read_committed consumers (data from either client's transactional
  producer), read_uncommitted sees the aborted data too, and offsets sent in a KafkaJS
  transaction (`sendOffsets`) appear only on commit.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from tests.integration.clients import (
    Got,
    Rec,
    consume,
    create_topic,
    index_of,
    make_records,
    produce,
)
from tests.integration.conftest import BrokerProcess

from tidegate.client.partitioner import partition_for_key

HERE = Path(__file__).parent / "kafkajs"
DRIVER = HERE / "driver.js"
N = 5_000


def _node() -> str:
    node = shutil.which("node")
    if node is None or not (HERE / "node_modules" / "kafkajs").is_dir():
        pytest.fail("KafkaJS is not installed: run `make deps-node` (needs node and npm)")
    return node


def _run(args: list[str], stdin: str = "", timeout: float = 180) -> list[dict[str, Any]]:
    proc = subprocess.run([_node(), str(DRIVER), *args], input=stdin, text=True,
                          capture_output=True, timeout=timeout)
    assert proc.returncode == 0, f"KafkaJS {args[0]} failed:\n{proc.stderr[-3000:]}"
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert lines and "done" in lines[-1], f"KafkaJS {args[0]} did not finish: {lines[-3:]}"
    return lines


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _kafkajs_produce(bootstrap: str, topic: str, recs: list[Rec], codec: str,
                     idempotent: bool = False) -> None:
    stdin = "".join(
        json.dumps({"k": _b64(r.key), "v": _b64(r.value),
                    "h": [[k, _b64(v)] for k, v in r.headers]}) + "\n"
        for r in recs)
    lines = _run(["produce", bootstrap, topic, codec, "1" if idempotent else "0"], stdin)
    assert lines[-1]["done"] == len(recs)


def _check_identical(sent: list[Rec], got: list[Got], partitions: int | None) -> None:
    """`partitions`: check keys against murmur2 (KafkaJS's and Java's default; not
    librdkafka's, whose default is a CRC32 partitioner)."""
    assert len(got) == len(sent), f"expected {len(sent)} records, got {len(got)}"
    by_idx = {index_of(r.value): r for r in sent}
    seen: dict[int, list[int]] = defaultdict(list)
    for g in got:
        r = by_idx[index_of(g.value)]
        assert (g.key, g.value, dict(g.headers)) == (r.key, r.value, dict(r.headers))
        assert g.key is not None
        assert partitions is None or g.partition == partition_for_key(g.key, partitions), \
            f"key {g.key!r} landed in {g.partition}, murmur2 says otherwise"
        assert g.timestamp > 1_600_000_000_000
        seen[g.partition].append(g.offset)
    for part, offsets in seen.items():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), part
    assert len({index_of(g.value) for g in got}) == len(sent), "duplicates"


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_kafkajs_produces_and_confluent_reads(shared_broker: BrokerProcess, codec: str) -> None:
    topic = f"kjs-produce-{codec}"
    create_topic(shared_broker.bootstrap, topic, 3)
    recs = make_records(N, prefix="kjs")
    _kafkajs_produce(shared_broker.bootstrap, topic, recs, codec)
    _check_identical(recs, consume("confluent", shared_broker.bootstrap, topic, N), 3)


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_confluent_produces_and_kafkajs_group_reads_and_commits(
        shared_broker: BrokerProcess, codec: str) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = f"kjs-consume-{codec}"
    group = f"kjs-group-{codec}"
    create_topic(shared_broker.bootstrap, topic, 3)
    recs = make_records(N, prefix="cf")
    produce("confluent", shared_broker.bootstrap, topic, recs, codec)
    lines = _run(["consume", shared_broker.bootstrap, topic, group, str(N), "120"])
    got = [Got(d["p"], d["o"], _unb64(d["k"]), _unb64(d["v"]),
               tuple((k, _unb64(v)) for k, v in d["h"]), d["t"]) for d in lines[:-1]]
    _check_identical(recs, got, None)
    ends = defaultdict(int)
    for g in got:
        ends[g.partition] = max(ends[g.partition], g.offset + 1)
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(3)])])[group].result(30)
    committed = {tp.partition: tp.offset for tp in res.topic_partitions}
    assert committed == dict(ends), "KafkaJS's commits are not what the coordinator reports"


def test_kafkajs_idempotent_producer(shared_broker: BrokerProcess) -> None:
    topic = "kjs-idempotent"
    create_topic(shared_broker.bootstrap, topic, 2)
    recs = make_records(N, prefix="idem")
    _kafkajs_produce(shared_broker.bootstrap, topic, recs, "none", idempotent=True)
    got = consume("confluent", shared_broker.bootstrap, topic, N)
    _check_identical(recs, got, 2)


class _Member:
    """One long-running KafkaJS group member; a thread reads its assignments (JSON
    lines on stdout)."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.proc = subprocess.Popen(
            [_node(), str(DRIVER), "member", bootstrap, topic, group],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assignment: dict[str, list[int]] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                msg = json.loads(line)
                if "assignment" in msg:
                    self.assignment = msg["assignment"]

    def partitions(self, topic: str) -> set[int]:
        return set((self.assignment or {}).get(topic, []))

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def _wait_for(members: list[_Member], check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            if m.proc.poll() not in (None, 0):
                raise AssertionError(f"a KafkaJS member died: {m.proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out; assignments {[m.assignment for m in members]}")


def test_kafkajs_group_members_split_and_take_over(shared_broker: BrokerProcess) -> None:
    topic, group = "kjs-members", "kjs-members-group"
    create_topic(shared_broker.bootstrap, topic, 6)
    a = _Member(shared_broker.bootstrap, topic, group)
    b = _Member(shared_broker.bootstrap, topic, group)
    try:
        def split() -> bool:
            parts = [m.partitions(topic) for m in (a, b)]
            return all(parts) and not parts[0] & parts[1] and parts[0] | parts[1] == set(range(6))

        _wait_for([a, b], split)
        b.stop()
        _wait_for([a], lambda: a.partitions(topic) == set(range(6)))
    finally:
        a.stop()
        b.stop()


def test_kafkajs_admin(shared_broker: BrokerProcess) -> None:
    lines = _run(["admin", shared_broker.bootstrap, "kjs-admin"])
    got = {k: v for line in lines for k, v in line.items()}
    assert got["created"] is True
    assert got["createdAgain"] is False  # KafkaJS reports an existing topic as not created
    assert got["listed"] is True
    assert got["partitions"] == 4
    assert got["configs"] == {"retention.ms": "3600000", "cleanup.policy": "delete"}
    assert got["altered"] == "7200000"
    assert sorted(o["partition"] for o in got["offsets"]) == [0, 1, 2, 3]
    assert got["brokers"] == 1
    assert got["deleted"] is True


def _kafkajs_txns(bootstrap: str, txn_id: str, txns: list[dict[str, Any]]) -> None:
    stdin = "".join(json.dumps(t) + "\n" for t in txns)
    lines = _run(["txn", bootstrap, txn_id], stdin)
    assert lines[-1]["done"] == len(txns)
    assert [ln["committed"] for ln in lines[:-1]] == [t["commit"] for t in txns]


def _sends(topic: str, prefix: str, n: int, partitions: int) -> list[dict[str, Any]]:
    return [{"topic": topic, "partition": i % partitions, "v": _b64(f"{prefix}{i}".encode())}
            for i in range(n)]


def _kafkajs_read(bootstrap: str, topic: str, group: str, read_uncommitted: bool,
                  count: int) -> list[tuple[int, int, bytes]]:
    lines = _run(["readtxn", bootstrap, topic, group, "1" if read_uncommitted else "0",
                  str(count), "60"])
    got = [(d["p"], d["o"], _unb64(d["v"]) or b"") for d in lines[:-1]]
    for part in {p for p, _o, _v in got}:
        offsets = [o for p, o, _v in got if p == part]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), part
    return got


def test_kafkajs_transactions_commit_and_abort(shared_broker: BrokerProcess) -> None:
    """KafkaJS's transactional producer and read_committed consumer, each checked
    against confluent-kafka's: committed data visible, aborted data invisible (but seen
    by read_uncommitted), in data written by either client."""
    from confluent_kafka import Producer
    from tests.integration.test_transactions import read_all

    bs, topic = shared_broker.bootstrap, "kjs-txn"
    create_topic(bs, topic, 2)
    _kafkajs_txns(bs, "kjs-txn-1", [
        {"send": _sends(topic, "c", 20, 2), "offsets": None, "commit": True},
        {"send": _sends(topic, "a", 10, 2), "offsets": None, "commit": False},
        {"send": _sends(topic, "d", 10, 2), "offsets": None, "commit": True},
    ])
    cf = Producer({"bootstrap.servers": bs, "transactional.id": "kjs-txn-cf"})
    cf.init_transactions(30)
    for prefix, n, commit in (("cfa", 5, False), ("cf", 10, True)):
        cf.begin_transaction()
        for i in range(n):
            cf.produce(topic, f"{prefix}{i}".encode(), partition=i % 2)
        cf.flush(30)
        (cf.commit_transaction if commit else cf.abort_transaction)(30)
    committed = sorted(f"{p}{i}".encode() for p, n in (("c", 20), ("d", 10), ("cf", 10))
                       for i in range(n))
    aborted = sorted(f"{p}{i}".encode() for p, n in (("a", 10), ("cfa", 5)) for i in range(n))
    assert sorted(read_all(bs, topic, "read_committed")) == committed
    assert sorted(read_all(bs, topic, "read_uncommitted")) == sorted(committed + aborted)
    got = _kafkajs_read(bs, topic, "kjs-txn-rc", False, len(committed))
    assert sorted(v for _p, _o, v in got) == committed, "KafkaJS read_committed"
    got = _kafkajs_read(bs, topic, "kjs-txn-ru", True, len(committed) + len(aborted))
    assert sorted(v for _p, _o, v in got) == sorted(committed + aborted), \
        "KafkaJS read_uncommitted"


def test_kafkajs_send_offsets_visible_only_on_commit(shared_broker: BrokerProcess) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    from tests.integration.test_transactions import read_all

    bs, group = shared_broker.bootstrap, "kjs-txn-offsets"
    create_topic(bs, "kjs-txn-src", 1)
    create_topic(bs, "kjs-txn-dst", 1)
    admin = AdminClient({"bootstrap.servers": bs})

    def committed() -> int:
        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition("kjs-txn-src", 0)])])[group].result(30)
        return int(res.topic_partitions[0].offset)

    def txn(value: bytes, offset: int, commit: bool) -> None:
        _kafkajs_txns(bs, "kjs-txn-offsets", [{
            "send": [{"topic": "kjs-txn-dst", "partition": 0, "v": _b64(value)}],
            "offsets": {"group": group, "topic": "kjs-txn-src", "partition": 0,
                        "offset": offset},
            "commit": commit}])

    txn(b"x", 42, commit=False)
    assert committed() < 0, "offsets of an aborted transaction became visible"
    txn(b"y", 7, commit=True)
    assert committed() == 7
    txn(b"z", 99, commit=False)
    assert committed() == 7, "an aborted transaction overwrote committed offsets"
    assert read_all(bs, "kjs-txn-dst", "read_committed") == [b"y"]
    assert sorted(read_all(bs, "kjs-txn-dst", "read_uncommitted")) == [b"x", b"y", b"z"]
