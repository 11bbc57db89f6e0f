"""`tidegate notify run|query|query-server`: best-effort notification from the shell.

``tidegate notify run --topic T --endpoint URL`` POSTs every record of T to URL with
retries on a schedule (`tidegate.patterns.notify`), logging attempts to the delivery
log and sending what never got through to the dead-letter topic, until interrupted
(``--until-idle``: until the topic is drained). ``tidegate notify query --topic T
--since 10m`` (or ``--id topic:partition:offset``) prints, as JSON lines, what was
sent and its delivery state; ``query-server`` answers the same over HTTP for the
receiving side (``GET /notifications?since_ms=...``, ``GET /notifications/<id>``).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.client import ConsumerRecord
from tidegate.client.config import AdminConfig
from tidegate.patterns.notify import DEFAULT_SCHEDULE_S, NotificationQuery, Notifier, query_app

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(text: str) -> float:
    """``500ms``, ``15s``, ``5m``, ``2h``, ``1d`` or plain seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|d)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 15s, 5m, 2h)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def schedule(text: str) -> tuple[float, ...]:
    return tuple(duration_s(part) for part in text.split(",") if part.strip())


def add_parser(sub: Any) -> None:
    p = sub.add_parser("notify", help="best-effort notification of a topic to HTTP endpoints",
                       description="Deliver records to HTTP endpoints with retries.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    r = actions.add_parser("run", help="deliver the records of topics to an endpoint")
    add_bootstrap(r)
    _topic_args(r)
    r.add_argument("--endpoint", default=None, metavar="URL",
                   help="where records are POSTed (default for --endpoint-header)")
    r.add_argument("--endpoint-header", default=None, metavar="NAME",
                   help="take each record's URL from this header when it has one")
    r.add_argument("--group", default=None, help="consumer group holding the progress")
    r.add_argument("--schedule", type=schedule, default=DEFAULT_SCHEDULE_S,
                   help="retry intervals, comma-separated (default 15s,1m,5m,30m,1h,2h,6h)")
    r.add_argument("--request-timeout", type=duration_s, default=10.0,
                   help="an attempt with no answer within this fails (default 10s)")
    r.add_argument("--dead-letter-topic", default="notify.deadletter")
    r.add_argument("--max-in-flight", type=int, default=8, help="concurrent requests")
    r.add_argument("--until-idle", action="store_true",
                   help="stop when every record is delivered or dead-lettered")
    r.set_defaults(func=_run)
    q = actions.add_parser("query", help="what was sent, and its delivery state")
    add_bootstrap(q)
    _topic_args(q)
    q.add_argument("--since", type=duration_s, default=3600.0,
                   help="records written within this long (default 1h)")
    q.add_argument("--key", default=None, help="only records with this key")
    q.add_argument("--id", default=None, help="one notification (topic:partition:offset)")
    q.add_argument("--limit", type=int, default=1000)
    q.set_defaults(func=_query)
    s = actions.add_parser("query-server", help="the query over HTTP, for receivers")
    add_bootstrap(s)
    _topic_args(s)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=9650)
    s.set_defaults(func=_query_server)


def _topic_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", action="append", required=True, dest="topics",
                   help="source topic (repeat for several)")
    p.add_argument("--log-topic", default="notify.log",
                   help="the delivery log (default %(default)s)")


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if not args.endpoint and not args.endpoint_header:
        print("tidegate notify run: give --endpoint, --endpoint-header or both",
              file=sys.stderr)
        return 2
    default, header = args.endpoint, args.endpoint_header

    def endpoint(record: ConsumerRecord) -> str | None:
        if header:
            for k, v in record.headers:
                if k == header and v:
                    return v.decode()
        return str(default) if default else None

    notifier = Notifier(args.topics, endpoint, client_settings(args, AdminConfig),
                        group_id=args.group, schedule=args.schedule,
                        log_topic=args.log_topic, dead_letter_topic=args.dead_letter_topic,
                        request_timeout_s=args.request_timeout,
                        max_in_flight=args.max_in_flight)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        notifier.run(stop, until_idle=args.until_idle)
    finally:
        notifier.close()
    st = notifier.stats
    print(f"delivered {st.delivered}, dead-lettered {st.dead_lettered}, "
          f"{st.attempts} attempts", flush=True)
    return 0


def _query(args: argparse.Namespace) -> int:
    query = NotificationQuery(client_settings(args, AdminConfig), args.topics, args.log_topic)
    if args.id:
        found = query.get(args.id)
        if found is None:
            print(f"tidegate notify query: no notification {args.id}", file=sys.stderr)
            return 1
        print(json.dumps(found))
        return 0
    since_ms = int((time.time() - args.since) * 1000)
    for n in query.since(since_ms, args.key, args.limit):
        print(json.dumps(n))
    return 0


def _query_server(args: argparse.Namespace) -> int:
    from aiohttp import web
    query = NotificationQuery(client_settings(args, AdminConfig), args.topics, args.log_topic)
    print(f"notification query on http://{args.host}:{args.port}/notifications", flush=True)
    web.run_app(query_app(query), host=args.host, port=args.port, print=None)
    return 0
