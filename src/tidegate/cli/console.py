"""`tidegate console`: the web console as a standalone server against any Kafka cluster.

It serves the same pages the broker serves on its HTTP listener (`console/web.py`), here
on their own aiohttp server, talking to the cluster through Tidegate's client only:
`--bootstrap-server` and `--command-config` (TLS/SASL client properties) as every other
client command. `--listen` defaults to 127.0.0.1:9645 (loopback only: the console can
delete topics and abort transactions; `--read-only` refuses every such action).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from tidegate.cli.command_config import add_bootstrap, client_settings
from tidegate.client.config import AdminConfig
from tidegate.client.errors import ConfigError

DEFAULT_LISTEN = "127.0.0.1:9645"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("console", help="the web console, against any Kafka cluster",
                       description="Serve the web console (topics, messages, groups, "
                                   "transactions) for the cluster at --bootstrap-server.")
    add_bootstrap(p)
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help=f"where to serve the console (default {DEFAULT_LISTEN})")
    p.add_argument("--read-only", action="store_true",
                   help="show everything, change nothing (no create, delete, reset, abort)")
    p.set_defaults(func=run)


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--listen {text!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    try:
        host, port = _listen(args.listen)
        settings = client_settings(args, AdminConfig)
    except ConfigError as e:
        print(f"tidegate console: {e}", file=sys.stderr)
        return 2
    bootstrap = str(settings.pop("bootstrap.servers"))
    try:
        asyncio.run(_serve(host, port, bootstrap, settings, args.read_only))
    except OSError as e:
        print(f"tidegate console: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        return 1
    return 0


async def _serve(host: str, port: int, bootstrap: str, settings: dict[str, object],
                 read_only: bool) -> None:
    from aiohttp import web

    from tidegate.console.web import add_routes

    app = web.Application(client_max_size=1 << 20)
    add_routes(app, bootstrap, read_only=read_only, client_config=settings)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
        where = ", ".join(f"http://{a[0]}:{a[1]}/" for a in runner.addresses
                          if isinstance(a, tuple)) or f"http://{host}:{port}/"
        mode = " (read-only)" if read_only else ""
        print(f"Tidegate console{mode} for {bootstrap} listening on {where}", flush=True)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
