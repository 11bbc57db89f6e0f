"""`tidegate outbox relay|schema`: run the transactional outbox relay from the shell.

``tidegate outbox relay --bootstrap-server B --db URL --table T`` publishes the rows of
outbox table T (URL ``sqlite:///path`` or ``postgresql://...``) exactly once (see
`tidegate.patterns.outbox.relay`) until interrupted; ``--until-idle`` stops when no
row is left. It creates nothing in the database: a missing table or column ends with
exit code 2 and the DDL it expects. ``tidegate outbox schema --db URL --table T``
prints that DDL; with ``--apply`` it creates the table (and, for SQLite, the file).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.client.config import ProducerConfig
from tidegate.patterns.outbox import (
    DEFAULT_DEAD_LETTER_TOPIC,
    DEFAULT_TOPIC,
    OutboxRelay,
    OutboxStore,
    OutboxTableError,
    open_store,
    schema_for_url,
)
from tidegate.patterns.outbox.sqlite import SqliteOutboxStore


def add_parser(sub: Any) -> None:
    p = sub.add_parser("outbox", help="transactional outbox relay (local message table)",
                       description="Publish outbox table rows exactly once.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    r = actions.add_parser("relay", help="publish the rows of an outbox table")
    add_bootstrap(r)
    _db_args(r)
    r.add_argument("--topic", default=DEFAULT_TOPIC,
                   help="topic per row; {aggregatetype} and {type} are replaced "
                        "(default %(default)s)")
    r.add_argument("--dead-letter-topic", default=DEFAULT_DEAD_LETTER_TOPIC,
                   help="where rows too large for their topic go (default %(default)s)")
    r.add_argument("--transactional-id", default=None,
                   help="default: derived from the database and table (relays of one "
                        "outbox share it)")
    r.add_argument("--batch-size", type=int, default=500, help="rows per transaction")
    r.add_argument("--poll-interval-ms", type=int, default=1000,
                   help="longest wait between two looks at the table")
    r.add_argument("--delete-published", action="store_true",
                   help="delete rows once their transaction committed")
    r.add_argument("--until-idle", action="store_true",
                   help="stop when no unpublished row is left")
    r.set_defaults(func=_relay)
    s = actions.add_parser("schema", help="print (or --apply) the outbox table's DDL")
    _db_args(s)
    s.add_argument("--apply", action="store_true", help="create the table")
    s.set_defaults(func=_schema)


def _db_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, metavar="URL",
                   help="sqlite:///PATH or postgresql://USER@HOST/DB")
    p.add_argument("--table", default="outbox", help="outbox table (default %(default)s)")


def _relay(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    settings: dict[str, object] = {}
    if args.transactional_id:
        settings["transactional.id"] = args.transactional_id
    config = client_settings(args, ProducerConfig, settings)
    try:
        store = open_store(args.db, args.table)
    except (OutboxTableError, ValueError, ImportError) as e:
        print(f"tidegate outbox relay: {e}", file=sys.stderr)
        return 2
    relay = OutboxRelay(store, config, topic=args.topic,
                        dead_letter_topic=args.dead_letter_topic,
                        batch_size=args.batch_size,
                        poll_interval_s=args.poll_interval_ms / 1000,
                        delete_published=args.delete_published)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        relay.run(stop, until_idle=args.until_idle)
    except OutboxTableError as e:
        print(f"tidegate outbox relay: {e}", file=sys.stderr)
        return 2
    finally:
        relay.close()
    st = relay.stats
    print(f"published {st.published}, dead-lettered {st.dead_lettered} in "
          f"{st.transactions} transactions", flush=True)
    return 0


def _schema(args: argparse.Namespace) -> int:
    try:
        ddl = schema_for_url(args.db, args.table)
    except ValueError as e:
        print(f"tidegate outbox schema: {e}", file=sys.stderr)
        return 2
    if not args.apply:
        print(ddl, end="")
        return 0
    store: OutboxStore = (SqliteOutboxStore(args.db[len("sqlite:///"):], args.table, create=True)
             if args.db.startswith("sqlite:///") else open_store(args.db, args.table))
    try:
        store.create_schema()
    finally:
        store.close()
    print(f"created table {args.table}")
    return 0
