"""`tidegate sagas run|start|list|describe`: Saga orchestration from the shell.

``tidegate sagas run --definitions FILE`` runs the orchestrator
(`tidegate.patterns.saga`) for the definitions in a JSON file until interrupted
(``--until-idle``: until every saga is completed or compensated). ``start`` sends a
start request; ``list`` shows every saga's status from the compacted state topic
(``--status`` filters); ``describe ID`` prints one saga's state and history.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.client import Producer
from tidegate.client.config import AdminConfig, ProducerConfig
from tidegate.patterns.saga import (
    SagaOrchestrator,
    SagaTopics,
    definitions_from_json,
    read_states,
    start_saga,
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("sagas", help="Saga orchestration: run, start, list, describe",
                       description="Run sagas and look at their state.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    r = actions.add_parser("run", help="run the orchestrator")
    _common(r)
    r.add_argument("--definitions", required=True, metavar="FILE",
                   help="JSON: a saga definition or a list of them")
    r.add_argument("--until-idle", action="store_true",
                   help="stop when every saga is completed or compensated")
    r.set_defaults(func=_run)
    s = actions.add_parser("start", help="send a start request")
    _common(s)
    s.add_argument("saga", help="the definition's name")
    s.add_argument("--id", default=None, help="saga id (default: a new UUID)")
    s.add_argument("--payload", default="", help="the text every step receives")
    s.set_defaults(func=_start)
    ls = actions.add_parser("list", help="every saga and its status")
    _common(ls)
    ls.add_argument("--status", default=None,
                    help="only RUNNING, COMPENSATING, COMPLETED or COMPENSATED")
    ls.set_defaults(func=_list)
    d = actions.add_parser("describe", help="one saga's state and history")
    _common(d)
    d.add_argument("id")
    d.set_defaults(func=_describe)


def _common(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--prefix", default="sagas",
                   help="topic prefix: PREFIX.start, .replies, .state (default %(default)s)")


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        definitions = definitions_from_json(Path(args.definitions).read_text())
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"tidegate sagas run: {args.definitions}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 2
    orch = SagaOrchestrator(definitions, client_settings(args, ProducerConfig),
                            topics=SagaTopics(args.prefix))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        orch.run(stop, until_idle=args.until_idle)
    finally:
        orch.close()
    st = orch.stats
    print(f"started {st.started}, completed {st.completed}, compensated {st.compensated} "
          f"in {st.transactions} transactions", flush=True)
    return 0


def _start(args: argparse.Namespace) -> int:
    sid = args.id or str(uuid.uuid4())
    with Producer(client_settings(args, ProducerConfig)) as p:
        start_saga(p, args.saga, sid, args.payload, SagaTopics(args.prefix))
        p.flush()
    print(sid)
    return 0


def _list(args: argparse.Namespace) -> int:
    states = read_states(client_settings(args, AdminConfig), SagaTopics(args.prefix))
    print(f"{'SAGA ID':<38} {'DEFINITION':<16} {'STATUS':<13} STEP")
    for sid, s in sorted(states.items()):
        if args.status and s.status != args.status.upper():
            continue
        print(f"{sid:<38} {s.saga:<16} {s.status:<13} {s.step} {s.action} #{s.attempt}")
    return 0


def _describe(args: argparse.Namespace) -> int:
    s = read_states(client_settings(args, AdminConfig), SagaTopics(args.prefix)).get(args.id)
    if s is None:
        print(f"tidegate sagas describe: no saga {args.id}", file=sys.stderr)
        return 1
    print(f"saga {s.saga_id} ({s.saga}): {s.status}, step {s.step} {s.action} "
          f"attempt {s.attempt}\npayload: {s.payload}")
    for line in s.history:
        print(f"  - {line}")
    return 0
