"""`tidegate consume TOPIC`: print records (like kafka-console-consumer, without a group).

Reads every partition of TOPIC (or just `--partition P`) by manual assignment. Where to
start: the end by default (new records only), `--from-beginning`, `--offset N` (or
earliest/latest) in each read partition, or `--from-timestamp` (epoch milliseconds or
ISO-8601; an ISO time without a zone is UTC) — partitions with no record that late
start at their end. Stops after `--max-messages N`, or when no record arrived for
`--timeout-ms`, else runs until interrupted; then prints the count on stderr.

Formats: `plain` writes each value's bytes and a newline (with `--print-key`, the key,
a tab, then the value); `json` writes one object per line with topic, partition,
offset, timestamp, timestamp_type, key, value and headers — bytes that are not UTF-8
appear as base64 under `key_base64` / `value_base64`.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import sys
import time
from typing import IO, Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.topics import run_client
from tidegate.client.config import ConsumerConfig
from tidegate.client.consumer.consumer import AsyncConsumer
from tidegate.client.types import ConsumerRecord, TopicPartition

TS_TYPES = ("CreateTime", "LogAppendTime")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("consume", help="print records of a topic",
                       description="Print records of a topic "
                                   "(like kafka-console-consumer.sh, without a group).")
    p.add_argument("topic")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest record (default: only new records)")
    start.add_argument("--offset", metavar="N|earliest|latest",
                       help="start at this offset in each partition read")
    start.add_argument("--from-timestamp", metavar="MS|ISO",
                       help="start at the first record at or after this time")
    p.add_argument("--partition", type=int, help="read only this partition")
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="exit if no record arrives for this long")
    p.add_argument("--format", choices=["plain", "json"], default="plain")
    p.add_argument("--print-key", action="store_true", help="plain format: print KEY<TAB>VALUE")
    p.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"],
                   default="read_uncommitted")
    add_bootstrap(p)
    p.set_defaults(func=run)


def parse_timestamp(text: str) -> int:
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--from-timestamp {text!r} is neither epoch milliseconds nor an "
                         "ISO-8601 time such as 2024-05-01T12:00:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def _text(data: bytes | None, name: str, out: dict[str, object]) -> None:
    if data is None:
        out[name] = None
        return
    try:
        out[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        out[name] = None
        out[f"{name}_base64"] = base64.b64encode(data).decode()


def to_json(r: ConsumerRecord) -> str:
    obj: dict[str, object] = {
        "topic": r.topic, "partition": r.partition, "offset": r.offset,
        "timestamp": r.timestamp, "timestamp_type": TS_TYPES[r.timestamp_type]}
    _text(r.key, "key", obj)
    _text(r.value, "value", obj)
    headers = []
    for k, v in r.headers:
        h: dict[str, object] = {"key": k}
        _text(v, "value", h)
        headers.append(h)
    obj["headers"] = headers
    return json.dumps(obj, ensure_ascii=False)


def write(records: list[ConsumerRecord], args: argparse.Namespace, out: IO[bytes]) -> None:
    if args.format == "json":
        out.write("".join(to_json(r) + "\n" for r in records).encode("utf-8"))
        return
    parts: list[bytes] = []
    for r in records:
        if args.print_key:
            parts.append(r.key if r.key is not None else b"null")
            parts.append(b"\t")
        parts.append(r.value if r.value is not None else b"null")
        parts.append(b"\n")
    out.write(b"".join(parts))


async def _position(consumer: AsyncConsumer, tps: list[TopicPartition],
                    args: argparse.Namespace) -> None:
    if args.from_beginning:
        consumer.seek_to_beginning(*tps)
    elif args.offset is not None:
        where = args.offset.lower()
        if where == "earliest":
            consumer.seek_to_beginning(*tps)
        elif where == "latest":
            consumer.seek_to_end(*tps)
        elif where.isdigit():
            for tp in tps:
                consumer.seek(tp, int(where))
        else:
            raise ValueError(f"--offset {args.offset!r} must be a number, earliest or latest")
    elif args.from_timestamp is not None:
        ts = parse_timestamp(args.from_timestamp)
        found = await consumer.offsets_for_times({tp: ts for tp in tps})
        for tp in tps:
            hit = found.get(tp)
            if hit is None:
                consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, hit.offset)
    else:
        consumer.seek_to_end(*tps)


def run(args: argparse.Namespace) -> int:
    count = 0

    async def main() -> int:
        nonlocal count
        consumer = AsyncConsumer(client_settings(args, ConsumerConfig, {
            "client.id": "tidegate-consume",
            "allow.auto.create.topics": False, "isolation.level": args.isolation_level}))
        out = sys.stdout.buffer
        try:
            await consumer.start()
            parts = await consumer.partitions_for_topic(args.topic, timeout_ms=5000)
            if args.partition is not None:
                if args.partition not in parts:
                    raise ValueError(f"topic {args.topic!r} has no partition {args.partition} "
                                     f"(it has {len(parts)})")
                parts = [args.partition]
            tps = [TopicPartition(args.topic, p) for p in parts]
            consumer.assign(tps)
            await _position(consumer, tps, args)
            limit = args.max_messages
            idle_since = time.monotonic()
            while limit is None or count < limit:
                wait = 1000 if args.timeout_ms is None else max(
                    1, args.timeout_ms - int((time.monotonic() - idle_since) * 1000))
                want = None if limit is None else limit - count
                records = await consumer.poll(timeout_ms=wait, max_records=want)
                if records:
                    write(records, args, out)
                    out.flush()
                    count += len(records)
                    idle_since = time.monotonic()
                elif args.timeout_ms is not None and \
                        (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                    break
        finally:
            await consumer.close()
        return 0

    interrupted = False
    try:
        return run_client("consume", main)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        _summary(count, interrupted)


def _summary(count: int, interrupted: bool) -> None:
    """The count on stderr, on a line of its own: records still buffered for stdout go
    out first, and after Ctrl-C on a terminal (which echoes "^C" after the last record)
    the summary starts a new line."""
    try:
        sys.stdout.flush()
        sys.stdout.buffer.flush()
    except (BrokenPipeError, ValueError, OSError):
        pass
    lead = "\n" if interrupted and sys.stderr.isatty() else ""
    print(f"{lead}Processed a total of {count} messages", file=sys.stderr, flush=True)
