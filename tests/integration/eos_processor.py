"""An exactly-once consume-transform-produce processor, run as a subprocess by
tests/integration/test_eos_pipeline.py and killed with SIGKILL at random moments.

    python eos_processor.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID [options]

Loop (seed 000 / 004's read-process-write): poll a batch from INPUT (read_committed,
no auto commit; classic: static group membership so a restarted incarnation takes its
predecessor's place at once), begin a transaction, produce `transform(value)` to the
same partition of OUTPUT for every input record, send the consumer's positions as
the group's offsets in the transaction, commit.

- An abortable (or retriable) error: abort the transaction, seek every assigned
  partition back to the group's committed offset, carry on.
- A fatal error (fenced, ...): exit 2. Any other unexpected error: exit 3.
- SIGTERM: finish the current transaction, close cleanly, exit 0.
- `--max-seconds` bounds the run: exit 4 when reached.

It prints one line per event to stdout (READY, ASSIGNED, COMMIT n, ABORT, ...) for the
test's log. The transformation is `b"out-" + value`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

EXIT_FATAL = 2
EXIT_UNEXPECTED = 3
EXIT_DEADLINE = 4

stopping = False


def log(*parts: object) -> None:
    print(*parts, flush=True)


def transform(value: bytes) -> bytes:
    return b"out-" + value


def on_term(_sig: int, _frame: Any) -> None:
    global stopping
    stopping = True


class Fatal(Exception):
    pass


def kafka_error(e: KafkaException) -> KafkaError:
    err = e.args[0]
    assert isinstance(err, KafkaError), e
    return err


def with_retries(what: str, fn: Any, deadline: float) -> Any:
    """Calls fn() until it succeeds; retriable errors are retried until `deadline`."""
    while True:
        try:
            return fn()
        except KafkaException as e:
            err = kafka_error(e)
            if err.fatal():
                raise Fatal(f"{what}: {err}") from e
            if time.monotonic() > deadline or not (err.retriable() or
                                                  err.code() == KafkaError._TIMED_OUT):
                raise
            log("RETRY", what, err)
            time.sleep(0.2)


def rewind(consumer: Consumer, deadline: float) -> None:
    """Seeks every assigned partition back to the group's committed offset."""
    assignment = consumer.assignment()
    if not assignment:
        return
    committed = with_retries("committed", lambda: consumer.committed(assignment, 10), deadline)
    for tp in committed:
        offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
        target = TopicPartition(tp.topic, tp.partition, offset)
        for _ in range(50):
            try:
                consumer.seek(target)
                break
            except KafkaException as e:
                log("SEEK-RETRY", tp.partition, kafka_error(e))
                time.sleep(0.1)
        else:
            raise Fatal(f"cannot seek {target}")
    log("REWOUND", " ".join(f"{tp.partition}:{tp.offset}" for tp in committed))


def process(args: argparse.Namespace) -> int:
    started = time.monotonic()
    deadline = started + args.max_seconds
    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "transactional.id": args.transactional_id,
        "transaction.timeout.ms": args.transaction_timeout_ms,
        "linger.ms": 5,
        "message.timeout.ms": args.transaction_timeout_ms,
    })
    with_retries("init_transactions", lambda: producer.init_transactions(30), deadline)
    log("READY")

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        log("ASSIGNED", " ".join(str(p.partition) for p in parts))

    def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
        log("REVOKED", " ".join(str(p.partition) for p in parts))

    membership: dict[str, Any] = {
        # classic: static membership, so a restarted incarnation takes its predecessor's
        # place at once; KIP-848 (`--group-protocol consumer`): a dynamic member (the
        # broker's group.consumer.session.timeout.ms ends a killed one's membership; a
        # static one would be refused UNRELEASED_INSTANCE_ID until then)
        "classic": {"group.instance.id": args.group + "-instance", "session.timeout.ms": 10000},
        "consumer": {"group.protocol": "consumer"},
    }[args.group_protocol]
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **membership,
    })
    consumer.subscribe([args.input], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stopping:
            if time.monotonic() > deadline:
                log("DEADLINE")
                return EXIT_DEADLINE
            msgs = consumer.consume(args.batch, 0.5)
            records = []
            for m in msgs:
                err = m.error()
                if err is None:
                    records.append(m)
                elif err.code() != KafkaError._PARTITION_EOF:
                    if err.fatal():
                        raise Fatal(f"consume: {err}")
                    log("CONSUME-ERROR", err)
            if not records:
                continue
            try:
                producer.begin_transaction()
                for m in records:
                    producer.produce(args.output, key=m.key(), value=transform(m.value()),
                                     partition=m.partition())
                    producer.poll(0)
                positions = [tp for tp in consumer.position(consumer.assignment())
                             if tp.offset >= 0]
                producer.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), 30)
                commit(producer, deadline)
                log("COMMIT", len(records),
                    " ".join(f"{tp.partition}:{tp.offset}" for tp in positions))
            except KafkaException as e:
                err = kafka_error(e)
                if err.fatal():
                    raise Fatal(str(err)) from e
                if not (err.txn_requires_abort() or err.retriable()):
                    raise
                log("ABORT", err)
                with_retries("abort_transaction", lambda: producer.abort_transaction(30),
                             deadline)
                rewind(consumer, deadline)
        log("STOPPING")
        return 0
    finally:
        if stopping:
            consumer.close()
            producer.flush(10)


def commit(producer: Producer, deadline: float) -> None:
    """commit_transaction, repeated on retriable errors (librdkafka's contract)."""
    while True:
        try:
            producer.commit_transaction(30)
            return
        except KafkaException as e:
            err = kafka_error(e)
            if err.retriable() and not err.txn_requires_abort() and time.monotonic() < deadline:
                log("COMMIT-RETRY", err)
                continue
            raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "transactional_id"):
        ap.add_argument(name)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--transaction-timeout-ms", type=int, default=6000)
    ap.add_argument("--max-seconds", type=float, default=600)
    ap.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, on_term)
    try:
        return process(args)
    except Fatal as e:
        log("FATAL", e)
        return EXIT_FATAL
    except KafkaException as e:
        log("ERROR", kafka_error(e))
        return EXIT_FATAL if kafka_error(e).fatal() else EXIT_UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())
