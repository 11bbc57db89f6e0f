"""Broker configuration with Kafka's key names and defaults.

Sources, later ones winning: built-in defaults, a `server.properties`-style file,
environment variables `TIDEGATE_<KEY>` (dots and dashes as underscores, e.g.
`TIDEGATE_LOG_DIRS`), then `--override key=value` flags — the same precedence as
`kafka-server-start.sh`. Unknown keys are kept (they may be topic defaults such as
`log.retention.hours`) but reported by `unknown_keys()` so the CLI can warn about typos.

The keys themselves (defaults, types, documentation) are in `config_keys.py`; where a
single-node default differs from Kafka's it says why next to the key there.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from tidegate.common.config_keys import BROKER_KEYS, CLUSTER_DEFAULTS
from tidegate.common.errors import InvalidConfigError
from tidegate.common.listeners import (
    Listener,
    check_listener_security,
    parse_listeners,
    parse_protocol_map,
)
from tidegate.common.security_config import is_listener_key, listener_security

__all__ = ["BROKER_KEYS", "BrokerConfig", "Listener", "parse_listeners"]

LONG_MAX = 9_223_372_036_854_775_807


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties subset: key=value or key: value, # and ! comments."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            props[line] = ""
        else:
            props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props


# Tidegate's own process switches, read where they act, not broker settings: they must
# not reach the config (where `tidegate serve` would warn about an unknown key).
PROCESS_SWITCHES = frozenset({
    "PURE_PYTHON",  # records/: no C extensions
    "MALLOC_TUNING", "GC_TUNING",  # server/malloc_tuning.py, server/gc_tuning.py
    "KIO_HYPOTHESIS", "SOAK",  # tests
})


def env_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    known = {k.replace(".", "_").replace("-", "_").upper(): k for k in BROKER_KEYS}
    out: dict[str, str] = {}
    for name, value in environ.items():
        if not name.startswith("TIDEGATE_"):
            continue
        suffix = name[len("TIDEGATE_") :]
        if suffix in PROCESS_SWITCHES or suffix.startswith(("TEST_", "SPARK_TEST_")):
            continue
        key = known.get(suffix, suffix.lower().replace("_", "."))
        out[key] = value
    return out


class BrokerConfig:
    """All broker settings as strings, with typed accessors for the ones we use."""

    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self.props: dict[str, str] = {k: v[0] for k, v in BROKER_KEYS.items()}
        self.explicit: set[str] = set()
        self._bound_ports: dict[str, int] = {}  # listener -> port bound (bind_ports)
        if props:
            self.update(props)

    @classmethod
    def load(
        cls,
        file: Path | None = None,
        overrides: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> BrokerConfig:
        merged: dict[str, str] = {}
        if file is not None:
            try:
                merged.update(parse_properties(file.read_text()))
            except OSError as e:
                raise InvalidConfigError(f"cannot read {file}: {e.strerror}") from e
        merged.update(env_overrides(os.environ if environ is None else environ))
        for item in overrides:
            if "=" not in item:
                raise InvalidConfigError(f"--override {item!r} must be KEY=VALUE")
            k, v = item.split("=", 1)
            merged[k.strip()] = v.strip()
        return cls(merged)

    def update(self, props: Mapping[str, str]) -> None:
        for k, v in props.items():
            self.props[k] = v
            self.explicit.add(k)
        for key, value in CLUSTER_DEFAULTS.items():
            if key not in self.explicit:
                self.props[key] = value if self.cluster_mode else BROKER_KEYS[key][0]
        self._validate()

    def _validate(self) -> None:
        for key, (_, typ, _doc) in BROKER_KEYS.items():
            value = self.props.get(key, "")
            if value == "":
                continue
            if typ == "int":
                try:
                    int(value)
                except ValueError:
                    raise InvalidConfigError(f"{key}={value!r} is not an integer") from None
            elif typ == "bool" and value.lower() not in ("true", "false"):
                raise InvalidConfigError(f"{key}={value!r} must be true or false")
        broker_id, node_id = self.props.get("broker.id", ""), self.props.get("node.id", "")
        if (
            {"broker.id", "node.id"} <= self.explicit
            and broker_id not in ("", "-1")
            and int(broker_id) != int(node_id or "-1")
        ):
            raise InvalidConfigError(
                f"The values for broker.id ({broker_id}) and node.id ({node_id}) must be the "
                "same if both are specified."
            )
        protocols = parse_protocol_map(self.props.get("listener.security.protocol.map", ""))
        check_listener_security(self.listeners(), self.advertised_listeners(), protocols)
        for lis in self.listeners():  # TLS and SASL settings each secure listener needs
            listener_security(self.props, lis.name, protocols[lis.name])

    def unknown_keys(self) -> list[str]:
        return sorted(k for k in self.explicit
                      if k not in BROKER_KEYS and "." not in k[:1] and not is_listener_key(k))

    def get(self, key: str, default: str = "") -> str:
        return self.props.get(key, default)

    def get_int(self, key: str, default: int | None = None) -> int | None:
        value = self.props.get(key, "")
        if value == "":
            return default
        return int(value)

    def get_bool(self, key: str) -> bool:
        return self.props.get(key, "false").lower() == "true"

    @property
    def node_id(self) -> int:
        broker_id = self.get_int("broker.id", -1)
        if "node.id" not in self.explicit and broker_id is not None and broker_id >= 0:
            return broker_id
        return int(self.props["node.id"])

    @property
    def cluster_mode(self) -> bool:
        """True when zookeeper.connect names a ZooKeeper: brokers form a cluster."""
        return bool(self.props.get("zookeeper.connect", "").strip())

    @property
    def zookeeper_connection_timeout_ms(self) -> int:
        """zookeeper.connection.timeout.ms, else zookeeper.session.timeout.ms (Kafka's rule)."""
        value = self.get_int("zookeeper.connection.timeout.ms")
        if value is None:
            value = self.get_int("zookeeper.session.timeout.ms", 18000)
        assert value is not None
        return value

    def listeners(self) -> list[Listener]:
        ls = parse_listeners(self.props["listeners"])
        if not ls:
            raise InvalidConfigError("listeners is empty; set e.g. PLAINTEXT://127.0.0.1:9092")
        return ls

    def advertised_listeners(self) -> list[Listener]:
        """What Metadata and the registration advertise: `advertised.listeners`, else the
        listeners; a port 0 becomes the port its listener bound (`bind_ports`), as on
        Kafka, so a broker started on port 0 is reachable through its metadata."""
        value = self.props.get("advertised.listeners", "")
        found = parse_listeners(value) if value else [
            Listener(lis.name, lis.host or "localhost", lis.port) for lis in self.listeners()]
        bound = self._bound_ports
        return [Listener(a.name, a.host, bound[a.name]) if a.port == 0 and a.name in bound
                else a for a in found]

    def bind_ports(self, ports: Mapping[str, int]) -> None:
        """The port each listener bound (server/listener.py), for `advertised_listeners`."""
        self._bound_ports = dict(ports)

    @property
    def log_dir(self) -> Path:
        """The first of `log_dirs`: the broker's own files and the topics file live here."""
        return self.log_dirs[0]

    @property
    def log_dirs(self) -> list[Path]:
        """`log.dirs` (else `log.dir`), comma-separated; several = JBOD (docs/broker.md)."""
        value = self.props.get("log.dirs") or self.props.get("log.dir") or "./tidegate-data"
        dirs = [Path(d.strip()) for d in value.split(",") if d.strip()]
        return dirs or [Path(value.split(",")[0].strip())]

    def items(self) -> list[tuple[str, str]]:
        return sorted(self.props.items())
