"""The transaction APIs on the wire, with raw requests: bad input gets Kafka's error codes
(and never disturbs other transactions), zombie writes are refused (KIP-890), version
rules (KIP-588), transaction version 2 and two-phase commit (KIP-939).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.integration.conftest import BrokerProcess
from tests.integration.rawclient import RawClient
from tests.integration.test_transactions import create, read_all

from tidegate.records.builder import build_batch

TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def proto_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("txnproto") / "data",
                      overrides={"transaction.two.phase.commit.enable": "true"})
    b.start()
    create(b.bootstrap, "t1", "t2", partitions=2)
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def c(proto_broker: BrokerProcess) -> Iterator[RawClient]:
    client = RawClient(proto_broker.bootstrap)
    try:
        yield client
    finally:
        client.close()


def init(c: RawClient, txn_id: str, timeout_ms: int = 60000, version: int = 4,
         **extra: Any) -> Any:
    for _ in range(50):
        r = c.call(22, version, {"transactional_id": txn_id, "transaction_timeout": timeout_ms,
                                 "producer_id": -1, "producer_epoch": -1, **extra})
        if r.error_code.name != "concurrent_transactions":
            return r
        time.sleep(0.1)
    raise AssertionError("InitProducerId kept answering CONCURRENT_TRANSACTIONS")


def add(c: RawClient, txn_id: str, pid: int, epoch: int, topic: str, parts: list[int],
        version: int = 3) -> dict[int, str]:
    r = c.call(24, version, {"v3_and_below_transactional_id": txn_id,
                             "v3_and_below_producer_id": pid,
                             "v3_and_below_producer_epoch": epoch,
                             "v3_and_below_topics": [{"name": topic, "partitions": parts}]})
    return {int(p.partition_index): p.partition_error_code.name
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def produce(c: RawClient, txn_id: str | None, topic: str, partition: int, pid: int, epoch: int,
            seq: int, value: bytes, version: int = 9, transactional: bool = True) -> str:
    batch = build_batch([(TS, None, value, ())], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=transactional)
    r = c.call(0, version, {"transactional_id": txn_id, "acks": -1, "timeout": 5000,
                            "topic_data": [{"name": topic, "partition_data": [
                                {"index": partition, "records": batch}]}]})
    return str(r.responses[0].partition_responses[0].error_code.name)


def end(c: RawClient, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> Any:
    return c.call(26, version, {"transactional_id": txn_id, "producer_id": pid,
                                "producer_epoch": epoch, "committed": commit})


def test_end_txn_without_a_transaction_is_invalid_txn_state(c: RawClient) -> None:
    r = init(c, "bad-end")
    assert r.error_code.name == "none"
    assert end(c, "bad-end", int(r.producer_id), int(r.producer_epoch),
               True).error_code.name == "invalid_txn_state"


def test_unknown_and_internal_topics_cannot_join(c: RawClient) -> None:
    r = init(c, "bad-add")
    pid, epoch = int(r.producer_id), int(r.producer_epoch)
    assert add(c, "bad-add", pid, epoch, "no-such-topic", [0]) == {0: "unknown_topic_or_partition"}
    assert add(c, "bad-add", pid, epoch, "t1", [7]) == {7: "unknown_topic_or_partition"}
    for internal in ("__consumer_offsets", "__transaction_state"):
        assert add(c, "bad-add", pid, epoch, internal, [0]) == {0: "invalid_topic_exception"}
    # nothing was added: ending the (never started) transaction is still invalid
    assert end(c, "bad-add", pid, epoch, False).error_code.name == "invalid_txn_state"


def test_unknown_id_and_wrong_producer(c: RawClient) -> None:
    assert add(c, "never-initialised", 1234, 0, "t1", [0]) == {0: "invalid_producer_id_mapping"}
    r = init(c, "mapping")
    pid, epoch = int(r.producer_id), int(r.producer_epoch)
    assert add(c, "mapping", pid + 1, epoch, "t1", [0]) == {0: "invalid_producer_id_mapping"}
    # an older epoch: PRODUCER_FENCED from v2 on, INVALID_PRODUCER_EPOCH before (KIP-588)
    init(c, "mapping")
    assert add(c, "mapping", pid, epoch, "t1", [0], version=3) == {0: "producer_fenced"}
    assert add(c, "mapping", pid, epoch, "t1", [0], version=1) == {0: "invalid_producer_epoch"}


@pytest.mark.parametrize("timeout", [0, -5, 2**31 - 1, 900_001])
def test_bad_timeouts(c: RawClient, timeout: int) -> None:
    assert init(c, f"timeout-{timeout}", timeout).error_code.name == "invalid_transaction_timeout"


@pytest.mark.parametrize("txn_id", ["x" * 30000, "\u00e9\u6f22\U0001f600 odd\x00id", " "])
def test_long_and_odd_transactional_ids_work(c: RawClient, txn_id: str) -> None:
    r = init(c, txn_id)
    assert r.error_code.name == "none"
    pid, epoch = int(r.producer_id), int(r.producer_epoch)
    assert add(c, txn_id, pid, epoch, "t1", [0]) == {0: "none"}
    assert produce(c, txn_id, "t1", 0, pid, epoch, 0, b"odd") == "none"
    assert end(c, txn_id, pid, epoch, False).error_code.name == "none"


def test_empty_transactional_id_is_invalid_request(c: RawClient) -> None:
    assert init(c, "").error_code.name == "invalid_request"
    r = c.call(10, 4, {"key_type": 1, "coordinator_keys": [""]})
    assert r.coordinators[0].error_code.name == "invalid_request"


def test_transactional_batch_rules(c: RawClient, proto_broker: BrokerProcess) -> None:
    r = init(c, "zombie")
    pid, epoch = int(r.producer_id), int(r.producer_epoch)
    # a batch for a partition never added to the transaction: refused (KIP-890), so it
    # cannot open a transaction nobody will end
    assert produce(c, "zombie", "t2", 1, pid, epoch, 0, b"zombie") == "invalid_txn_state"
    # without a transactional id in the request
    assert produce(c, None, "t2", 1, pid, epoch, 0, b"x") == (
        "transactional_id_authorization_failed")
    # the partition is not pinned: read_committed reads to the end at once
    assert read_all(proto_broker.bootstrap, "t2", "read_committed", timeout=10) == []
    # added, then written, then a late batch after the commit: refused again
    assert add(c, "zombie", pid, epoch, "t2", [1]) == {1: "none"}
    assert produce(c, "zombie", "t2", 1, pid, epoch, 0, b"in-txn") == "none"
    assert end(c, "zombie", pid, epoch, True).error_code.name == "none"
    deadline = time.monotonic() + 10
    while produce(c, "zombie", "t2", 1, pid, epoch, 1, b"late") == "concurrent_transactions":
        assert time.monotonic() < deadline
    assert read_all(proto_broker.bootstrap, "t2", "read_committed", timeout=10) == [b"in-txn"]


def test_control_batches_from_clients_are_refused(c: RawClient) -> None:
    batch = build_batch([(TS, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", ())],
                        producer_id=5, producer_epoch=0, is_transactional=True,
                        is_control=True)
    r = c.call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000,
                      "topic_data": [{"name": "t1", "partition_data": [
                          {"index": 0, "records": batch}]}]})
    assert r.responses[0].partition_responses[0].error_code.name == "invalid_record"


def test_write_txn_markers_with_a_stale_coordinator_epoch(c: RawClient) -> None:
    r = init(c, "stale")
    pid, epoch = int(r.producer_id), int(r.producer_epoch)
    assert add(c, "stale", pid, epoch, "t1", [1]) == {1: "none"}
    assert produce(c, "stale", "t1", 1, pid, epoch, 0, b"s") == "none"
    assert end(c, "stale", pid, epoch, True).error_code.name == "none"
    time.sleep(0.5)  # the coordinator's own marker (with its epoch) is written by now
    m = c.call(27, 1, {"markers": [{"producer_id": pid, "producer_epoch": epoch,
                                    "transaction_result": False, "coordinator_epoch": -1,
                                    "topics": [{"name": "t1", "partition_indexes": [1]}]}]})
    code = m.markers[0].topics[0].partitions[0].error_code.name
    assert code == "transaction_coordinator_fenced"


def test_two_phase_commit_completed_by_a_later_process(
        c: RawClient, proto_broker: BrokerProcess) -> None:
    """KIP-939: a transaction prepared by one process (never timed out), committed by the
    next with keep_prepared_txn."""
    r = init(c, "2pc", version=6, enable2_pc=True, keep_prepared_txn=False)
    assert r.error_code.name == "none"
    pid, epoch = int(r.producer_id), int(r.producer_epoch)
    assert add(c, "2pc", pid, epoch, "t1", [0]) == {0: "none"}
    assert produce(c, "2pc", "t1", 0, pid, epoch, 0, b"prepared") == "none"
    # the first process is gone; a second one keeps the prepared transaction
    r2 = init(c, "2pc", version=6, enable2_pc=True, keep_prepared_txn=True)
    assert r2.error_code.name == "none"
    assert (int(r2.ongoing_txn_producer_id), int(r2.ongoing_txn_producer_epoch)) == (pid, epoch)
    assert b"prepared" not in read_all(proto_broker.bootstrap, "t1", "read_committed",
                                       expect_end=False, timeout=3)
    done = end(c, "2pc", int(r2.producer_id), int(r2.producer_epoch), True)
    assert done.error_code.name == "none"
    got: list[bytes] = []
    deadline = time.monotonic() + 10
    while b"prepared" not in got and time.monotonic() < deadline:
        got = read_all(proto_broker.bootstrap, "t1", "read_committed", expect_end=False,
                       timeout=2)
    assert b"prepared" in got


def test_two_phase_commit_needs_the_broker_setting(tmp_path: Path) -> None:
    # on by default in Tidegate; an operator who wants Kafka's behaviour turns it off
    b = BrokerProcess(tmp_path / "data",
                      overrides={"transaction.two.phase.commit.enable": "false"})
    b.start()
    try:
        client = RawClient(b.bootstrap)
        r = init(client, "2pc-off", version=6, enable2_pc=True, keep_prepared_txn=False)
        assert r.error_code.name == "transactional_id_authorization_failed"
        client.close()
    finally:
        b.stop()


def test_transaction_version_2_end_txn_bumps_the_epoch(c: RawClient) -> None:
    r = init(c, "tv2", version=5)
    pid, epoch = int(r.producer_id), int(r.producer_epoch)
    # Produce v12 adds the partition implicitly (no AddPartitionsToTxn)
    assert produce(c, "tv2", "t1", 1, pid, epoch, 0, b"tv2", version=12) == "none"
    done = end(c, "tv2", pid, epoch, True, version=5)
    assert done.error_code.name == "none"
    assert (int(done.producer_id), int(done.producer_epoch)) == (pid, epoch + 1)
    # a late batch with the old epoch is fenced
    assert produce(c, "tv2", "t1", 1, pid, epoch, 1, b"late", version=12) in (
        "invalid_producer_epoch", "producer_fenced", "concurrent_transactions")


def test_sequences_reused_after_an_abort_are_refused_not_lost(
        c: RawClient, proto_broker: BrokerProcess) -> None:
    """What librdkafka does when a transaction's batch was written but its answer lost
    (broker killed): it aborts, then sends the next transaction's first batch with the
    same epoch and sequences. Kafka answers that batch as a duplicate of the aborted one,
    and the next transaction commits a record that was never written; Tidegate answers
    OUT_OF_ORDER_SEQUENCE_NUMBER, the client aborts and bumps its epoch (KIP-360)."""
    create(proto_broker.bootstrap, "reuse", partitions=1)
    r = init(c, "reuse")
    pid, epoch = int(r.producer_id), int(r.producer_epoch)

    def again(call: Any) -> Any:  # while the previous marker is being written
        deadline = time.monotonic() + 10
        while (got := call()) in ("concurrent_transactions", {0: "concurrent_transactions"}):
            assert time.monotonic() < deadline
        return got

    assert add(c, "reuse", pid, epoch, "reuse", [0]) == {0: "none"}
    assert produce(c, "reuse", "reuse", 0, pid, epoch, 0, b"aborted") == "none"
    assert end(c, "reuse", pid, epoch, False).error_code.name == "none"
    assert again(lambda: add(c, "reuse", pid, epoch, "reuse", [0])) == {0: "none"}
    assert produce(c, "reuse", "reuse", 0, pid, epoch, 0, b"next") == (
        "out_of_order_sequence_number")
    # the client's way out: abort, InitProducerId with its id and epoch, start again at 0
    assert end(c, "reuse", pid, epoch, False).error_code.name == "none"
    bumped = again(lambda: init(c, "reuse", producer_id=pid, producer_epoch=epoch))
    assert (int(bumped.producer_id), int(bumped.producer_epoch)) == (pid, epoch + 1)
    assert again(lambda: add(c, "reuse", pid, epoch + 1, "reuse", [0])) == {0: "none"}
    assert produce(c, "reuse", "reuse", 0, pid, epoch + 1, 0, b"next") == "none"
    assert end(c, "reuse", pid, epoch + 1, True).error_code.name == "none"
    assert read_all(proto_broker.bootstrap, "reuse", "read_committed", timeout=10) == [b"next"]
