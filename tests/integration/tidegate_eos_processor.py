"""An exactly-once consume-transform-produce processor written with Tidegate's client,
run as a subprocess by tests/integration/test_client_eos_kill.py and killed with
SIGKILL at random moments (the twin of eos_processor.py, which uses confluent-kafka).

    python tidegate_eos_processor.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID
        --mode helper|manual [--batch N] [--rate R] [--transaction-timeout-ms MS]
        [--max-seconds S]

Both modes read INPUT with read_committed, no auto commit and static group membership
(a restarted incarnation takes its predecessor's place at once), and write
``b"out-" + value`` to the same partition of OUTPUT with the consumed offsets in the
same transaction:

- ``helper``: `tidegate.client.eos.TransactionalProcessor` (transactions of at most
  `--batch` records or 100 ms).
- ``manual``: the seeds' loop by hand with the blocking `Producer`/`Consumer`: poll up
  to `--batch` records, begin, send each, `send_offsets_to_transaction(consumer
  positions, consumer.group_metadata())`, commit (again on `KafkaTimeoutError`: the
  outcome is unknown, never turn it into an abort). On an abortable or retriable error:
  abort, then seek every assigned partition back to the group's committed offset.

Exit codes and output lines are eos_processor.py's (the test reuses its `Pipeline`):
`--rate` caps the records processed per second (the sleep falls inside the open
transaction), so that the work spans the test's kills. READY once the transactional id
is ours, COMMIT n per transaction, ABORT on an abort;
a fatal producer error (fenced, ...) exits 2, anything unexpected 3 (with ERROR and a
traceback), `--max-seconds` reached 4; SIGTERM finishes the transaction and exits 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
import traceback
from typing import Any

from tidegate.client import (
    Consumer,
    FatalProducerError,
    KafkaTimeoutError,
    Producer,
    TransactionAbortableError,
)
from tidegate.client.eos import Output, TransactionalProcessor
from tidegate.common.errors import KafkaError

EXIT_FATAL = 2
EXIT_UNEXPECTED = 3
EXIT_DEADLINE = 4

stopping = False


def log(*parts: object) -> None:
    print(*parts, flush=True)


def on_term(_sig: int, _frame: Any) -> None:
    global stopping
    stopping = True


def transform(value: bytes | None) -> bytes:
    assert value is not None
    return b"out-" + value


def clients(args: argparse.Namespace) -> tuple[Consumer, Producer]:
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "group.instance.id": args.group + "-instance",
        "session.timeout.ms": 10000,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "max.poll.records": args.batch,
    })
    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "transactional.id": args.transactional_id,
        "transaction.timeout.ms": args.transaction_timeout_ms,
        "linger.ms": 5,
    })
    return consumer, producer


def run_helper(args: argparse.Namespace, deadline: float) -> int:
    consumer, producer = clients(args)

    def out(r: Any) -> list[Output]:
        return [Output(args.output, transform(r.value), r.key, partition=r.partition)]

    proc = TransactionalProcessor(consumer, producer, out,
                                  max_records_per_transaction=args.batch)
    proc.start([args.input])  # init_transactions (fencing the last incarnation), subscribe
    log("READY")
    committed = aborted = 0
    while not stopping:
        if time.monotonic() > deadline:
            log("DEADLINE")
            return EXIT_DEADLINE
        throttle(args, proc.step())
        if proc.committed_transactions != committed:
            committed = proc.committed_transactions
            log("COMMIT", committed)
        if proc.aborted_transactions != aborted:
            aborted = proc.aborted_transactions
            log("ABORT", aborted)
    proc.close()
    log("STOPPING")
    consumer.close()
    producer.close()
    return 0


def throttle(args: argparse.Namespace, records: int) -> None:
    if args.rate > 0 and records:
        time.sleep(records / args.rate)


def rewind(consumer: Consumer) -> None:
    """Seeks every assigned partition back to the group's committed offset
    (KAFKA-17582: without it the aborted records would never be processed)."""
    owned = sorted(consumer.assignment())
    if not owned:
        return
    found = consumer.committed(owned)
    for tp in owned:
        c = found.get(tp)
        if c is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, c.offset)
    log("REWOUND", " ".join(f"{tp.partition}:{c.offset if c else 0}"
                            for tp, c in sorted(found.items())))


def commit(producer: Producer) -> None:
    while True:
        try:
            producer.commit_transaction()
            return
        except KafkaTimeoutError as e:  # outcome unknown: commit again, never abort
            log("COMMIT-RETRY", repr(e))


def run_manual(args: argparse.Namespace, deadline: float) -> int:
    consumer, producer = clients(args)
    producer.init_transactions()
    log("READY")
    consumer.subscribe([args.input])
    while not stopping:
        if time.monotonic() > deadline:
            log("DEADLINE")
            return EXIT_DEADLINE
        records = consumer.poll(500, max_records=args.batch)
        if not records:
            continue
        try:
            producer.begin_transaction()
            for r in records:
                producer.send(args.output, transform(r.value), r.key, partition=r.partition)
            throttle(args, len(records))
            positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
            producer.send_offsets_to_transaction(positions, consumer.group_metadata())
            commit(producer)
            log("COMMIT", len(records),
                " ".join(f"{tp.partition}:{o}" for tp, o in sorted(positions.items())))
        except FatalProducerError:
            raise
        except (TransactionAbortableError, KafkaError) as e:
            if not (isinstance(e, TransactionAbortableError) or e.retriable):
                raise
            log("ABORT", repr(e))
            producer.abort_transaction()
            rewind(consumer)
    log("STOPPING")
    consumer.close()
    producer.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "transactional_id"):
        ap.add_argument(name)
    ap.add_argument("--mode", choices=("helper", "manual"), required=True)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--rate", type=float, default=0, help="records/s at most (0: no cap)")
    ap.add_argument("--transaction-timeout-ms", type=int, default=6000)
    ap.add_argument("--max-seconds", type=float, default=600)
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, on_term)
    deadline = time.monotonic() + args.max_seconds
    try:
        if args.mode == "helper":
            return run_helper(args, deadline)
        return run_manual(args, deadline)
    except FatalProducerError as e:
        log("FATAL", repr(e))
        return EXIT_FATAL
    except Exception as e:
        log("ERROR", repr(e))
        traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
        return EXIT_UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())

