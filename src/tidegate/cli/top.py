"""`tidegate top`: throughput, consumer lag and open transactions, refreshed in place.

Like `htop` for a Kafka cluster, without curses: every `--interval` seconds it takes a
snapshot through the same data functions as the web console (`console/top.py`) and
redraws the terminal with ANSI escapes (home, clear). When stdout is not a terminal
(a pipe, a log file) each screen is printed after the previous one instead.
`--iterations N` stops after N screens (0, the default: until Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from typing import Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.cli.topics import run_client
from tidegate.client.config import AdminConfig

HOME_CLEAR = "\x1b[H\x1b[2J"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("top", help="live throughput, lag and open transactions",
                       description="Throughput, consumer lag and open transactions, "
                                   "refreshed in place.")
    add_bootstrap(p)
    p.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                   help="seconds between screens (default 2)")
    p.add_argument("--iterations", type=int, default=0, metavar="N",
                   help="stop after N screens (default: run until Ctrl-C)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.interval < 0.2 or args.iterations < 0:
        print("tidegate top: --interval must be at least 0.2 and --iterations at least 0",
              file=sys.stderr)
        return 2

    async def main() -> int:
        from tidegate.console.data import ConsoleClient
        from tidegate.console.top import collect, render

        settings = client_settings(args, AdminConfig)
        client = ConsoleClient(settings)
        tty = sys.stdout.isatty()
        try:
            await client.ensure_started()
            prev = None
            shown = 0
            while True:
                cur = await collect(client)
                width = shutil.get_terminal_size((120, 40)).columns
                lines = render(cur, prev, args.bootstrap_server, width)
                sys.stdout.write((HOME_CLEAR if tty else "\n") + "\n".join(lines) + "\n")
                sys.stdout.flush()
                prev, shown = cur, shown + 1
                if args.iterations and shown >= args.iterations:
                    return 0
                await asyncio.sleep(args.interval)
        finally:
            await client.close()
    return run_client("top", main)
