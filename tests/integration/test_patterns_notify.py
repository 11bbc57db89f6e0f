"""Best-effort notification (patterns/notify) against a real broker and real HTTP
endpoints (an aiohttp server in this process), killed with kill -9.

The crash test: records are produced to a source topic while `tidegate notify run`
processes deliver them, each SIGKILLed at a random moment; the broker is killed and
restarted too. The endpoint answers 500 to a third of the first two attempts (so retries happen
while the kills do); a tenth of the records carry an ``url`` header naming an
endpoint that answers 500 forever. A last notifier runs `--until-idle`. Then every
source record must have been delivered (a 2xx answered) or be in the dead-letter
topic — the forever-500 ones, and only they, dead-lettered — and the delivery log must
end each one's attempts with ``delivered`` or ``dead-lettered``. `make soak`
(TIDEGATE_SOAK=1) kills many more times.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from confluent_kafka import Producer as CkProducer
from tests.integration.conftest import ROOT, BrokerProcess, free_port
from tests.integration.test_patterns_outbox import read_committed
from tests.integration.test_transactions import create

from tidegate.patterns.notify import NotificationQuery, Notifier, query_app

pytestmark = pytest.mark.interop

SOAK = pytest.mark.skipif(not os.environ.get("TIDEGATE_SOAK"),
                          reason="soak run: `make soak` (TIDEGATE_SOAK=1)")


class Receiver:
    """Real HTTP endpoints: ``/flaky`` fails a third of the first and second attempts
    (chosen by a hash of the id and attempt), ``/fail`` answers 500 forever,
    ``/hang`` never answers in time."""

    def __init__(self) -> None:
        self.port = free_port()
        self.delivered: Counter[str] = Counter()
        self.requests: Counter[str] = Counter()
        self.lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/{kind}", self._handle)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, request: web.Request) -> web.Response:
        kind = request.match_info["kind"]
        nid = request.headers["X-Notification-Id"]
        attempt = request.headers["X-Notification-Attempt"]
        await request.read()
        with self.lock:
            self.requests[nid] += 1
        if kind == "hang":
            await asyncio.sleep(3)  # longer than the notifier waits
        flaky = kind == "flaky" and int(attempt) <= 2 and \
            zlib.crc32(f"{nid}/{attempt}".encode()) % 3 == 0
        if kind == "fail" or flaky:
            return web.Response(status=500, text="no")
        with self.lock:
            self.delivered[nid] += 1
        return web.Response(text="ok")

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(10)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("notify") / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.start()
    try:
        yield r
    finally:
        r.stop()


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    return e


def notify_cmd(bootstrap: str, topic: str, receiver: Receiver, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tidegate.cli.main", "notify", "run",
            "--bootstrap-server", bootstrap, "--topic", topic,
            "--endpoint", receiver.url("flaky"), "--endpoint-header", "url",
            "--schedule", "100ms,200ms,300ms", "--request-timeout", "2s",
            "--log-topic", f"{topic}.log", "--dead-letter-topic", f"{topic}.dead", *extra]


def produce(bootstrap: str, topic: str, receiver: Receiver, first: int, n: int,
            rng: random.Random) -> set[int]:
    """n records numbered from `first`; returns the numbers sent to /fail."""
    p = CkProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failing = set()
    for i in range(first, first + n):
        headers = []
        if rng.random() < 0.1:
            headers = [("url", receiver.url("fail").encode())]
            failing.add(i)
        p.produce(topic, str(i).encode(), f"k{i % 7}".encode(), headers=headers)
    assert p.flush(30) == 0
    return failing


def crash_run(broker: BrokerProcess, receiver: Receiver, tmp: Path, *, rounds: int,
              broker_kill_rounds: set[int], seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    topic = f"notify{seed}"
    create(broker.bootstrap, topic, f"{topic}.log", f"{topic}.dead")
    failing: set[int] = set()
    sent = 0
    logs: list[Path] = []
    for r in range(rounds):
        failing |= produce(broker.bootstrap, topic, receiver, sent, 60, rng)
        sent += 60
        log = tmp / f"notify-{r}.log"
        logs.append(log)
        with open(log, "w") as f:
            p = subprocess.Popen(notify_cmd(broker.bootstrap, topic, receiver), stdout=f,
                                 stderr=subprocess.STDOUT, env=env(), cwd=ROOT)
        time.sleep(rng.uniform(1.2, 2.4))
        p.send_signal(signal.SIGKILL)
        p.wait()
        if r in broker_kill_rounds:
            broker.kill()
            broker.start()
    final = subprocess.run(notify_cmd(broker.bootstrap, topic, receiver, "--until-idle"),
                           capture_output=True, text=True, env=env(), cwd=ROOT, timeout=180)
    assert final.returncode == 0, final.stdout + final.stderr

    source = read_committed(broker.bootstrap, topic)
    assert len(source) == sent
    ids = {}
    for part_records in _ids(broker.bootstrap, topic):
        ids.update(part_records)
    dead = read_committed(broker.bootstrap, f"{topic}.dead")
    dead_numbers = {int(v) for _, v, _ in dead}
    assert dead_numbers == failing, "dead-lettered exactly the records sent to /fail"
    for _, _, h in dead:
        assert h["notify.attempts"] == b"4" and h["notify.error"] == b"HTTP 500"
    last: dict[str, dict[str, object]] = {}
    attempts: defaultdict[str, int] = defaultdict(int)
    for key, value, _ in read_committed(broker.bootstrap, f"{topic}.log"):
        entry = json.loads(value)
        last[key.decode()] = entry
        attempts[key.decode()] += 1
    for number, nid in ids.items():
        if number in failing:
            assert receiver.delivered[nid] == 0
            assert last[nid]["outcome"] == "dead-lettered", nid
        else:
            assert receiver.delivered[nid] >= 1, f"record {number} ({nid}) never delivered"
            assert last[nid]["outcome"] == "delivered", nid
    redelivered = sum(1 for nid in ids.values() if receiver.delivered[nid] > 1)
    return {"records": sent, "dead": len(dead_numbers), "redelivered": redelivered,
            "attempts": sum(attempts.values())}


def _ids(bootstrap: str, topic: str) -> list[dict[int, str]]:
    """Record number -> notification id, read with the library's own query."""
    q = NotificationQuery({"bootstrap.servers": bootstrap}, [topic], f"{topic}.log")
    return [{int(str(n["value"])): str(n["id"]) for n in q.since(0, limit=1_000_000)}]


def test_notifier_kill9(broker: BrokerProcess, receiver: Receiver, tmp_path: Path) -> None:
    stats = crash_run(broker, receiver, tmp_path, rounds=3, broker_kill_rounds={1}, seed=31)
    print(stats)
    assert stats["dead"] > 0 and stats["attempts"] > stats["records"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
@SOAK
def test_notifier_kill9_soak(broker: BrokerProcess, receiver: Receiver,
                             tmp_path: Path) -> None:
    stats = crash_run(broker, receiver, tmp_path, rounds=30, broker_kill_rounds={4, 13, 22},
                      seed=41)
    print(stats)
    assert stats["redelivered"] > 0, "no kill interrupted a delivery"


def test_500_forever_and_hang_end_in_the_dead_letter_topic(
        broker: BrokerProcess, receiver: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"bad-{uuid.uuid4().hex[:6]}"
    create(broker.bootstrap, topic, f"{topic}.log", f"{topic}.dead", partitions=1)
    p = CkProducer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, b"to-500", b"a", headers=[("url", receiver.url("fail"))])
    p.produce(topic, b"to-hang", b"b", headers=[("url", receiver.url("hang"))])
    p.produce(topic, b"fine", b"c", headers=[("url", receiver.url("ok"))])
    p.flush(10)

    def endpoint(record: object) -> str:
        return dict(record.headers)["url"].decode()  # type: ignore[attr-defined]

    n = Notifier([topic], endpoint, {"bootstrap.servers": broker.bootstrap},
                 schedule=(0.05, 0.1), request_timeout_s=0.5, log_topic=f"{topic}.log",
                 dead_letter_topic=f"{topic}.dead")
    with caplog.at_level("ERROR", logger="tidegate.patterns.notify"):
        n.run(until_idle=True)
    n.close()
    assert (n.stats.delivered, n.stats.dead_lettered, n.stats.attempts) == (1, 2, 7)
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert len(alerts) == 2, alerts
    dead = {v: h for _, v, h in read_committed(broker.bootstrap, f"{topic}.dead")}
    assert set(dead) == {b"to-500", b"to-hang"}
    assert dead[b"to-500"]["notify.error"] == b"HTTP 500"
    assert b"timed out" in dead[b"to-hang"]["notify.error"]
    assert dead[b"to-hang"]["notify.attempts"] == b"3"
    log = [json.loads(v) for _, v, _ in read_committed(broker.bootstrap, f"{topic}.log")]
    assert Counter(e["outcome"] for e in log) == {"retry": 4, "dead-lettered": 2,
                                                  "delivered": 1}

    # The receiving side asks what it missed: the query over HTTP, then the CLI.
    query = NotificationQuery({"bootstrap.servers": broker.bootstrap}, [topic],
                              f"{topic}.log")
    port = free_port()
    ready = threading.Event()
    loop = asyncio.new_event_loop()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        runner = web.AppRunner(query_app(query))
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    assert ready.wait(10)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/notifications?since_ms=0",
                                    timeout=30) as resp:
            found = json.loads(resp.read())["notifications"]
        assert [(x["value"], x["state"]) for x in found] == [
            ("to-500", "dead-lettered"), ("to-hang", "dead-lettered"), ("fine", "delivered")]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/notifications/{topic}:0:2",
                                    timeout=30) as resp:
            one = json.loads(resp.read())
        assert one["value"] == "fine" and len(one["attempts"]) == 1
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/notifications/{topic}:0:99",
                                   timeout=30)
            raise AssertionError("expected 404")
        except urllib.error.HTTPError as e:
            assert e.code == 404
    finally:
        loop.call_soon_threadsafe(loop.stop)
    r = subprocess.run([sys.executable, "-m", "tidegate.cli.main", "notify", "query",
                        "--bootstrap-server", broker.bootstrap, "--topic", topic,
                        "--log-topic", f"{topic}.log", "--key", "b"], capture_output=True,
                       text=True, env=env(), cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [(x["value"], x["state"], len(x["attempts"])) for x in lines] == [
        ("to-hang", "dead-lettered", 3)]
