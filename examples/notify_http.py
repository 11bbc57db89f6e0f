"""Best-effort notification: deliver a topic's records to an HTTP endpoint, with retries,
a delivery log, a dead-letter topic and a query for what the receiver missed.

    python examples/notify_http.py [BOOTSTRAP]

A small HTTP server in this process plays the receiving side (a merchant told about
payments): it answers 500 to the first attempt of every notification (a flaky
partner) and always refuses payments to ``merchant-x``. The `Notifier` retries after
0.2 s and 0.4 s (a service uses minutes and hours: the default schedule is 15s, 1m,
5m, 30m, 1h, 2h, 6h), logs every attempt, and sends ``merchant-x``'s payment to the
dead-letter topic after its third failure. Then the receiver asks what it missed, as
it would after an outage (`NotificationQuery`; ``tidegate notify query`` from the
shell). The receiver de-duplicates by ``X-Notification-Id``: delivery is at least once.
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tidegate.client import Admin, Producer
from tidegate.patterns.notify import NotificationQuery, Notifier

seen: dict[str, int] = {}


class Merchant(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        nid = self.headers["X-Notification-Id"]
        body = self.rfile.read(int(self.headers["Content-Length"]))
        attempt = int(self.headers["X-Notification-Attempt"])
        refuse = attempt == 1 or self.headers["X-Notification-Key"] == "merchant-x"
        self.send_response(500 if refuse else 200)
        self.end_headers()
        if not refuse and nid not in seen:  # de-duplicate by the notification id
            seen[nid] = attempt
            print(f"merchant got {body.decode()} (attempt {attempt})")

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    bootstrap = sys.argv[1] if len(sys.argv) > 1 else \
        os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    run = uuid.uuid4().hex[:8]
    topic, log_topic, dead = f"payments-{run}", f"payments-{run}.log", f"payments-{run}.dead"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        for t in (topic, log_topic, dead):
            admin.create_topic(t, 1)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Merchant)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/payments"

    with Producer({"bootstrap.servers": bootstrap}) as p:
        for merchant, amount in (("merchant-a", 30), ("merchant-x", 99), ("merchant-b", 12)):
            p.send(topic, f"{merchant} paid {amount}", merchant)
        p.flush()

    notifier = Notifier([topic], url, {"bootstrap.servers": bootstrap}, schedule=(0.2, 0.4),
                        log_topic=log_topic, dead_letter_topic=dead)
    notifier.run(until_idle=True)  # a service runs notifier.run(stop_event) instead
    notifier.close()
    st = notifier.stats
    print(f"delivered {st.delivered}, dead-lettered {st.dead_lettered}, "
          f"{st.attempts} attempts")
    server.shutdown()

    query = NotificationQuery({"bootstrap.servers": bootstrap}, [topic], log_topic)
    for n in query.since(0):
        print(f"query: {n['key']} {n['state']} after {len(n['attempts'])} attempts")


if __name__ == "__main__":
    main()
