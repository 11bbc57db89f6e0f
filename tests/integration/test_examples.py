"""Every program in examples/ and every Python snippet in docs/ runs against a real
broker, and the reference tables in docs/ match the code.

The examples take the bootstrap server from argv or KAFKA_BOOTSTRAP_SERVERS (default
127.0.0.1:9092, `make run`'s broker); both ways are exercised here. The snippets name
127.0.0.1:9092, replaced here by the test broker's address; they run in page order.
Blocks fenced as ```py need a setup of their own (docs/security.md's SASL_SSL listener and
certificates; tests/integration/test_security.py and test_client_security.py run the same
client settings against such a broker) and are not run here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from tests.integration.conftest import ROOT, SPARK_TEST_JVM_OPTIONS, BrokerProcess

pytestmark = pytest.mark.interop

EXAMPLES = {
    "produce_consume.py": ["sent to partition", "received 0:0 key=customer-"],
    "async_produce_consume.py": ["last record: partition", "{'event': 'done'}"],
    "admin.py": ["create it again: TOPIC_ALREADY_EXISTS", "new start 3",
                 "delete it again: UNKNOWN_TOPIC_OR_PARTITION"],
    "transactions.py": ["committed 3 records, aborted 1", "read_committed sees:"],
    "exactly_once.py": ["every order exactly once: True"],
    "outbox_sqlite.py": ["order-2 rolled back", "relay published 2 events",
                         "events: ['order-1', 'order-3']"],
    "notify_http.py": ["delivered 2, dead-lettered 1, 7 attempts",
                       "query: merchant-x dead-lettered after 3 attempts"],
    "saga_order.py": ["order-alice: COMPLETED", "charge failed: insufficient funds; reserve "
                      "compensated", "balances: {'alice': 60, 'bob': 5}"],
    "tcc_transfer.py": ["transfer-1 (30): CONFIRMED", "transfer-2 (500): CANCELLED",
                        "bank (balance, frozen): (70, 0)", "wallet (balance, pending): (30, 0)"],
}


@pytest.mark.parametrize("via", ["argv", "env"])
@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_example_runs(shared_broker: BrokerProcess, example: str, via: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    args = [sys.executable, str(ROOT / "examples" / example)]
    if via == "argv":
        args.append(shared_broker.bootstrap)
    else:
        env["KAFKA_BOOTSTRAP_SERVERS"] = shared_broker.bootstrap
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    for expected in EXAMPLES[example]:
        assert expected in r.stdout, r.stdout
    assert "Traceback" not in r.stderr


def _snippets() -> list[tuple[str, int, str]]:
    out = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M)
        out += [(page.name, i, code) for i, code in enumerate(blocks)]
    return out


SNIPPETS = _snippets()
# what a snippet's run here shortens, with the page it is on: docs/security.md's quota
# demo produces flat out for 10 s per client (2 s show the same throttling; the page
# keeps the run its figures came from)
SHORTER = {"security.md": ("def run(client_id, seconds=10):", "def run(client_id, seconds=2):")}


# One worker runs them all, in page order, on its broker (the module is one xdist work
# unit: tests/conftest.py's `lane`): a page's later snippets read what its earlier ones
# wrote (client.md's AsyncConsumer reads the orders produced before).
@pytest.mark.parametrize(("page", "index", "code"), SNIPPETS,
                         ids=[f"{p}-{i}" for p, i, _ in SNIPPETS])
def test_doc_snippet_runs(shared_broker: BrokerProcess, page: str, index: int,
                          code: str) -> None:
    assert "127.0.0.1:9092" in code, "snippets name make run's broker"
    if page in SHORTER and SHORTER[page][0] in code:
        code = code.replace(*SHORTER[page])
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    # a snippet's SparkSession.builder starts its driver through spark-submit
    env.setdefault("PYSPARK_SUBMIT_ARGS",
                   f'--driver-java-options "{SPARK_TEST_JVM_OPTIONS}" pyspark-shell')
    r = subprocess.run([sys.executable, "-c", code.replace("127.0.0.1:9092",
                                                          shared_broker.bootstrap)],
                       capture_output=True, text=True, env=env, timeout=90, cwd=ROOT)
    # the broker's last lines too: a snippet that times out says little by itself
    assert r.returncode == 0, (f"docs/{page} snippet {index} failed:\n{r.stderr}\n"
                               f"broker's last lines:\n" + "\n".join(shared_broker.log_lines[-40:]))


def test_doc_tables_match_the_code() -> None:
    spec = importlib.util.spec_from_file_location("gen_tables", ROOT / "docs" / "gen_tables.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    stale = gen.stale()
    assert not stale, f"tables in {stale} are out of date: run .venv/bin/python docs/gen_tables.py"
