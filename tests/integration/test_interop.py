"""Unmodified Kafka clients produce and consume through a real Tidegate broker.

For each producing library and codec: create a 3-partition topic, produce keyed
records with headers, consume them with a *different* library, and compare keys,
values, headers, timestamps and per-partition order. `TIDEGATE_INTEROP_RECORDS`
sets the count (the acceptance run uses 100,000; `make test` uses that too).
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest
from tests.integration.clients import (
    CODECS,
    LIBS,
    Got,
    consume,
    create_topic,
    index_of,
    make_records,
    produce,
)
from tests.integration.conftest import BrokerProcess

N = int(os.environ.get("TIDEGATE_INTEROP_RECORDS", "100000"))


def _check(sent: list, got: list[Got]) -> None:
    assert len(got) == len(sent), f"expected {len(sent)} records, got {len(got)}"
    by_part: dict[int, list[Got]] = defaultdict(list)
    for g in got:
        by_part[g.partition].append(g)
    for part, items in by_part.items():
        offsets = [g.offset for g in items]
        assert offsets == sorted(offsets), f"partition {part} out of order"
        assert len(set(offsets)) == len(offsets), f"partition {part} has duplicates"
        # Per-partition order: the producer's order of records with those keys.
        idx = [index_of(g.value) for g in sorted(items, key=lambda g: g.offset)]
        assert idx == sorted(idx), f"partition {part} is not in produce order"
    sent_by_idx = {index_of(r.value): r for r in sent}
    keys_per_part: dict[bytes, set[int]] = defaultdict(set)
    for g in got:
        r = sent_by_idx[index_of(g.value)]
        assert (g.key, g.value) == (r.key, r.value)
        assert dict(g.headers) == dict(r.headers)
        assert g.timestamp > 1_600_000_000_000
        keys_per_part[g.key or b""].add(g.partition)
    assert all(len(p) == 1 for p in keys_per_part.values()), "a key landed in two partitions"


@pytest.mark.interop
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", LIBS)
def test_produce_then_consume_with_another_library(
    shared_broker: BrokerProcess, producer: str, codec: str
) -> None:
    consumer = LIBS[(LIBS.index(producer) + 1 + CODECS.index(codec)) % len(LIBS)]
    if consumer == producer:
        consumer = LIBS[(LIBS.index(producer) + 1) % len(LIBS)]
    topic = f"interop-{producer}-{codec}"
    create_topic(shared_broker.bootstrap, topic, 3)
    recs = make_records(N, header_sets=1 if producer == "kcat" else 3)
    produce(producer, shared_broker.bootstrap, topic, recs, codec)
    got = consume(consumer, shared_broker.bootstrap, topic, N)
    _check(recs, got)
