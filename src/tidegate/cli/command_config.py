"""`--bootstrap-server` and `--command-config FILE`: how every client command reaches a broker.

`--command-config` reads Kafka client properties, as Kafka's own tools take them
(`kafka-topics.sh --command-config client.properties`): `key=value` (or `key: value`)
lines, `#` and `!` comments, a trailing backslash continuing a line. That is where a
secured broker's settings go (`security.protocol`, `ssl.*`, `sasl.*`), so passwords
stay out of the shell history. `client_settings()` merges the file with the command's
own settings; a key the command's client does not use (a producer setting given to
`tidegate topics`) is left out, as Kafka's tools ignore it, and a key no client knows
is named on stderr once, since it is most likely a typo.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from tidegate.client.config import AdminConfig, ClientConfig, ConsumerConfig, ProducerConfig
from tidegate.client.errors import ConfigError

DEFAULT_BOOTSTRAP = "localhost:9092"
_EVERY_KEY = set(ProducerConfig.keys()) | set(ConsumerConfig.keys()) | set(AdminConfig.keys())


def add_bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                   help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--command-config", metavar="FILE",
                   help="Kafka client properties (security.protocol, ssl.*, sasl.*, ...) "
                        "for a secured broker")


def read_properties(path: str) -> dict[str, str]:
    """A Java .properties file's keys and values (the subset Kafka's configs use)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"--command-config {path}: {e.strerror or e}") from None
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise ConfigError(f"--command-config {path}: line {raw.strip()!r} is not "
                              "key=value")
        props[line[:cut].strip()] = line[cut + 1:].strip()
    return props


def client_settings(args: argparse.Namespace, kind: type[ClientConfig],
                    settings: Mapping[str, object] | None = None) -> dict[str, object]:
    """The command's client config: `--command-config`'s keys that `kind` knows, then
    ``bootstrap.servers`` from `--bootstrap-server`, then the command's `settings`."""
    out: dict[str, object] = {}
    path = getattr(args, "command_config", None)
    if path:
        known = kind.keys()
        for key, value in read_properties(path).items():
            if key in known:
                out[key] = value
            elif key not in _EVERY_KEY:
                print(f"tidegate: ignoring unknown client setting {key!r} in {path}",
                      file=sys.stderr)
    # --bootstrap-server left at its default yields to the file's bootstrap.servers.
    if "bootstrap.servers" not in out or args.bootstrap_server != DEFAULT_BOOTSTRAP:
        out["bootstrap.servers"] = args.bootstrap_server
    out.update(settings or {})
    return out
