"""Tidegate's client and CLI against a real broker process, with confluent-kafka
(librdkafka) as the interoperability oracle."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import confluent_kafka as ck
import pytest
from tests.integration.cli_util import cli
from tests.integration.conftest import ROOT, BrokerProcess, free_port

from tidegate.client import (
    Admin,
    AsyncConsumer,
    AsyncProducer,
    ConfigResource,
    Consumer,
    ConsumerRecord,
    NewTopic,
    Producer,
    TopicPartition,
)
from tidegate.client.partitioner import partition_for_key
from tidegate.common.errors import MessageTooLargeError

pytestmark = pytest.mark.interop


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(broker: BrokerProcess, name: str, partitions: int = 1) -> None:
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topic(name, partitions)


async def consume_all(
    bootstrap: str, tps: list[TopicPartition], n: int, timeout_s: float = 10
) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    async with AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        deadline = time.monotonic() + timeout_s
        while len(got) < n and time.monotonic() < deadline:
            got += await c.poll(timeout_ms=500)
    return got


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_under_each_codec(shared_broker: BrokerProcess, codec: str) -> None:
    topic = topic_name(f"codec-{codec}")
    create(shared_broker, topic, 2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]

    async def main() -> None:
        async with AsyncProducer(
            bootstrap_servers=shared_broker.bootstrap, compression_type=codec, linger_ms=2
        ) as p:
            futs = [
                await p.send(
                    topic,
                    b"value-%d" % i * 3,
                    key=b"k%d" % (i % 7),
                    headers=[("i", str(i))],
                    timestamp_ms=1_700_000_000_000 + i,
                )
                for i in range(2000)
            ]
            metas = [await f for f in futs]
        got = await consume_all(shared_broker.bootstrap, tps, 2000)
        assert len(got) == 2000
        by_offset = {(r.partition, r.offset): r for r in got}
        for i, m in enumerate(metas):
            r = by_offset[(m.partition, m.offset)]
            assert (r.key, r.value, r.headers, r.timestamp) == (
                b"k%d" % (i % 7),
                b"value-%d" % i * 3,
                (("i", str(i).encode()),),
                1_700_000_000_000 + i,
            )
            assert m.partition == partition_for_key(b"k%d" % (i % 7), 2)
        # Per-partition order is the send order.
        for tp in tps:
            values = [int(r.headers[0][1] or b"") for r in got if r.partition == tp.partition]
            assert values == sorted(values)

    asyncio.run(main())


def test_tidegate_producer_to_confluent_consumer(shared_broker: BrokerProcess) -> None:
    topic = topic_name("tg-to-ck")
    create(shared_broker, topic, 1)
    with Producer(bootstrap_servers=shared_broker.bootstrap, compression_type="zstd") as p:
        futs = [
            p.send(topic, f"v{i}", key=f"k{i}", headers=[("h", b"\x00\xff")]) for i in range(500)
        ]
        p.flush()
        assert [f.result().offset for f in futs] == list(range(500))
    c = ck.Consumer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        got: list[ck.Message] = []
        deadline = time.monotonic() + 10
        while len(got) < 500 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.append(m)
    finally:
        c.close()
    assert [(m.offset(), m.key(), m.value()) for m in got] == [
        (i, b"k%d" % i, b"v%d" % i) for i in range(500)
    ]
    assert got[0].headers() == [("h", b"\x00\xff")]


def test_confluent_producer_to_tidegate_consumer(shared_broker: BrokerProcess) -> None:
    topic = topic_name("ck-to-tg")
    create(shared_broker, topic, 3)
    p = ck.Producer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "linger.ms": 5,
            "compression.type": "snappy",
            "partitioner": "murmur2_random",
        }
    )
    for i in range(300):
        p.produce(topic, value=b"v%d" % i, key=b"key%d" % i, headers=[("n", b"%d" % i)])
    assert p.flush(10) == 0
    with Consumer(bootstrap_servers=shared_broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, i) for i in range(3)])
        got: list[ConsumerRecord] = []
        deadline = time.monotonic() + 10
        while len(got) < 300 and time.monotonic() < deadline:
            got += c.poll(timeout_ms=500)
        ends = c.end_offsets([TopicPartition(topic, i) for i in range(3)])
    assert sorted(int(r.value[1:]) for r in got if r.value) == list(range(300))
    for r in got:
        assert r.key == b"key" + (r.value or b"")[1:]
        assert r.headers == (("n", (r.value or b"")[1:]),)
    assert sum(ends.values()) == 300


def test_keyed_records_land_where_librdkafka_murmur2_random_puts_them(
    shared_broker: BrokerProcess,
) -> None:
    topic = topic_name("keys")
    create(shared_broker, topic, 7)
    keys = [b"user-%d" % i for i in range(60)] + [b"", b"\xff\x00", "ключ".encode()]
    ck_parts: dict[bytes, int] = {}

    def report(err: object, msg: ck.Message) -> None:
        assert err is None
        ck_parts[msg.key()] = msg.partition()

    p = ck.Producer({"bootstrap.servers": shared_broker.bootstrap, "partitioner": "murmur2_random"})
    for k in keys:
        p.produce(topic, value=b"ck", key=k, on_delivery=report)
    assert p.flush(10) == 0
    with Producer(bootstrap_servers=shared_broker.bootstrap) as tp:
        futs = {k: tp.send(topic, b"tg", key=k) for k in keys}
        tg_parts = {k: f.result(10).partition for k, f in futs.items()}
    assert tg_parts == ck_parts
    assert len(set(tg_parts.values())) > 3


def test_admin_operations(shared_broker: BrokerProcess) -> None:
    topic = topic_name("admin")
    with Admin(bootstrap_servers=shared_broker.bootstrap) as admin:
        assert admin.create_topics([NewTopic(topic, 2, 1, {"retention.ms": "123456"})]) == {
            topic: None
        }
        err = admin.create_topics([NewTopic(topic, 2)])[topic]
        assert err is not None and err.name == "TOPIC_ALREADY_EXISTS"
        assert topic in admin.list_topics()
        (desc,) = admin.describe_topics([topic])
        assert [p.partition for p in desc.partitions] == [0, 1]
        assert desc.configs["retention.ms"].value == "123456"
        assert admin.create_partitions({topic: 4}) == {topic: None}
        assert len(admin.describe_topics([topic])[0].partitions) == 4
        res = ConfigResource.topic(topic)
        admin.incremental_alter_configs(res, {"retention.ms": "999"}, ["cleanup.policy"])
        assert admin.describe_configs([res])[res]["retention.ms"].value == "999"
        with Producer(bootstrap_servers=shared_broker.bootstrap) as p:
            for i in range(10):
                p.send(topic, b"x", partition=0, timestamp_ms=1000 * i)
        tp0 = TopicPartition(topic, 0)
        offsets = admin.list_offsets({tp0: -1})
        assert offsets[tp0] is not None and offsets[tp0].offset == 10
        by_time = admin.list_offsets({tp0: 4500})[tp0]
        assert by_time is not None and by_time.offset == 5
        assert admin.delete_records({tp0: 3}) == {tp0: 3}
        earliest = admin.list_offsets({tp0: -2})[tp0]
        assert earliest is not None and earliest.offset == 3
        cluster = admin.describe_cluster()
        assert [b.port for b in cluster.brokers] == [shared_broker.port]
        admin.delete_topic(topic)
        assert topic not in admin.list_topics()


def test_producer_errors_are_clear(shared_broker: BrokerProcess) -> None:
    with (
        Producer(bootstrap_servers=shared_broker.bootstrap, max_request_size=5000) as p,
        pytest.raises(MessageTooLargeError, match=r"larger than max\.request\.size=5000"),
    ):
        p.send("whatever", b"x" * 6000)
    with pytest.raises(Exception, match="producer is closed"):
        p.send("whatever", b"x")


# -- CLI ---------------------------------------------------------------------------


def test_cli_topics_produce_consume(shared_broker: BrokerProcess, tmp_path: Path) -> None:
    bs = ["--bootstrap-server", shared_broker.bootstrap]
    topic = topic_name("cli")
    r = cli("topics", "create", topic, "--partitions", "2", "--config", "retention.ms=60000", *bs)
    assert r.returncode == 0, r.stderr
    assert cli("topics", "create", topic, *bs).returncode == 1
    assert cli("topics", "create", topic, "--if-not-exists", *bs).returncode == 0
    assert topic in cli("topics", "list", *bs).stdout.decode().split()
    desc = cli("topics", "describe", topic, *bs).stdout.decode()
    assert "PartitionCount: 2" in desc and "retention.ms=60000" in desc
    r = cli("topics", "alter-config", topic, "--set", "retention.ms=70000", *bs)
    assert r.returncode == 0, r.stderr
    assert "retention.ms=70000" in cli("topics", "describe", topic, *bs).stdout.decode()

    data = tmp_path / "in.txt"
    data.write_bytes(b"".join(b"k%d:line %d\n" % (i % 3, i) for i in range(1000)))
    r = cli(
        "produce",
        topic,
        "--file",
        str(data),
        "--key-separator",
        ":",
        "--header",
        "src=f",
        "--compression",
        "gzip",
        *bs,
    )
    assert r.returncode == 0, r.stderr
    assert b"100.0%" in r.stderr and b"1,000 lines" in r.stderr  # progress summary
    r = cli("produce", topic, "--partition", "1", *bs, stdin=b"a\r\nb\n\nc")
    assert r.returncode == 0, r.stderr

    r = cli("consume", topic, "--from-beginning", "--max-messages", "1004", "--format", "json", *bs)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.decode().splitlines()]
    assert len(rows) == 1004 and b"Processed a total of 1004 messages" in r.stderr
    assert sorted(x["value"] for x in rows if x["key"] is None) == ["", "a", "b", "c"]
    keyed = [x for x in rows if x["key"] is not None]
    assert all(x["headers"] == [{"key": "src", "value": "f"}] for x in keyed)
    for x in keyed:
        assert x["partition"] == partition_for_key(x["key"].encode(), 2)
        assert x["value"].startswith("line ")

    r = cli(
        "consume",
        topic,
        "--partition",
        "1",
        "--offset",
        "0",
        "--print-key",
        "--timeout-ms",
        "500",
        *bs,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-4:] == [b"null\ta", b"null\tb", b"null\t", b"null\tc"]
    r = cli(
        "consume", topic, "--from-timestamp", "2999-01-01T00:00:00Z", "--timeout-ms", "300", *bs
    )
    assert r.returncode == 0 and r.stdout == b""

    assert cli("topics", "delete", topic, *bs).returncode == 0
    assert topic not in cli("topics", "list", *bs).stdout.decode().split()


def test_cli_lists_say_when_there_is_nothing(tmp_path: Path) -> None:
    """An empty broker: each list command says so in one line on stderr; stdout (the
    names or table rows a script reads) stays empty."""
    b = BrokerProcess(tmp_path / "data")
    b.start()
    try:
        bs = ["--bootstrap-server", b.bootstrap]
        for args, message in (
            (["topics", "list"],
             "no topics (internal topics are listed with --include-internal)"),
            (["groups", "list"], "no consumer groups"),
            (["txn", "list"], "no transactions"),
            (["txn", "list", "--state", "Ongoing"], "no transactions match the filters"),
        ):
            r = cli(*args, *bs)
            assert r.returncode == 0, r.stderr
            assert (r.stdout, r.stderr.decode()) == (b"", message + "\n"), args
        create(b, "one")
        r = cli("topics", "list", *bs)
        assert (r.stdout, r.stderr) == (b"one\n", b"")
    finally:
        b.stop()


def test_cli_errors_are_one_clear_line(shared_broker: BrokerProcess) -> None:
    dead = f"127.0.0.1:{free_port()}"
    for args in (["topics", "list"], ["produce", "t"], ["consume", "t"]):
        r = cli(*args, "--bootstrap-server", dead, stdin=b"x\n")
        assert r.returncode == 1
        err = r.stderr.decode().strip().splitlines()
        assert f"cannot reach {dead}" in err[0]
        assert "is the broker running? start it with `tidegate serve`" in err[0]
    r = cli("consume", "no-such-topic", "--bootstrap-server", shared_broker.bootstrap)
    assert r.returncode == 1
    assert "topic 'no-such-topic' does not exist" in r.stderr.decode()
    r = cli(
        "produce",
        "t",
        "--key-separator",
        ":",
        "--bootstrap-server",
        shared_broker.bootstrap,
        stdin=b"no separator\n",
    )
    assert r.returncode == 1 and "line 1 has no key separator" in r.stderr.decode()


# -- first use: quiet close, poll(timeout=), the consume summary, `make run` ------------

_CLOSE_SCRIPT = """
import sys
from tidegate.client import Admin, Consumer, Producer, TopicPartition
bs, topic = sys.argv[1], sys.argv[2]
c = Consumer(bootstrap_servers=bs, group_id="quiet", auto_offset_reset="earliest",
             request_timeout_ms=1000)
c.assign([TopicPartition(topic, p) for p in range(3)])
try:
    print("polled", len(c.poll(1500)), len(c.poll(timeout=0.2)))
except Exception as e:
    print("poll failed:", type(e).__name__)
c.close()
p = Producer(bootstrap_servers=bs, delivery_timeout_ms=1500, request_timeout_ms=1000)
p.send(topic, b"x")
try:
    p.flush()
except Exception as e:
    print("flush failed:", type(e).__name__)
p.close()
a = Admin(bootstrap_servers=bs, request_timeout_ms=1000)
try:
    a.describe_cluster()
except Exception as e:
    print("admin failed:", type(e).__name__)
a.close()
print("closed")
"""


@pytest.mark.parametrize("reachable", [True, False])
def test_blocking_clients_close_quietly(shared_broker: BrokerProcess, reachable: bool) -> None:
    topic = topic_name("quiet")
    create(shared_broker, topic, 3)
    bs = shared_broker.bootstrap if reachable else f"127.0.0.1:{free_port()}"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONASYNCIODEBUG="0")
    r = subprocess.run(
        [sys.executable, "-c", _CLOSE_SCRIPT, bs, topic],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert "closed" in r.stdout
    if reachable:  # poll(timeout=seconds) is accepted
        assert "polled" in r.stdout, r.stdout
    for bad in ("Task was destroyed", "Event loop is closed", "Traceback", "never retrieved"):
        assert bad not in r.stderr, r.stderr


def test_consume_summary_starts_its_own_line_after_ctrl_c(shared_broker: BrokerProcess) -> None:
    import pty
    import select
    import signal as _signal

    topic = topic_name("summary")
    create(shared_broker, topic)
    assert cli("produce", topic, "--bootstrap-server", shared_broker.bootstrap,
               stdin=b"a\nb\nc\n").returncode == 0  # fmt: skip
    pid, fd = pty.fork()
    if pid == 0:  # the child: consume on a terminal until interrupted
        # a terminal session's signal state, whatever the test process inherited or set
        # (an ignored or blocked SIGINT survives exec)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, [])
        _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
        os.environ["PYTHONPATH"] = str(ROOT / "src")
        # -X faulthandler: if it hangs, SIGABRT below makes it print every thread's stack
        os.execv(sys.executable, [sys.executable, "-X", "faulthandler", "-m",
                                  "tidegate.cli.main", "consume", topic,
                                  "--from-beginning", "--bootstrap-server",
                                  shared_broker.bootstrap])  # fmt: skip
    out = b""
    # a cold CLI start compiles every module (PYTHONDONTWRITEBYTECODE on the CI machine)
    # and may be slow on a loaded machine: each phase has a deadline of its own
    deadline = time.monotonic() + 60
    try:
        while b"c\r\n" not in out and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                out += os.read(fd, 4096)
        os.write(fd, b"\x03")  # Ctrl-C typed on the terminal: echoed as ^C, then SIGINT
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not select.select([fd], [], [], 0.5)[0]:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
            if b"Processed a total" in out:
                break
        if b"Processed a total" not in out:  # hung: show where (faulthandler's dump)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, _signal.SIGABRT)
            until = time.monotonic() + 5
            while time.monotonic() < until and select.select([fd], [], [], 0.5)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
    finally:
        try:
            os.kill(pid, _signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    assert "Processed a total of 3 messages" in text, text
    line = next(x for x in text.splitlines() if "Processed a total" in x)
    assert line.strip() == "Processed a total of 3 messages", text


def test_make_run_installs_only_what_serving_needs(tmp_path: Path) -> None:
    r = subprocess.run(
        ["make", "-n", "-B", "run", f"VENV={tmp_path / 'venv'}"],
        capture_output=True, text=True, cwd=ROOT, timeout=30,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "pip install --quiet -e ." in r.stdout
    assert "[dev]" not in r.stdout and "tidegate serve" in r.stdout
