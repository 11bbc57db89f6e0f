"""The invoicer's tests, against a real broker from Tidegate's pytest plugin."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from invoicer import run

from tidegate import EmbeddedBroker

HERE = Path(__file__).resolve().parent
FAST_GROUPS = {"group.initial.rebalance.delay.ms": 0}


@pytest.fixture
def tidegate_config() -> dict[str, object]:
    return FAST_GROUPS  # every tidegate_broker of this module


def send_orders(broker: EmbeddedBroker, n: int) -> None:
    broker.create_topic("orders", partitions=3)
    broker.create_topic("invoices", partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(n):
        producer.produce("orders", key=b"customer-%d" % (i % 7), value=b"order %d" % i)
    producer.flush()


def invoices_per_order(broker: EmbeddedBroker) -> Counter[bytes]:
    return Counter(r.value for r in broker.read_topic("invoices"))  # read_committed


def test_every_order_gets_one_invoice(tidegate_broker: EmbeddedBroker) -> None:
    send_orders(tidegate_broker, 200)
    assert run(tidegate_broker.bootstrap_servers) == 200
    counts = invoices_per_order(tidegate_broker)
    assert len(counts) == 200 and set(counts.values()) == {1}


def test_the_invoicer_crashes_mid_transaction(tidegate_broker: EmbeddedBroker) -> None:
    send_orders(tidegate_broker, 200)
    crashed = subprocess.run(
        [sys.executable, str(HERE / "invoicer.py"), tidegate_broker.bootstrap_servers,
         "--crash-after", "150"], cwd=HERE)
    assert crashed.returncode == -9  # SIGKILL, with 150 invoices written, some uncommitted
    run(tidegate_broker.bootstrap_servers)  # a new instance fences it and goes on
    counts = invoices_per_order(tidegate_broker)
    assert len(counts) == 200 and set(counts.values()) == {1}


@pytest.mark.tidegate(mode="process")  # kill() is a real SIGKILL of the broker
def test_the_broker_crashes_mid_transaction(tidegate_broker: EmbeddedBroker) -> None:
    send_orders(tidegate_broker, 200)
    producer = Producer({"bootstrap.servers": tidegate_broker.bootstrap_servers,
                         "transactional.id": "invoicer-0"})  # the invoicer's own id
    producer.init_transactions()
    producer.begin_transaction()
    producer.produce("invoices", value=b"invoice for order 0", partition=0)
    producer.flush()  # in the log, never committed
    tidegate_broker.kill()
    tidegate_broker.restart()  # recovers the log: the open transaction is still open
    run(tidegate_broker.bootstrap_servers)  # fences the old producer: its batch aborts
    counts = invoices_per_order(tidegate_broker)
    assert len(counts) == 200 and set(counts.values()) == {1}


def test_one_broker_for_the_whole_run(tidegate_bootstrap_servers: str) -> None:
    """tidegate_session_broker (here through its bootstrap string) is shared by every
    test of the run: give each test topics and groups of its own."""
    from tidegate.testing import create_topics, read_topic

    create_topics(tidegate_bootstrap_servers, ["shared-orders", "shared-invoices"])
    producer = Producer({"bootstrap.servers": tidegate_bootstrap_servers})
    producer.produce("shared-orders", value=b"order 1")
    producer.flush()
    run(tidegate_bootstrap_servers, orders="shared-orders", invoices="shared-invoices",
        group="shared-invoicer")
    assert [r.value for r in read_topic(tidegate_bootstrap_servers, "shared-invoices")] == [
        b"invoice for order 1"]
