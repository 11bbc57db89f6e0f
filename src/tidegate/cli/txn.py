"""`tidegate txn list|describe|describe-producers|find-hanging|abort|force-terminate`:
inspect transactions and recover from hanging ones (like Kafka's
`kafka-transactions.sh`, KIP-664 and KIP-939).

A *hanging* transaction is one a partition's producer state shows open that its
coordinator will never end: it pins the partition's last stable offset, so
read_committed consumers stop there. `find-hanging` uses Kafka's rule: an open
transaction (DescribeProducers) whose producer has been silent for longer than
`--max-transaction-timeout-ms` (the broker's `transaction.max.timeout.ms`; any live
transaction is aborted by its coordinator before then) is hanging when no coordinator
lists its producer id, the coordinator does not know its transactional id, or the
coordinator's transaction does not include the partition. `abort` writes an ABORT
marker into one partition (WriteTxnMarkers) with the producer epoch and coordinator
epoch the partition reports, and prints the partition's new last stable offset.

`force-terminate` ends a transactional id's transaction through its coordinator (KIP-939's
forceTerminateTransaction): a transactional producer with that id calls
`init_transactions()`, which fences the id's producer and aborts its transaction in every
partition. It is the way to end a *prepared* two-phase-commit transaction, which the
coordinator never times out; `abort` (one partition, behind the coordinator's back) is
for transactions the coordinator does not know.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.topics import print_none, run_client
from tidegate.client.admin import AsyncAdmin
from tidegate.client.config import AdminConfig, ProducerConfig
from tidegate.client.producer import AsyncProducer
from tidegate.client.types import ProducerState, TopicPartition
from tidegate.common.errors import ErrorCode, KafkaError

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "Dead", "PrepareEpochFence")
TRANSACTION_STATE_TOPIC = "__transaction_state"
DEFAULT_MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms
READ_COMMITTED, LATEST = 1, -1


def add_parser(sub: Any) -> None:
    p = sub.add_parser("txn", help="list, describe, find and abort (hanging) transactions",
                       description="Inspect transactions and abort hanging ones "
                                   "(like kafka-transactions.sh).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    lst = actions.add_parser("list", help="transactional ids the coordinators know")
    lst.add_argument("--state", action="append", default=[], choices=STATES,
                     help="only transactions in this state (repeatable)")
    lst.add_argument("--producer-id", action="append", default=[], type=int, metavar="PID",
                     help="only this producer id (repeatable)")
    lst.add_argument("--min-duration-ms", type=int, default=-1, metavar="MS",
                     help="only transactions running longer than MS")
    d = actions.add_parser("describe", help="a transactional id as its coordinator sees it")
    d.add_argument("transactional_id", metavar="TRANSACTIONAL_ID")
    dp = actions.add_parser("describe-producers",
                            help="producers a partition remembers and their open transactions")
    dp.add_argument("--topic", required=True)
    dp.add_argument("--partition", type=int, help="one partition (default: all)")
    fh = actions.add_parser("find-hanging", help="open transactions no coordinator will end")
    fh.add_argument("--topic", help="search one topic (default: every topic)")
    fh.add_argument("--partition", type=int, help="one partition of --topic")
    fh.add_argument("--max-transaction-timeout-ms", type=int, default=DEFAULT_MAX_TIMEOUT_MS,
                    metavar="MS", help="only transactions whose producer has been silent "
                    f"longer than MS (default {DEFAULT_MAX_TIMEOUT_MS}, Kafka's "
                    "transaction.max.timeout.ms)")
    ab = actions.add_parser("abort", help="abort a partition's open transaction")
    ab.add_argument("--topic", required=True)
    ab.add_argument("--partition", type=int, required=True)
    which = ab.add_mutually_exclusive_group(required=True)
    which.add_argument("--producer-id", type=int, metavar="PID",
                       help="the producer whose open transaction to abort")
    which.add_argument("--start-offset", type=int, metavar="OFFSET",
                       help="the first offset of the open transaction to abort")
    ab.add_argument("--producer-epoch", type=int, help="with --producer-id and "
                    "--coordinator-epoch: use these instead of asking the partition")
    ab.add_argument("--coordinator-epoch", type=int)
    ft = actions.add_parser("force-terminate",
                            help="abort a transactional id's transaction (prepared ones "
                                 "too) through its coordinator, fencing its producer")
    ft.add_argument("transactional_id", metavar="TRANSACTIONAL_ID")
    for leaf in (lst, d, dp, fh, ab, ft):
        add_bootstrap(leaf)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with AsyncAdmin(client_settings(args, AdminConfig,
                                              {"client.id": "tidegate-txn"})) as admin:
            return await ACTIONS[args.action](admin, args)
    return run_client("txn", main)


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _opt(value: int) -> str:
    return "-" if value < 0 else str(value)


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _list(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    found = await admin.list_transactions(args.state, args.producer_id, args.min_duration_ms)
    if found:
        _table([["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]] +
               [[t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state]
                for t in found])
    elif args.state or args.producer_id or args.min_duration_ms >= 0:
        print_none("no transactions match the filters")
    else:
        print_none("no transactions")
    return 0


async def _describe(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    d = (await admin.describe_transactions([args.transactional_id]))[args.transactional_id]
    duration = "-" if d.start_time_ms < 0 else str(max(_now_ms() - d.start_time_ms, 0))
    _table([["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE",
             "TIMEOUT-MS", "START-TIME-MS", "DURATION-MS", "PARTITIONS"],
            [str(d.coordinator_id), d.transactional_id, str(d.producer_id),
             str(d.producer_epoch), d.state, str(d.timeout_ms), _opt(d.start_time_ms),
             duration, ",".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions) or "-"]])
    return 0


async def _partitions(admin: AsyncAdmin, topic: str | None, partition: int | None
                      ) -> list[TopicPartition]:
    if partition is not None:
        if topic is None:
            raise ValueError("--partition needs --topic")
        return [TopicPartition(topic, partition)]
    if topic is not None:
        names = [topic]
    else:
        names = [n for n in await admin.list_topics(include_internal=True)
                 if n != TRANSACTION_STATE_TOPIC]
    out: list[TopicPartition] = []
    for desc in await admin.describe_topics(names, include_configs=False):
        out += [TopicPartition(desc.name, p.partition) for p in desc.partitions]
    return out


async def _describe_producers(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    tps = await _partitions(admin, args.topic, args.partition)
    found = await admin.describe_producers(tps)
    rows = [["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH",
             "LAST-SEQUENCE", "LAST-TIMESTAMP", "CURRENT-TXN-START-OFFSET"]]
    for tp in tps:
        rows += [[tp.topic, str(tp.partition), str(s.producer_id), str(s.producer_epoch),
                  _opt(s.coordinator_epoch), str(s.last_sequence), str(s.last_timestamp),
                  _opt(s.current_txn_start_offset)] for s in found[tp]]
    if len(rows) == 1:
        print(f"no producers known in {args.topic}" +
              ("" if args.partition is None else f"-{args.partition}"))
    else:
        _table(rows)
    return 0


@dataclass(frozen=True)
class Hanging:
    tp: TopicPartition
    producer: ProducerState
    reason: str


async def find_hanging(admin: AsyncAdmin, tps: list[TopicPartition], max_timeout_ms: int,
                       now_ms: int) -> list[Hanging]:
    """Kafka's find-hanging rule (see the module docstring)."""
    candidates = [(tp, s) for tp, states in (await admin.describe_producers(tps)).items()
                  for s in states
                  if s.current_txn_start_offset >= 0
                  and now_ms - s.last_timestamp > max_timeout_ms]
    if not candidates:
        return []
    pids = sorted({s.producer_id for _, s in candidates})
    ids = {t.producer_id: t.transactional_id
           for t in await admin.list_transactions(producer_ids=pids)}
    known: dict[str, set[TopicPartition] | None] = {}
    for tid in sorted(set(ids.values())):
        try:
            known[tid] = set((await admin.describe_transactions([tid]))[tid].partitions)
        except KafkaError as e:
            if e.code != ErrorCode.transactional_id_not_found:
                raise
            known[tid] = None
    out: list[Hanging] = []
    for tp, s in candidates:
        owner = ids.get(s.producer_id)
        partitions = known.get(owner) if owner is not None else None
        if owner is None:
            reason = "no coordinator knows this producer id"
        elif partitions is None:
            reason = f"transactional id {owner!r} not found"
        elif tp not in partitions:
            reason = f"not in the transaction of {owner!r}"
        else:
            continue
        out.append(Hanging(tp, s, reason))
    return out


async def _find_hanging(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    tps = await _partitions(admin, args.topic, args.partition)
    now = _now_ms()
    found = await find_hanging(admin, tps, args.max_transaction_timeout_ms, now)
    if not found:
        print("no hanging transactions")
        return 0
    _table([["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "COORDINATOR-EPOCH",
             "START-OFFSET", "LAST-TIMESTAMP", "DURATION-MS", "WHY"]] +
           [[h.tp.topic, str(h.tp.partition), str(h.producer.producer_id),
             str(h.producer.producer_epoch), _opt(h.producer.coordinator_epoch),
             str(h.producer.current_txn_start_offset), str(h.producer.last_timestamp),
             str(max(now - h.producer.last_timestamp, 0)), h.reason] for h in found])
    return 0


async def _abort(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    where = f"{tp.topic}-{tp.partition}"
    given = (args.producer_epoch, args.coordinator_epoch)
    if any(v is not None for v in given) and (args.producer_id is None or None in given):
        raise ValueError("--producer-epoch and --coordinator-epoch go together, with "
                         "--producer-id")
    start = -1
    if args.producer_epoch is not None:
        pid, epoch, coordinator_epoch = (args.producer_id, args.producer_epoch,
                                         args.coordinator_epoch)
    else:
        states = (await admin.describe_producers([tp]))[tp]
        if args.producer_id is not None:
            match = [s for s in states if s.producer_id == args.producer_id]
            if not match or match[0].current_txn_start_offset < 0:
                raise ValueError(f"producer {args.producer_id} has no open transaction in "
                                 f"{where}; see `tidegate txn describe-producers --topic "
                                 f"{tp.topic} --partition {tp.partition}`")
        else:
            match = [s for s in states if s.current_txn_start_offset == args.start_offset]
            if not match:
                raise ValueError(f"no open transaction starts at offset {args.start_offset} "
                                 f"in {where}")
        s = match[0]
        pid, epoch, start = s.producer_id, s.producer_epoch, s.current_txn_start_offset
        # A producer that never had a marker reports -1; 0 is no newer than any real
        # coordinator epoch, so the marker cannot fence a coordinator (as Kafka's tool).
        coordinator_epoch = max(s.coordinator_epoch, 0)
    await admin.abort_transaction(tp.topic, tp.partition, pid, epoch, coordinator_epoch)
    began = f" (it started at offset {start})" if start >= 0 else ""
    print(f"Aborted the open transaction of producer {pid} (epoch {epoch}, coordinator "
          f"epoch {coordinator_epoch}) in {where}{began}.")
    lso = (await admin.list_offsets({tp: LATEST}, isolation_level=READ_COMMITTED)).get(tp)
    if lso is not None:
        print(f"The last stable offset of {where} is now {lso.offset}.")
    return 0


async def _force_terminate(admin: AsyncAdmin, args: argparse.Namespace) -> int:
    tid = args.transactional_id
    # an unknown id is an error here, not a new id left behind by a typo
    before = (await admin.describe_transactions([tid]))[tid]
    # Without two-phase commit, so it works whatever the broker's setting; a plain
    # InitProducerId ends a prepared transaction like any other.
    async with AsyncProducer(client_settings(args, ProducerConfig, {
            "client.id": "tidegate-txn", "transactional.id": tid})) as p:
        await p.init_transactions()
    if before.state == "Ongoing":
        print(f"Aborted the transaction of {tid!r} (producer {before.producer_id}, epoch "
              f"{before.producer_epoch}) in "
              f"{', '.join(f'{tp.topic}-{tp.partition}' for tp in before.partitions) or '-'}"
              "; its producer is fenced.")
    elif before.state in ("PrepareCommit", "PrepareAbort"):
        # past the point of no return: InitProducerId lets the coordinator finish it
        outcome = "commit" if before.state == "PrepareCommit" else "abort"
        print(f"{tid!r} was completing its {outcome} ({before.state}); the {outcome} "
              "finished and its producer is fenced.")
    else:
        print(f"{tid!r} had no open transaction ({before.state}); its producer is fenced.")
    return 0


ACTIONS: dict[str, Callable[[AsyncAdmin, argparse.Namespace], Awaitable[int]]] = {
    "list": _list, "describe": _describe, "describe-producers": _describe_producers,
    "find-hanging": _find_hanging, "abort": _abort, "force-terminate": _force_terminate,
}
