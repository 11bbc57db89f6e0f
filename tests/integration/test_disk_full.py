"""Disk full: a broker whose log directory fills up under acks=all load.

The test mounts a 40 MB tmpfs of its own (skipped when mounting is not permitted),
puts a ballast file and the broker's log directory on it, and produces with
confluent-kafka (acks=all) until appends are refused. Then, while the disk is full:
every acknowledged record is readable at its offset, the broker serves reads, the log
has one "disk full" line for the directory and no traceback although the checkpoint,
retention, cleaner, flush and expiry jobs run every few hundred ms and a consumer
group keeps committing; `tidegate topics describe` shows the free space and the
warning. After the ballast is deleted, writes resume, the log says so once, and the
broker stops cleanly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import ROOT, BrokerProcess

from tidegate.storage.disk_space import CLEAR_AFTER_S

TOPIC = "filling"
PARTITIONS = 2
FAST_JOBS = {
    "log.flush.offset.checkpoint.interval.ms": "300",
    "log.retention.check.interval.ms": "300",
    "log.cleaner.backoff.ms": "300",
    "log.flush.scheduler.interval.ms": "300",
    "producer.id.expiration.check.interval.ms": "300",
    "log.dir.free.space.check.interval.ms": "300",
    "log.dir.free.space.warn.bytes": str(20 << 20),
    "offsets.topic.num.partitions": "2",
    "offsets.topic.segment.bytes": str(1 << 20),
}


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a 40 MB tmpfs to fill (needs root / CAP_SYS_ADMIN): "
                    f"{r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "tidegate.cli.main", *args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)


class Load:
    """acks=all producer in a thread; records what was acknowledged and what failed."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors: list[str] = []
        self.sent = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
            "message.timeout.ms": 4000, "retry.backoff.ms": 50,
            "enable.idempotence": False,
        })
        self.prefix = prefix
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: object, msg: object) -> None:
        with self.lock:
            if err is None:
                key = (msg.partition(), msg.offset())  # type: ignore[attr-defined]
                self.acked[key] = msg.value()  # type: ignore[attr-defined]
            else:
                self.errors.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            value = f"{self.prefix}-{i:08d}-".encode() + b"x" * 2000
            try:
                self.producer.produce(TOPIC, value, f"k{i}".encode(), on_delivery=self._on_delivery)
                i += 1
                self.sent = i
            except BufferError:
                self.producer.poll(0.05)
            self.producer.poll(0)
        self.producer.flush(30)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def _read(bootstrap: str, keys: dict[tuple[int, int], bytes]) -> dict[tuple[int, int], bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                  "enable.auto.commit": False, "fetch.max.bytes": 1 << 20})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1]
                for p in range(PARTITIONS)}
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got: dict[tuple[int, int], bytes] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(sum(1 for pp, _ in got if pp == p) >= ends[p] for p in range(PARTITIONS)):
                break
            for m in c.consume(1000, 0.5):
                assert not m.error(), m.error()
                got[(m.partition(), m.offset())] = m.value()
        return got
    finally:
        c.close()


def _produce_some(bootstrap: str, prefix: str, n: int) -> dict[tuple[int, int], bytes]:
    acked: dict[tuple[int, int], bytes] = {}

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 20000})
    for i in range(n):
        p.produce(TOPIC, f"{prefix}-{i:08d}-".encode() + b"y" * 2000, on_delivery=on_delivery)
    assert p.flush(30) == 0
    return acked


def _committer(bootstrap: str, stop: threading.Event, outcomes: list[str]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "committer",
                  "enable.auto.commit": False})
    try:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                c.commit(offsets=[TopicPartition(TOPIC, 0, n)], asynchronous=False)
                outcomes.append("ok")
            except KafkaException as e:
                outcomes.append(e.args[0].name())
            time.sleep(0.05)
    finally:
        c.close()


def test_disk_full_then_space_returns(small_fs: Path) -> None:
    ballast = small_fs / "ballast"
    with open(ballast, "wb") as f:
        f.write(os.urandom(8 << 20))
    broker = BrokerProcess(small_fs / "data", overrides=FAST_JOBS)
    broker.start()
    stopped = False
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1,
                                      config={"segment.bytes": str(1 << 20)})])[TOPIC].result(30)
        stop_commits = threading.Event()
        commit_outcomes: list[str] = []
        committer = threading.Thread(target=_committer,
                                     args=(broker.bootstrap, stop_commits, commit_outcomes))
        committer.start()
        try:
            with Load(broker.bootstrap, "a") as load:
                deadline = time.monotonic() + 120
                while not load.errors and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert load.errors, "the disk never filled"
                time.sleep(4)  # keep producing against a full disk; jobs run meanwhile
        finally:
            stop_commits.set()
            committer.join(60)
        assert os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize < 1 << 20
        assert load.acked, "nothing was acknowledged before the disk filled"
        assert all("KAFKA_STORAGE_ERROR" in e or "timed out" in e.lower() for e in load.errors), (
            set(load.errors))

        # -- while full: reads are served and every acknowledged record is there
        got = _read(broker.bootstrap, load.acked)
        missing = [k for k, v in load.acked.items() if got.get(k) != v]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
        logs = broker.logs()
        full_lines = [ln for ln in logs.splitlines() if "disk full:" in ln]
        assert len(full_lines) == 1, "\n".join(full_lines)
        assert "ERROR" in full_lines[0] and str(small_fs / "data") in full_lines[0]
        assert "Traceback" not in logs, logs[-5000:]
        assert "storage error" not in logs, logs[-5000:]
        assert "reloading it from its log" not in logs, logs[-5000:]
        assert "under log.dir.free.space.warn.bytes" in logs
        reloads = logs.count("reloaded __consumer_offsets")
        assert reloads <= 4, f"{reloads} reloads of __consumer_offsets partitions logged"
        assert commit_outcomes, "the committer never got an answer"

        described = _cli("topics", "describe", TOPIC, "--bootstrap-server", broker.bootstrap)
        assert described.returncode == 0, described.stderr
        assert f"LogDir: {(small_fs / 'data').resolve()}" in described.stdout, described.stdout
        assert "Free: " in described.stdout and "of 40.0 MiB" in described.stdout
        assert "WARNING: free space is under log.dir.free.space.warn.bytes" in described.stdout

        # -- space returns: writes resume, and the log says so once
        ballast.unlink()
        acked = _produce_some(broker.bootstrap, "b", 300)
        assert len(acked) == 300
        time.sleep(CLEAR_AFTER_S + 0.5)  # the quiet period after the last refused write
        acked.update(_produce_some(broker.bootstrap, "c", 10))
        got = _read(broker.bootstrap, acked)
        assert all(got.get(k) == v for k, v in acked.items())
        logs = broker.logs()
        assert logs.count("disk no longer full:") == 1, logs[-5000:]
        assert logs.count("disk full:") == 1
        assert "Traceback" not in logs, logs[-5000:]
        assert broker.stop() == 0
        stopped = True
    finally:
        if not stopped:
            broker.kill()
