"""Pipelined transactional batches to one partition are appended in the producer's order.

A producer sends several batches to a partition before the first is answered. The first
ones wait for the transaction coordinator (KIP-890 verification, or the implicit add of
transaction version 2); a later batch that overtook them used to be appended first, and
the earlier ones were then answered DUPLICATE_SEQUENCE_NUMBER — "delivered" to every
client — and lost. Tidegate's client (transaction version 2, Produce v12) pipelines up to
five requests per broker, which made it lose each partition's first batch.

The broker comes from Tidegate's own pytest plugin (tidegate/testing/plugin.py), in its
process flavour so the race runs between two processes, as it did when found.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from tidegate import EmbeddedBroker
from tidegate.client import Admin, NewTopic, Producer

N = 1250
ATTEMPTS = 12


@pytest.mark.tidegate(mode="process")
def test_pipelined_transactional_batches_are_all_kept(
        tidegate_broker: EmbeddedBroker) -> None:
    """Each attempt is a new producer (a new transactional id) on new partitions: the race
    is at a producer's first batches to a partition. Before the fix about one attempt in
    six lost a whole first batch."""
    bootstrap = tidegate_broker.bootstrap_servers
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(f"pipelined-{a}", 4) for a in range(ATTEMPTS)])
    for attempt in range(ATTEMPTS):
        topic = f"pipelined-{attempt}"
        delivered: dict[int, tuple[int, int]] = {}
        with Producer({"bootstrap.servers": bootstrap,
                       "transactional.id": f"pipe-{attempt}"}) as p:
            p.init_transactions()
            p.begin_transaction()
            for i in range(N):
                p.send(topic, b"%06d" % i + b"x" * 90, key=b"k%d" % (i % 1000),
                       on_delivery=lambda m, e, i=i, d=delivered: d.__setitem__(
                           i, (m.partition, m.offset) if m else (-1, -1)))
            p.flush()
            p.commit_transaction()
        assert len(delivered) == N
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r{attempt}",
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(topic, q, 0) for q in range(4)])
        got: set[bytes] = set()
        deadline = time.monotonic() + 20
        while len(got) < N and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.add(m.value()[:6])
        c.close()
        missing = N - len(got)
        assert missing == 0, f"attempt {attempt}: {missing} of {N} committed records missing"
        assert all(off >= 0 for _, off in delivered.values()), "delivered without offset"
