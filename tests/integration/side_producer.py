"""A confluent-kafka producer in a process of its own, for a client on one side of a
network partition (tests/integration/netpartition.py): started with a host's group, its
connections are cut exactly as that host's are, so it reaches only what the host reaches.

`python -m tests.integration.side_producer BOOTSTRAP TOPIC ACKS TIMEOUT_MS VALUE...`
produces each VALUE (not idempotent, so acks=1 is allowed; no retries) with
message.timeout.ms = TIMEOUT_MS and the Produce timeout half of it, and prints one JSON
line per delivery report: {"value": ..., "error": null or the error's text, "offset": ...}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(bootstrap: str, topic: str, acks: str, timeout_ms: int, values: list[str],
        group: int | None = None) -> list[dict[str, object]]:
    """Run the producer process (with `group`, if given) and return its reports."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.integration.side_producer", bootstrap, topic, acks,
         str(timeout_ms), *values],
        capture_output=True, text=True, cwd=ROOT, group=group, timeout=timeout_ms / 1000 + 30,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"side producer failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def _main(argv: list[str]) -> None:
    from confluent_kafka import KafkaError, Message, Producer

    bootstrap, topic, acks, timeout_ms, values = argv[0], argv[1], argv[2], int(argv[3]), argv[4:]
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": False,
        # the broker's own answer (REQUEST_TIMED_OUT...) comes before the local timeout,
        # and is the one reported: no retry
        "message.timeout.ms": timeout_ms, "request.timeout.ms": max(timeout_ms // 2, 1),
        "retries": 0, "linger.ms": 0, "max.in.flight": 1,
    })

    def report(err: KafkaError | None, msg: Message) -> None:
        value = msg.value()
        print(json.dumps({
            "value": value.decode() if value is not None else None,
            "error": None if err is None else str(err),
            "offset": msg.offset() if err is None else None,
        }), flush=True)

    for v in values:
        producer.produce(topic, value=v.encode(), on_delivery=report)
    left = producer.flush(timeout_ms / 1000 + 10)
    if left:
        print(f"{left} messages without a delivery report", file=sys.stderr)


if __name__ == "__main__":
    _main(sys.argv[1:])
