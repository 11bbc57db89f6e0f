"""`tidegate tcc list|describe|recover`: TCC global transactions from the shell.

``list`` shows every global transaction's phase from the compacted state topic
(``--phase`` filters); ``describe XID`` prints one with its branches and history;
``recover`` takes over a coordinator's transactional id (fencing the coordinator
that used it: run it when that one is down) and drives every unfinished transaction
of that coordinator to CONFIRMED or CANCELLED, retrying refused calls until they are accepted.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.client.config import AdminConfig, ProducerConfig
from tidegate.patterns.tcc import TccCoordinator, read_txns


def add_parser(sub: Any) -> None:
    p = sub.add_parser("tcc", help="TCC global transactions: list, describe, recover",
                       description="Look at and finish TCC global transactions.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = actions.add_parser("list", help="every global transaction and its phase")
    _common(ls)
    ls.add_argument("--phase", default=None,
                    help="only TRYING, CONFIRMING, CANCELLING, CONFIRMED or CANCELLED")
    ls.set_defaults(func=_list)
    d = actions.add_parser("describe", help="one global transaction")
    _common(d)
    d.add_argument("xid")
    d.set_defaults(func=_describe)
    r = actions.add_parser("recover", help="finish every unfinished global transaction")
    _common(r)
    r.add_argument("--transactional-id", default=None,
                   help="the dead coordinator's: its transactions are recovered "
                        "(default tidegate-tcc-<state topic>)")
    r.add_argument("--request-timeout", type=float, default=5.0, metavar="SECONDS")
    r.set_defaults(func=_recover)


def _common(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--state-topic", default="tcc.state",
                   help="the coordinator's compacted topic (default %(default)s)")


def _list(args: argparse.Namespace) -> int:
    txns = read_txns(client_settings(args, AdminConfig), args.state_topic)
    print(f"{'XID':<38} {'PHASE':<11} {'COORDINATOR':<28} BRANCHES")
    for xid, t in sorted(txns.items()):
        if args.phase and t.phase != args.phase.upper():
            continue
        print(f"{xid:<38} {t.phase:<11} {t.owner:<28} "
              f"{','.join(b.name for b in t.branches)}")
    return 0


def _describe(args: argparse.Namespace) -> int:
    t = read_txns(client_settings(args, AdminConfig), args.state_topic).get(args.xid)
    if t is None:
        print(f"tidegate tcc describe: no global transaction {args.xid}", file=sys.stderr)
        return 1
    print(f"global transaction {t.xid}: {t.phase} (coordinator {t.owner})\n"
          f"payload: {t.payload}")
    for b in t.branches:
        print(f"  branch {b.name}: {b.url}")
    for line in t.history:
        print(f"  - {line}")
    return 0


def _recover(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    coord = TccCoordinator(client_settings(args, ProducerConfig),
                           state_topic=args.state_topic,
                           transactional_id=args.transactional_id,
                           request_timeout_s=args.request_timeout)
    try:
        done = coord.start()
    finally:
        coord.close()
    confirmed = sum(1 for p in done.values() if p == "CONFIRMED")
    print(f"recovered {len(done)}: {confirmed} confirmed, {len(done) - confirmed} cancelled",
          flush=True)
    return 0
