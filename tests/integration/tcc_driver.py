"""The application side of test_patterns_tcc.py's crash test, run as a process (and
killed with kill -9): a `TccCoordinator` that first recovers what its predecessor left,
then runs transfers from a debit service to a credit service in two threads.

    python tests/integration/tcc_driver.py BOOTSTRAP STATE_TOPIC DEBIT_URL CREDIT_URL N SEED
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import threading

from tidegate.patterns.tcc import Branch, TccCoordinator


def main() -> None:
    bootstrap, topic, debit, credit, n, seed = sys.argv[1:7]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    coord = TccCoordinator({"bootstrap.servers": bootstrap}, state_topic=topic,
                           request_timeout_s=2.0, backoff_s=(0.05, 0.1, 0.2), alert_every=3)
    done = coord.start()
    print(f"recovered {len(done)}", flush=True)
    branches = [Branch("debit", debit), Branch("credit", credit)]

    def work(k: int) -> None:
        rng = random.Random(f"{seed}-{k}")
        for i in range(int(n)):
            payload = json.dumps({"from": rng.choice(["alice", "bob", "poor"]),
                                  "amount": rng.randint(1, 40)})
            phase = coord.execute(f"{seed}-{os.getpid()}-{k}-{i}", branches, payload)
            print(f"{phase}", flush=True)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    coord.close()


if __name__ == "__main__":
    main()
