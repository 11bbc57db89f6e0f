"""Transactions through a full disk: the history run of test_txn_history.py while the
broker's log directory fills up and frees again.

The test mounts a small tmpfs of its own (skipped when mounting is not permitted) and
puts the broker's log directory on it. Four workers (tests/integration/
test_txn_history.py), each a librdkafka transactional producer with
`transaction.timeout.ms`=10000 and a read_committed consumer, record a history while a
`Filler` fills the file system with a ballast file, keeps it full for a while, then
deletes the ballast. Before each episode one more transactional producer writes a record
and falls silent, so its transaction times out while the disk is full and only the
coordinator can end it. Once space returns:

- every transaction open at that moment ends within `transaction.timeout.ms` plus the
  abort-check interval (and a little slack): the last stable offset of every partition
  passes the high watermark it had when space returned, and the coordinator lists no
  transaction that started before;
- read_committed consumers, librdkafka's and Tidegate's, read every partition to its
  high watermark, and ListOffsets' LSO equals the high watermark once the workers stop;
- the history checker finds no anomaly;
- the broker log holds a bounded number of lines, none of them a traceback;
- after a clean restart, the same: LSO = high watermark, both consumers read the same
  records to the high watermark.

`make test`: one 8 s episode (~40 s); `make soak` (TIDEGATE_SOAK=1): six of 15 s (~4 min).
"""

from __future__ import annotations

import errno
import os
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests.integration.conftest import BrokerProcess, soak_seed
from tests.integration.history import History, Read, Report, Send, Write, check
from tests.integration.test_eos_pipeline import create_topics, read_committed_all
from tests.integration.test_txn_history import PARTITIONS, TOPIC, Worker

from tidegate.client import Admin, Consumer, TopicPartition

TXN_TIMEOUT_MS = 10_000
ABORT_CHECK_MS = 1_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
SLACK_S = 6.0  # markers, CompleteAbort, a client round trip, a slow CI machine
OVERRIDES = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(ABORT_CHECK_MS),
    "log.flush.offset.checkpoint.interval.ms": "500",
    "log.retention.check.interval.ms": "500",
    "log.flush.scheduler.interval.ms": "500",
    "producer.id.expiration.check.interval.ms": "500",
    "log.dir.free.space.check.interval.ms": "500",
    "log.dir.free.space.warn.bytes": str(4 << 20),
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "8",
    "transaction.hanging.check.interval.ms": "2000",
}
FS_SIZE = "80m"
# Lines a broker may log for one disk-full episode and its end, whatever its length: the
# disk full / no longer full pair and the low-space warning and its end (4), and a few
# to spare. A condition logged per request, per retry or per reload would blow it (the
# issue saw 107 ERROR lines and 43 tracebacks in 15 s).
MAX_EPISODE_LINES = 12


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE}", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root / CAP_SYS_ADMIN): "
                    f"{r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


class Filler(threading.Thread):
    """Fills the file system with a ballast file and keeps it full (the broker deletes
    a file now and then: temporary files, old snapshots) until `free()`."""

    def __init__(self, directory: Path) -> None:
        super().__init__(name="filler", daemon=True)
        self.path = directory / "ballast"
        self._done = threading.Event()
        self.full_at: float | None = None

    def _top_up(self, f: object) -> None:
        for chunk in (1 << 20, 64 << 10, 4 << 10):
            block = b"\0" * chunk
            while True:
                try:
                    f.write(block)  # type: ignore[attr-defined]
                    f.flush()  # type: ignore[attr-defined]
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break

    def run(self) -> None:
        with open(self.path, "wb", buffering=0) as f:
            self._top_up(f)
            self.full_at = time.monotonic()
            while not self._done.wait(0.1):
                self._top_up(f)

    def free(self) -> None:
        self._done.set()
        self.join(10)
        self.path.unlink()


class TxnWorker(Worker):
    txn_timeout_ms = TXN_TIMEOUT_MS


def abandon_a_transaction(bootstrap: str, history: History, name: str) -> Producer:
    """A transaction whose producer goes silent after its first record: only the
    coordinator's timeout can end it. Started before the disk fills, it times out while
    the disk is full. Recorded as never committed; the caller keeps the producer alive
    (closing it could abort the transaction)."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": name,
                  "transaction.timeout.ms": TXN_TIMEOUT_MS})
    p.init_transactions(30)
    p.begin_transaction()
    value = f"{name}-1"
    offsets: list[int] = []
    history.invoke(name, "txn", [Send(0, value)])
    p.produce(TOPIC, key=value.encode(), value=value.encode(), partition=0,
              on_delivery=lambda err, msg: offsets.append(msg.offset()) if err is None
              else None)
    assert p.flush(30) == 0
    history.add(name, "fail", "txn", [Write(0, offsets[0] if offsets else None, value)])
    return p


def watermarks(admin: Admin) -> tuple[list[int], list[int]]:
    """(high watermarks, last stable offsets) of the topic's partitions (ListOffsets)."""
    tps = {TopicPartition(TOPIC, p): -1 for p in range(PARTITIONS)}
    hw = admin.list_offsets(tps)
    lso = admin.list_offsets(tps, isolation_level=1)
    return ([hw[TopicPartition(TOPIC, p)].offset for p in range(PARTITIONS)],  # type: ignore[union-attr]
            [lso[TopicPartition(TOPIC, p)].offset for p in range(PARTITIONS)])  # type: ignore[union-attr]


def tidegate_read_committed(bootstrap: str, timeout: float = 30) -> list[tuple[int, int, bytes]]:
    """Every record Tidegate's read_committed consumer returns, reading each partition
    to its high watermark (an open transaction pinning the LSO fails the read)."""
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    out: list[tuple[int, int, bytes]] = []
    with Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed",
                   "auto.offset.reset": "earliest"}) as c, Admin(
                       {"bootstrap.servers": bootstrap}) as admin:
        c.assign(tps)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = c.poll(500)
            for r in records:
                assert r.value is not None
                out.append((r.partition, r.offset, r.value))
            if records:
                continue
            highs, _ = watermarks(admin)
            positions = [c.position(tp) for tp in tps]
            if all(p >= h for p, h in zip(positions, highs)):
                return out
        raise AssertionError(f"Tidegate's read_committed consumer did not reach the high "
                             f"watermark in {timeout}s: positions {positions}, high "
                             f"watermarks {highs}")


def wait_for_open_txns_to_end(admin: Admin, ids: list[str], hw_at_free: list[int],
                              started_before_ms: int, deadline: float
                              ) -> tuple[float, list[str]]:
    """Poll until the LSO of every partition reaches `hw_at_free` and none of `ids` has a
    transaction that started before `started_before_ms` (epoch ms), or `deadline`;
    returns when that happened (monotonic) and what is still open. ListOffsets first,
    DescribeTransactions only once the LSOs are there: a request to a coordinator
    partition could wake one that would otherwise stay stuck."""
    pinned: list[str] = []
    while time.monotonic() < deadline:
        _, lso = watermarks(admin)
        pinned = [f"partition {p}: LSO {lso[p]} < {hw_at_free[p]}"
                  for p in range(PARTITIONS) if lso[p] < hw_at_free[p]]
        if not pinned:
            break
        time.sleep(0.25)
    stale: list[str] = []
    while not pinned:
        stale = [f"{tid}: {d.state} since {d.start_time_ms}"
                 for tid, d in admin.describe_transactions(ids).items()
                 if d.state in ("Ongoing", "PrepareCommit", "PrepareAbort")
                 and 0 <= d.start_time_ms < started_before_ms]
        if not stale or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    return time.monotonic(), pinned + stale


def _final_reads(bootstrap: str, history: History, label: str
                 ) -> tuple[Report, list[tuple[int, int, bytes]]]:
    final = read_committed_all(bootstrap, TOPIC, timeout=30)
    ours = tidegate_read_committed(bootstrap)
    assert sorted(ours) == sorted(final), (
        f"{label}: Tidegate's and librdkafka's read_committed consumers disagree: "
        f"{len(ours)} against {len(final)} records, e.g. "
        f"{sorted(set(ours) ^ set(final))[:5]}")
    ops = [*history.ops]
    history_with_final = History()
    for op in ops:
        history_with_final.add(op.process, op.type, op.f, op.value)
    history_with_final.add("final", "ok", "final-read",
                           [Read(p, o, v.decode()) for p, o, v in final])
    return check(history_with_final.ops), final


def run_disk_full_workload(tmp_path: Path, mnt: Path, *, episodes: int, full_s: float,
                           seed: int) -> None:
    rng = random.Random(seed)
    broker = BrokerProcess(mnt / "data", overrides=OVERRIDES)
    broker.start()
    history = History()
    workers: list[TxnWorker] = []
    stopped = False
    try:
        create_topics(broker.bootstrap, TOPIC, partitions=PARTITIONS)
        admin = Admin({"bootstrap.servers": broker.bootstrap})
        lines_before = len(broker.log_lines)
        stop_at = time.monotonic() + 3600  # reset below, once the episodes are over
        workers = [TxnWorker(i, broker, history, stop_at, seed * 100 + i) for i in range(4)]
        for w in workers:
            w.start()
        budget = TXN_TIMEOUT_MS / 1000 + ABORT_CHECK_MS / 1000 + SLACK_S
        late: list[str] = []
        episode_lines: list[int] = []
        abandoned = []
        for episode in range(episodes):
            # some healthy traffic first; a transaction abandoned now times out while full
            abandoned.append(abandon_a_transaction(broker.bootstrap, history,
                                                   f"abandoned-{episode}"))
            time.sleep(TXN_TIMEOUT_MS / 1000 - rng.uniform(3.0, 5.0))
            lines_at_start = len(broker.log_lines)
            filler = Filler(mnt)
            history.add("nemesis", "info", "disk-full")
            filler.start()
            while filler.full_at is None and filler.is_alive():
                time.sleep(0.05)
            time.sleep(full_s)
            history.add("nemesis", "info", "disk-freed")
            filler.free()
            freed_at = time.monotonic()
            freed_ms = int(time.time() * 1000)
            hw_at_free, _ = watermarks(admin)
            ids = [f"queue-{i}" for i in range(4)] + [
                f"abandoned-{i}" for i in range(episode + 1)]
            ended_at, still_open = wait_for_open_txns_to_end(
                admin, ids, hw_at_free, freed_ms, freed_at + budget)
            if still_open:
                late.append(f"episode {episode}: {budget:.1f}s after space returned: "
                            f"{still_open}")
            print(f"episode {episode}: open transactions ended "
                  f"{ended_at - freed_at:.1f}s after space returned")
            time.sleep(max(0.0, freed_at + budget - time.monotonic()))
            episode_lines.append(len(broker.log_lines) - lines_at_start)
        for w in workers:
            w.stop_at = time.monotonic()
        for w in workers:
            w.join(90)
        assert not any(w.is_alive() for w in workers), "a worker did not stop"
        for w in workers:
            w.producer = None  # no client of the broker left to restart under it
        abandoned.clear()
        crashed = [e for w in workers for e in w.errors if e.startswith("worker crashed")]
        assert not crashed, crashed

        # -- every transaction has ended: the LSO is the high watermark, consumers reach it
        deadline = time.monotonic() + budget
        while True:
            hw, lso = watermarks(admin)
            if lso == hw or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        assert lso == hw, f"after the workers stopped: LSO {lso} against high watermarks {hw}"
        report, final = _final_reads(broker.bootstrap, history, "before the restart")
        logs = broker.log_lines[lines_before:]
        summary = (f"seed={seed} {report.summary()}\nlines per episode {episode_lines}; "
                   f"client errors {sum(len(w.errors) for w in workers)} (e.g. "
                   f"{[e for w in workers for e in w.errors][:5]})")
        print(summary)
        assert not late, f"transactions outlived their timeout: {late}\n{summary}"
        assert report.valid, summary
        assert report.stats["ok"] >= 10, summary

        # -- the same after a clean restart
        admin.close()
        assert broker.stop() == 0
        stopped = True
        broker.start()
        stopped = False
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin2:
            hw2, lso2 = watermarks(admin2)
        assert hw2 == hw and lso2 == hw2, (
            f"after a clean restart: high watermarks {hw2} (before {hw}), LSO {lso2}")
        report2, final2 = _final_reads(broker.bootstrap, history, "after the restart")
        assert sorted(final2) == sorted(final), "the restart changed what is committed"
        assert report2.valid, report2.summary()
        assert broker.stop() == 0
        stopped = True
        assert not [ln for ln in logs if "Traceback" in ln], "\n".join(logs[-80:])
        assert all(n <= MAX_EPISODE_LINES for n in episode_lines), (
            f"{episode_lines} lines in the episodes:\n" + "\n".join(logs[-120:]))
        assert sum("disk full:" in ln for ln in logs) == episodes, "\n".join(logs[-80:])
        assert sum("disk no longer full:" in ln for ln in logs) == episodes, \
            "\n".join(logs[-80:])
        assert not [ln for ln in broker.log_lines if "Traceback" in ln]
    finally:
        for w in workers:
            w.stop_at = 0
        if not stopped:
            broker.kill()
        (tmp_path / "broker.log").write_text(broker.logs())
        print(f"broker log: {tmp_path / 'broker.log'}")


def test_transactions_through_a_full_disk(tmp_path: Path, small_fs: Path) -> None:
    run_disk_full_workload(tmp_path, small_fs, episodes=1, full_s=8, seed=21)


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                    reason="soak run: `make soak` (TIDEGATE_SOAK=1)")
def test_transactions_through_full_disks_soak(tmp_path: Path, small_fs: Path) -> None:
    run_disk_full_workload(tmp_path, small_fs, episodes=6, full_s=15, seed=soak_seed())
