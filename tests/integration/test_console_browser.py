"""The web console in a real browser: Debian's chromium, headless, driven by Selenium.

One broker and one `tidegate console --bootstrap-server` process (the standalone console,
a real user path; the broker's own HTTP listener serves the same routes) for the whole
module. The test fills the broker with confluent-kafka: committed records with JSON
values and headers, an aborted transaction, a transaction left open (it pins the
partition's last stable offset) and a read_committed consumer group stuck behind it.
Then every page must show that data; aborting the open transaction from the
transactions page must move the LSO (read back through Tidegate's admin client) and,
once the group consumes again, its lag must drain on the group page, live. Screenshots
of each page are saved in a temporary directory whose path the test prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from tests.integration.conftest import ROOT, BrokerProcess, free_port

from tidegate.client import Admin, TopicPartition

pytestmark = pytest.mark.interop

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip("needs Debian's chromium and chromium-driver (make deps-system)",
                allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.expected_conditions import staleness_of  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

TOPIC, GROUP, OPEN_TID = "orders", "billing", "stuck-pipeline"
EXTRA = "clicks"  # created and deleted from the pages
COMMITTED, ABORTED, AFTER = 10, 3, 5  # records: committed, in the aborted txn, after the open txn


class ConsoleProcess:
    def __init__(self, bootstrap: str) -> None:
        self.port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidegate.cli.main", "console", "--bootstrap-server",
             bootstrap, "--listen", f"127.0.0.1:{self.port}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        self.lines: list[str] = []
        ready = threading.Event()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if "listening on" in line:
                    ready.set()
        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(20):
            self.proc.kill()
            raise RuntimeError("console did not start:\n" + "\n".join(self.lines))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _fill(bootstrap: str) -> tuple[Consumer, Producer]:
    """The data every page must show; returns the live group member and the producer
    whose transaction stays open (kept referenced so it stays alive)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        f.result()
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(COMMITTED):
        plain.produce(TOPIC, key=f"key-{i}", value=json.dumps({"order": i, "tag": "<b>x</b>"}),
                      headers=[("trace", b"<script>alert(1)</script>")])
    plain.flush()
    aborter = Producer({"bootstrap.servers": bootstrap, "transactional.id": "aborter"})
    aborter.init_transactions()
    aborter.begin_transaction()
    for i in range(ABORTED):
        aborter.produce(TOPIC, value=f"aborted-{i}")
    aborter.flush()  # in the log before the abort, so the log holds aborted records
    aborter.abort_transaction()
    stuck = Producer({"bootstrap.servers": bootstrap, "transactional.id": OPEN_TID,
                      "transaction.timeout.ms": 600_000})
    stuck.init_transactions()
    stuck.begin_transaction()
    stuck.produce(TOPIC, value="open-txn-record")
    stuck.flush()
    for i in range(AFTER):
        plain.produce(TOPIC, value=f"after-{i}")
    plain.flush()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    _consume(consumer, COMMITTED)
    return consumer, stuck


def _consume(consumer: Consumer, want: int, timeout: float = 20.0) -> None:
    got, deadline = 0, time.monotonic() + timeout
    while got < want and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            got += 1
    assert got >= want, f"consumed {got} of {want}"
    # one more poll: librdkafka moves its position past a trailing transaction marker
    # when it fetches it, so the commit covers the marker and the lag can reach 0
    consumer.poll(0.5)
    consumer.commit(asynchronous=False)


def _offsets(bootstrap: str) -> tuple[int, int]:
    """(LSO, HW) of orders-0 through Tidegate's client."""
    tp = TopicPartition(TOPIC, 0)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        lso = admin.list_offsets({tp: -1}, isolation_level=1)[tp]
        hw = admin.list_offsets({tp: -1})[tp]
    assert lso is not None and hw is not None
    return lso.offset, hw.offset


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
          ) -> Iterator[dict[str, Any]]:
    # no initial rebalance delay: the group's one member joins at once
    broker = BrokerProcess(tmp_path_factory.mktemp("console") / "data",
                           overrides={"group.initial.rebalance.delay.ms": "0"})
    broker.start()
    console = None
    try:
        console = ConsoleProcess(broker.bootstrap)
        consumer, stuck = _fill(broker.bootstrap)
        shots = tmp_path_factory.mktemp("console-screenshots")
        # on the terminal even when pytest captures output (as `make test` runs it)
        capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            print(f"\nconsole screenshots in {shots}")
        yield {"broker": broker, "console": console, "consumer": consumer, "stuck": stuck,
               "shots": shots}
        consumer.close()
    finally:
        if console is not None:
            console.stop()
        broker.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(cond: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _submit(driver: Any, css: str) -> None:
    """Click a form's button and wait until the browser has left the page it was on.

    A click returns before the navigation it starts: reading the page straight after it
    can read the old page (its `main` is still there), so wait for the old root to go stale.
    The live refresh may swap the button out between finding and clicking it (stale
    element, or chromedriver's "Node with given id does not belong to the document"): find
    it again then.
    """
    for attempt in range(10):
        old = driver.find_element(By.TAG_NAME, "html")
        try:
            driver.find_element(By.CSS_SELECTOR, css).click()
            break
        except StaleElementReferenceException:
            pass
        except WebDriverException as e:
            if "does not belong to the document" not in str(e):
                raise
        if attempt == 9:
            raise AssertionError(f"{css} kept being replaced before it could be clicked")
        time.sleep(0.1)
    WebDriverWait(driver, 15).until(staleness_of(old))


def _text(driver: Any, css: str) -> str:
    """The element's text; the live refresh may swap it out under us: try again."""
    for _ in range(20):
        try:
            return str(driver.find_element(By.CSS_SELECTOR, css).text)
        except (NoSuchElementException, StaleElementReferenceException):
            time.sleep(0.05)
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def _shot(driver: Any, setup: dict[str, Any], name: str) -> None:
    driver.save_screenshot(str(setup["shots"] / f"{name}.png"))


def test_top_and_bad_requests(setup: dict[str, Any]) -> None:
    """`tidegate top` shows the same data (before the browser test unpins the LSO); the
    console answers path traversal and nonsense with an HTTP error and keeps serving."""
    out = subprocess.run(
        [sys.executable, "-m", "tidegate.cli.main", "top", "--bootstrap-server",
         setup["broker"].bootstrap, "--iterations", "2", "--interval", "0.3"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert out.returncode == 0, out.stderr
    screen = out.stdout.split("tidegate top")[-1]
    assert re.search(rf"^{TOPIC}\s+{COMMITTED + ABORTED + 1 + 1 + AFTER}\s+0\.0$", screen, re.M)
    assert re.search(rf"^{GROUP}\s+\S+\s+1\s+{1 + AFTER}\s+0\.0$", screen, re.M), screen
    assert re.search(rf"^{OPEN_TID}\s+Ongoing\s+\d+\s+[\d.]+\s+{TOPIC}-0$", screen, re.M)
    assert re.search(rf"^{TOPIC}-0\s+{COMMITTED + ABORTED + 1}\s", screen, re.M), screen

    port = setup["console"].port
    for path, status in (("/static/../../etc/passwd", 400), ("/static/%2e%2e/x", 400),
                         ("/topics/orders/messages?offset=-1", 400),
                         ("/topics/no-such-topic", 404)):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                         .encode())
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        assert data.split()[1] == str(status).encode(), (path, data[:200])
        assert b"root:" not in data
    # a request that is not HTTP at all, then the console still answers
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01garbage\r\n\r\n")
        sock.recv(1024)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /static/console.css HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")


def test_console_pages_and_unpinning_a_transaction(setup: dict[str, Any], browser: Any) -> None:
    base, bootstrap = setup["console"].url, setup["broker"].bootstrap
    d = browser
    lso_before, hw = _offsets(bootstrap)
    # 10 committed, 3 aborted + ABORT marker, 1 open, 5 after: the LSO waits at the open one
    assert (lso_before, hw) == (COMMITTED + ABORTED + 1, COMMITTED + ABORTED + 1 + 1 + AFTER)

    # create a topic from the page
    d.get(base + "/topics")
    d.find_element(By.NAME, "name").send_keys(EXTRA)
    d.find_element(By.NAME, "partitions").clear()
    d.find_element(By.NAME, "partitions").send_keys("2")
    _submit(d, "#create-topic button")
    assert f"Created topic {EXTRA}" in _text(d, "#flash")
    assert len(d.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 2

    # overview: the cluster, and the chart plots what is produced while it is open
    d.get(base + "/")
    assert "1" in _text(d, "#brokers")
    _wait(lambda: "rec/s" in _text(d, "#rates"), what="the throughput chart")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def produced_rate() -> float:
        for i in range(50):
            producer.produce(EXTRA, value=f"click-{i}")
        producer.flush()
        m = re.search(r"produced ([\d.]+) rec/s", _text(d, "#rates"))
        return float(m.group(1)) if m else 0.0
    _wait(lambda: produced_rate() > 0, what="a produce rate on the chart")
    _shot(d, setup, "overview")

    # topics: HW and LSO, and HW-LSO flags the pinned partition
    d.get(base + "/topics/" + TOPIC)
    row = d.find_element(By.CSS_SELECTOR, "#partitions tbody tr").text.split()
    assert row[5:8] == [str(hw), str(lso_before), str(hw - lso_before)]
    _shot(d, setup, "topic")

    # messages, read_uncommitted: aborted records, the ABORT marker and the open record
    d.get(base + f"/topics/{TOPIC}/messages?partition=0&offset=0&format=json")
    table = _text(d, "#messages")
    assert table.count("aborted") >= ABORTED and "ABORT marker" in table
    assert "open-txn-record" in table and "open" in table
    # values from Kafka are escaped: the header's script is text, never run or parsed
    assert "<script>alert(1)</script>" in table
    assert not d.find_elements(By.CSS_SELECTOR, "#messages script")
    _shot(d, setup, "messages")
    d.get(base + f"/topics/{TOPIC}/messages?partition=0&offset=0&isolation=read_committed")
    table = _text(d, "#messages")
    assert "aborted-0" not in table and "open-txn-record" not in table and "key-9" in table

    # bad input: a clear 400 page, no crash
    d.get(base + f"/topics/{TOPIC}/messages?partition=0&offset=99999999999")
    assert "past the end" in _text(d, "#error")

    # the group: lag, and the hint that the LSO holds it back
    d.get(base + "/groups/" + GROUP)
    assert int(_text(d, "#total-lag")) == hw - lso_before  # it read all it may
    assert "stops at the LSO" in _text(d, "#lag")
    assert "orders-0" in _text(d, "#members")
    _shot(d, setup, "group")

    # transactions: the open one, and the partition it pins with its producer
    d.get(base + "/transactions")
    assert OPEN_TID in _text(d, "#open-txns")
    pinned = _text(d, "#pinned")
    assert f"{TOPIC}-0" in pinned and OPEN_TID in pinned
    _shot(d, setup, "transactions")
    _submit(d, "#pinned form button")
    _shot(d, setup, "abort-confirm")
    _submit(d, "form.danger button")  # "Yes, abort it"
    assert "last stable offset is now" in _text(d, "#flash")
    lso_after, hw_after = _offsets(bootstrap)
    assert lso_after == hw_after == hw + 1  # the ABORT marker; nothing pinned any more
    _wait(lambda: "no partition has its LSO" in _text(d, "#pinned"), what="pinned to clear")

    # the group consumes what was stuck behind the LSO; the page drains without a reload
    d.get(base + "/groups/" + GROUP)
    assert int(_text(d, "#total-lag")) > 0
    _consume(setup["consumer"], AFTER)
    _wait(lambda: _text(d, "#total-lag") == "0", what="the lag to drain")
    _shot(d, setup, "group-drained")

    # delete the topic made above, after the confirmation step
    d.get(base + "/topics/" + EXTRA)
    _submit(d, "form.danger button")
    assert "cannot be undone" in _text(d, "main")
    _submit(d, "form.danger button")  # "Yes, delete"
    assert f"Deleted topic {EXTRA}" in _text(d, "#flash")
    assert EXTRA not in _text(d, "#topics") and TOPIC in _text(d, "#topics")
