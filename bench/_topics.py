"""Topic creation and deletion for the benchmarks that run one broker (Tidegate's or a
Kafka peer): `bench/produce_requests.py`, `bench/clients.py`, `bench/scale.py` and
`bench/load_sweep.py`. (`bench/_cluster_launch.py`'s `create_topics` is the cluster's:
replicated topics, waiting for a full ISR.)

Each call opens its own admin client and asks the broker to answer only once the topics
exist (`operation_timeout`, so a Kafka peer answers once the partitions have leaders);
an error in any topic raises. `create_topics` returns the seconds from the request to
the last answer, the admin client's start left out: `bench/scale.py` reports them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence


def create_topics(bootstrap: str, names: Sequence[str], partitions: int, *,
                  config: Mapping[str, str] | None = None, timeout: float = 300.0) -> float:
    """Create `names` with `partitions` partitions each, replication factor 1 and
    `config`; wait up to `timeout` seconds (request, operation and answer). Returns the
    seconds the creation took."""
    from confluent_kafka.admin import AdminClient, NewTopic

    # librdkafka's socket.timeout.ms stops at 300 s; scale.py's 100,000 partitions need it
    admin = AdminClient({"bootstrap.servers": bootstrap,
                         "socket.timeout.ms": min(300_000, int(timeout * 1000))})
    t0 = time.perf_counter()
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=dict(config or {})) for name in names],
        request_timeout=timeout, operation_timeout=timeout)
    for fut in futures.values():
        fut.result(timeout)
    return time.perf_counter() - t0


def delete_topics(bootstrap: str, names: Sequence[str], *, timeout: float = 120.0) -> None:
    """Delete `names`, waiting up to `timeout` seconds for the broker's answer."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(list(names), operation_timeout=timeout).values():
        fut.result(timeout)
