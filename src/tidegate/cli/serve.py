"""`tidegate serve [PROPERTIES_FILE] [--override KEY=VALUE ...]`: run a broker.

Mirrors `kafka-server-start.sh`: a properties file, then overrides. Prints where the
broker listens and what it advertises once it accepts connections.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from tidegate.common.config import BrokerConfig
from tidegate.common.errors import KafkaError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run a broker",
        description="Run a Tidegate broker (like kafka-server-start.sh).",
    )
    p.add_argument(
        "properties", nargs="?", type=Path, help="a server.properties file (Kafka's key names)"
    )
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a broker config, e.g. --override log.dirs=/tmp/t1",
    )
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = BrokerConfig.load(args.properties, args.override)
    except KafkaError as e:
        print(f"tidegate serve: configuration error: {e}", file=sys.stderr)
        return 2
    warn_unknown_keys(config)

    from tidegate.common.listeners import parse_protocol_map
    from tidegate.common.security_config import listener_security
    from tidegate.server.app import run_broker

    def ready(bound: list[tuple[str, int]]) -> None:
        bound_addresses.extend(bound)
        where = ", ".join(f"{h}:{p}" for h, p in bound)
        adv = ", ".join(str(x) for x in config.advertised_listeners())
        print(
            f"Tidegate {config.node_id} listening on {where} (advertised as {adv}); "
            f"data in {config.log_dir.resolve()}",
            flush=True,
        )
        # What each listener requires of a client (docs/security.md).
        protocols = parse_protocol_map(config.get("listener.security.protocol.map"))
        for lis in config.listeners():
            sec = listener_security(config.props, lis.name, protocols[lis.name])
            print(f"  listener {lis} ({sec.protocol}): {sec.describe()}", flush=True)
        for url in http_urls:
            print(f"  http {url}: /metrics /healthz /readyz{console_paths}", flush=True)

    # -- the HTTP listener (http.listeners; docs/observability.md) and the console on it
    http_urls: list[str] = []
    bound_addresses: list[tuple[str, int]] = []
    routes, console_paths = _console_routes(config, bound_addresses)

    def http_bound(urls: list[str]) -> None:
        http_urls.extend(urls)
        for url in urls:  # before the logs load: probes may poll /readyz from here on
            print(f"HTTP listener on {url}", flush=True)

    try:
        run_broker(config, ready, http_routes=routes, on_http=http_bound)
    except OSError as e:
        print(f"tidegate serve: {e}", file=sys.stderr)
        return 1
    except KafkaError as e:
        print(f"tidegate serve: {e}", file=sys.stderr)
        return 2
    return 0


def warn_unknown_keys(config: BrokerConfig) -> None:
    """One warning per key of the broker's properties Tidegate does not know: a typo, or
    one Kafka 4 removed (said so)."""
    from tidegate.storage.config import BROKER_SYNONYMS, REMOVED_TOPIC_KEYS

    topic_defaults = {name for synonyms in BROKER_SYNONYMS.values() for name, _ in synonyms}
    removed = {f"log.{key}" for key in REMOVED_TOPIC_KEYS}
    for key in config.unknown_keys():
        if key in topic_defaults:  # a broker-level default of a topic config (Kafka's name)
            continue
        if key in removed:
            logging.getLogger("tidegate.server").warning(
                "config %s was removed in Kafka 4 (and Tidegate follows): it has no effect; "
                "remove it from the broker's properties", key)
            continue
        logging.getLogger("tidegate.server").warning(
            "config %s is not a broker setting Tidegate knows; it is kept as a topic default "
            "if it is one",
            key,
        )


def _console_routes(config: BrokerConfig, bound: list[tuple[str, int]]
                    ) -> tuple[Any, str]:
    """The web console's routes for the HTTP listener (tidegate.console.web), talking to
    this broker's first PLAINTEXT listener at the address it bound (`bound`, filled in
    once the broker listens: port 0 works); none if there is no such listener or the
    console is not installed. `console.read.only=true` mounts it read-only."""
    listeners = config.listeners()
    index = next((i for i, x in enumerate(listeners) if x.name == "PLAINTEXT"), None)
    if index is None or not config.get("http.listeners").strip():
        return None, ""
    try:
        from tidegate.console.web import add_routes
    except (ImportError, AttributeError):
        return None, ""
    lis = listeners[index]
    read_only = config.get_bool("console.read.only")

    def bootstrap() -> str:
        # one bound address per listener (a listener on every interface may bind two:
        # then its configured port, which is not 0 in practice)
        host, port = bound[index] if len(bound) == len(listeners) else (lis.host, lis.port)
        return f"{'127.0.0.1' if host in ('', '0.0.0.0', '::') else host}:{port}"

    def mount(app: Any) -> None:
        add_routes(app, bootstrap, read_only=read_only)

    return mount, " and the console at /" + (" (read-only)" if read_only else "")
