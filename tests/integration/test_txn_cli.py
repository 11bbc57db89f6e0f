"""`tidegate txn` and the admin client's transaction tools (KIP-664) against a real
broker process, with confluent-kafka (librdkafka) transactional producers.

- an open transaction shows up Ongoing in `txn list` (and its filters), with its
  partitions in `txn describe`, and with its start offset in `txn describe-producers`;
  after the commit the partition shows no open transaction;
- KIP-890: a transactional batch from a producer id no coordinator knows is refused
  (INVALID_PRODUCER_ID_MAPPING), so is one of a real producer to a partition its
  transaction does not hold (INVALID_TXN_STATE); neither opens a transaction: the last
  stable offsets do not move;
- `txn abort` (by producer id, and by start offset) writes an ABORT marker: the last
  stable offset reaches the log end and read_committed consumers see none of the
  aborted records;
- `txn force-terminate` aborts a prepared (KIP-939) transaction through its coordinator;
- `txn find-hanging` follows Kafka's rule: an old transaction the coordinator knows as
  Ongoing with that partition is not hanging; once the coordinator's state is lost
  (its `__transaction_state` logs deleted while the broker is down) the same open
  transaction is hanging, is found, and `abort` clears it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests.integration.conftest import ROOT, BrokerProcess
from tests.integration.rawclient import RawClient
from tests.integration.test_transactions import create, read_all

from tidegate.client import Admin, TopicPartition
from tidegate.client import Producer as TidegateProducer
from tidegate.client.types import ProducerState
from tidegate.records.builder import build_batch

pytestmark = pytest.mark.interop

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 48, 49


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def txn(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "tidegate.cli.main", "txn", *args,
         "--bootstrap-server", broker.bootstrap],
        capture_output=True, text=True, env=env, timeout=90, cwd=ROOT)


def ok(r: subprocess.CompletedProcess[str]) -> list[list[str]]:
    """The rows of a successful command's table (header first)."""
    assert r.returncode == 0, r.stderr
    return [line.split() for line in r.stdout.splitlines() if line.strip()]


def open_transaction(broker: BrokerProcess, txn_id: str, topic: str,
                     counts: dict[int, int]) -> Producer:
    """A confluent-kafka producer with a transaction left open: counts[p] records
    written (and acknowledged) to partition p."""
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                  "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for part, n in counts.items():
        for i in range(n):
            p.produce(topic, b"open-%d-%d" % (part, i), partition=part)
    assert p.flush(30) == 0
    return p


def committed(broker: BrokerProcess, txn_id: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    p.init_transactions(30)
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=0)
    p.commit_transaction(30)


def offsets(admin: Admin, tp: TopicPartition) -> tuple[int, int]:
    """(last stable offset, high watermark) of one partition."""
    lso = admin.list_offsets({tp: -1}, isolation_level=READ_COMMITTED)[tp]
    hw = admin.list_offsets({tp: -1}, isolation_level=READ_UNCOMMITTED)[tp]
    assert lso is not None and hw is not None
    return lso.offset, hw.offset


def producer_in(admin: Admin, tp: TopicPartition, pid: int) -> ProducerState:
    [state] = [s for s in admin.describe_producers([tp])[tp] if s.producer_id == pid]
    return state


def test_list_describe_and_describe_producers_show_an_open_transaction(
    broker: BrokerProcess,
) -> None:
    topic, txn_id = name("orders"), name("shop")
    create(broker.bootstrap, topic, partitions=2)
    committed(broker, name("before"), topic, [b"a", b"b", b"c"])  # offsets 0-2, marker 3
    p = open_transaction(broker, txn_id, topic, {0: 5, 1: 2})

    rows = ok(txn(broker, "list"))
    assert rows[0] == ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]
    [mine] = [r for r in rows if r[0] == txn_id]
    assert mine[3] == "Ongoing"
    pid = int(mine[2])
    assert txn_id in [r[0] for r in ok(txn(broker, "list", "--state", "Ongoing"))]
    assert txn_id not in txn(broker, "list", "--state", "CompleteCommit").stdout
    assert txn_id in txn(broker, "list", "--producer-id", str(pid)).stdout
    none = txn(broker, "list", "--producer-id", str(pid + 1000))
    assert (none.stdout, none.stderr) == ("", "no transactions match the filters\n")
    assert txn_id not in txn(broker, "list", "--min-duration-ms", "3600000").stdout
    bad = txn(broker, "list", "--state", "Running")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr

    rows = ok(txn(broker, "describe", txn_id))
    assert rows[0][:5] == ["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH",
                           "STATE"]
    assert rows[1][1:3] == [txn_id, str(pid)] and rows[1][4] == "Ongoing"
    assert rows[1][-1] == f"{topic}-0,{topic}-1"
    missing = txn(broker, "describe", "no-such-id")
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr

    rows = ok(txn(broker, "describe-producers", "--topic", topic))
    assert rows[0][-1] == "CURRENT-TXN-START-OFFSET"
    open_rows = {(r[1], r[2]): r[-1] for r in rows[1:]}
    assert open_rows[("0", str(pid))] == "4"  # after the committed batch and its marker
    assert open_rows[("1", str(pid))] == "0"

    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        [listing] = [t for t in admin.list_transactions(states=["Ongoing"]) if
                     t.transactional_id == txn_id]
        assert listing.producer_id == pid
        d = admin.describe_transactions([txn_id])[txn_id]
        assert d.state == "Ongoing" and d.producer_id == pid and d.timeout_ms > 0
        assert d.partitions == (TopicPartition(topic, 0), TopicPartition(topic, 1))
        assert d.start_time_ms > 0
        state = producer_in(admin, TopicPartition(topic, 0), pid)
        assert state.current_txn_start_offset == 4 and state.last_sequence == 4
        assert offsets(admin, TopicPartition(topic, 0)) == (4, 9)

        p.commit_transaction(30)
        # EndTxn answers once PrepareCommit is durable; the markers follow.
        deadline = time.monotonic() + 10
        while admin.describe_transactions([txn_id])[txn_id].state == "PrepareCommit":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        d = admin.describe_transactions([txn_id])[txn_id]
        assert d.state in ("CompleteCommit", "Empty") and d.partitions == ()
        assert producer_in(admin, TopicPartition(topic, 0), pid).current_txn_start_offset == -1
    rows = ok(txn(broker, "describe-producers", "--topic", topic, "--partition", "0"))
    assert {r[-1] for r in rows[1:]} == {"-"}
    assert ok(txn(broker, "describe", txn_id))[1][4] in ("CompleteCommit", "Empty")


def produce_raw(broker: BrokerProcess, txn_id: str, topic: str, partition: int, pid: int,
                epoch: int) -> int:
    """Send one transactional batch (Produce v9, before KIP-890's implicit add) and
    return the partition's error code."""
    batch = build_batch([(int(time.time() * 1000), None, b"zombie", ())],
                        producer_id=pid, producer_epoch=epoch, base_sequence=0,
                        is_transactional=True)
    c = RawClient(broker.bootstrap)
    try:
        resp = c.call(0, 9, {
            "transactional_id": txn_id, "acks": -1, "timeout": 5000,
            "topic_data": [{"name": topic,
                            "partition_data": [{"index": partition, "records": batch}]}]})
    finally:
        c.close()
    return int(resp.responses[0].partition_responses[0].error_code.value)


def test_kip890_refuses_transactional_batches_the_coordinator_did_not_add(
    broker: BrokerProcess,
) -> None:
    topic, txn_id = name("ghost"), name("real")
    create(broker.bootstrap, topic, partitions=2)
    committed(broker, name("before"), topic, [b"x"])
    p = open_transaction(broker, txn_id, topic, {0: 1})  # partition 1 is not in it
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        d = admin.describe_transactions([txn_id])[txn_id]
        before = offsets(admin, tp0), offsets(admin, tp1)
        # A producer id no coordinator knows (a zombie from a lost coordinator state).
        code = produce_raw(broker, "ghost-txn", topic, 1, 987_654, 0)
        assert code == INVALID_PRODUCER_ID_MAPPING
        # The real producer, writing to a partition its transaction does not hold.
        code = produce_raw(broker, txn_id, topic, 1, d.producer_id, d.producer_epoch)
        assert code == INVALID_TXN_STATE
        assert (offsets(admin, tp0), offsets(admin, tp1)) == before  # nothing written
        assert admin.describe_producers([tp1])[tp1] == []
        assert admin.describe_transactions([txn_id])[txn_id].partitions == (tp0,)
    p.abort_transaction(30)
    assert "no hanging transactions" in txn(
        broker, "find-hanging", "--topic", topic, "--max-transaction-timeout-ms", "0").stdout


def test_abort_by_producer_id_and_by_start_offset(broker: BrokerProcess) -> None:
    topic, txn_id = name("abort"), name("stuck")
    create(broker.bootstrap, topic, partitions=2)
    committed(broker, name("before"), topic, [b"kept-1", b"kept-2"])  # 0-1, marker 2
    open_transaction(broker, txn_id, topic, {0: 4, 1: 3})
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        [pid] = [t.producer_id for t in admin.list_transactions() if
                 t.transactional_id == txn_id]
        assert offsets(admin, tp0) == (3, 7)
        assert offsets(admin, tp1) == (0, 3)

        r = txn(broker, "abort", "--topic", topic, "--partition", "0", "--producer-id", str(pid))
        assert r.returncode == 0, r.stderr
        assert f"Aborted the open transaction of producer {pid}" in r.stdout
        assert "started at offset 3" in r.stdout
        assert f"The last stable offset of {topic}-0 is now 8." in r.stdout
        assert offsets(admin, tp0) == (8, 8)  # the marker is at 7
        assert producer_in(admin, tp0, pid).current_txn_start_offset == -1
        assert offsets(admin, tp1) == (0, 3)  # the other partition is still open

        again = txn(broker, "abort", "--topic", topic, "--partition", "0",
                    "--producer-id", str(pid))
        assert again.returncode == 1 and "has no open transaction" in again.stderr
        wrong = txn(broker, "abort", "--topic", topic, "--partition", "1",
                    "--start-offset", "1")
        assert wrong.returncode == 1 and "no open transaction starts at offset 1" in wrong.stderr
        half = txn(broker, "abort", "--topic", topic, "--partition", "1",
                   "--producer-id", str(pid), "--producer-epoch", "0")
        assert half.returncode == 1 and "go together" in half.stderr
        assert offsets(admin, tp1) == (0, 3)
        r = txn(broker, "abort", "--topic", topic, "--partition", "1", "--start-offset", "0")
        assert r.returncode == 0, r.stderr
        assert offsets(admin, tp1) == (4, 4)

    assert sorted(read_all(broker.bootstrap, topic, "read_committed")) == [b"kept-1", b"kept-2"]
    uncommitted = read_all(broker.bootstrap, topic, "read_uncommitted")
    assert len(uncommitted) == 2 + 4 + 3  # the aborted records are in the log


def test_force_terminate_ends_a_prepared_transaction(broker: BrokerProcess) -> None:
    """KIP-939: a prepared transaction (never timed out, on a broker with default
    settings) is listed, then aborted through its coordinator by `force-terminate`."""
    topic, txn_id = name("prepared"), name("sink")
    create(broker.bootstrap, topic, partitions=2)
    none = txn(broker, "list")  # a fresh broker: nothing yet
    assert (none.returncode, none.stdout, none.stderr) == (0, "", "no transactions\n")
    p = TidegateProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                          "transaction.two.phase.commit.enable": True})
    try:
        p.init_transactions()
        p.begin_transaction()
        for part in (0, 1):
            p.send(topic, b"prepared", partition=part)
        prepared = p.prepare_transaction()
    finally:
        p.close()  # the process is gone; the transaction stays prepared
    [row] = [r for r in ok(txn(broker, "list", "--state", "Ongoing")) if r[0] == txn_id]
    assert row[2] == str(prepared.producer_id)
    tp0 = TopicPartition(topic, 0)
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        assert offsets(admin, tp0) == (0, 1)

        r = txn(broker, "force-terminate", txn_id)
        assert r.returncode == 0, r.stderr
        assert (f"Aborted the transaction of {txn_id!r} (producer {prepared.producer_id}, "
                f"epoch {prepared.epoch}) in {topic}-0, {topic}-1") in r.stdout
        assert offsets(admin, tp0) == (2, 2)  # the ABORT marker is at 1
        after = admin.describe_transactions([txn_id])[txn_id]
        assert after.state == "Empty" and after.producer_epoch > prepared.epoch
    assert read_all(broker.bootstrap, topic, "read_committed") == []
    again = txn(broker, "force-terminate", txn_id)
    assert again.returncode == 0 and "had no open transaction (Empty)" in again.stdout
    missing = txn(broker, "force-terminate", "no-such-id")
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr
    assert "no-such-id" not in txn(broker, "list").stdout  # no id created by the typo


def test_find_hanging_uses_kafkas_rule_and_abort_clears_it(broker: BrokerProcess) -> None:
    topic, txn_id = name("hang"), name("lost")
    create(broker.bootstrap, topic, partitions=1)
    committed(broker, name("before"), topic, [b"kept"])  # offset 0, marker 1
    p = open_transaction(broker, txn_id, topic, {0: 3})  # offsets 2-4
    time.sleep(0.05)
    # Known to its coordinator as Ongoing with this partition: not hanging, however old.
    r = txn(broker, "find-hanging", "--max-transaction-timeout-ms", "0")
    assert r.returncode == 0 and r.stdout.strip() == "no hanging transactions", r.stdout

    # Lose the coordinator's state: the partition still has the transaction open (the
    # producer stays idle; it is never asked to end it).
    broker.kill()
    state_dirs = list(broker.data_dir.glob("__transaction_state-*"))
    assert state_dirs
    for d in state_dirs:
        shutil.rmtree(d)
    broker.start()
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        assert txn_id not in [t.transactional_id for t in admin.list_transactions()]
        assert offsets(admin, TopicPartition(topic, 0)) == (2, 5)  # pinned at its start

    # Silent for less than the default 15 minutes: not yet reported.
    assert ok(txn(broker, "find-hanging", "--topic", topic)) == [["no", "hanging",
                                                                   "transactions"]]
    rows = ok(txn(broker, "find-hanging", "--topic", topic, "--max-transaction-timeout-ms",
                  "0"))
    assert rows[0][:6] == ["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH",
                           "COORDINATOR-EPOCH", "START-OFFSET"]
    assert len(rows) == 2 and rows[1][0:2] == [topic, "0"] and rows[1][5] == "2"
    assert "no coordinator knows this producer id" in txn(
        broker, "find-hanging", "--max-transaction-timeout-ms", "0").stdout

    r = txn(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", rows[1][5])
    assert r.returncode == 0, r.stderr
    assert f"Aborted the open transaction of producer {rows[1][2]}" in r.stdout
    m = re.search(r"last stable offset of \S+ is now (\d+)", r.stdout)
    assert m is not None and int(m.group(1)) == 6
    assert ok(txn(broker, "find-hanging", "--max-transaction-timeout-ms", "0")) == [
        ["no", "hanging", "transactions"]]
    assert read_all(broker.bootstrap, topic, "read_committed") == [b"kept"]
    del p
