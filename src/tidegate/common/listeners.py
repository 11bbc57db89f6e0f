"""Listeners: `NAME://host:port` lists and the security protocol each name maps to.

Kafka's rules (distinct names; advertised names a subset of `listeners`; every name in
`listener.security.protocol.map`). Every protocol is served — PLAINTEXT, SSL,
SASL_PLAINTEXT, SASL_SSL — and a listener's TLS and SASL settings are checked at start
(common/security_config.py): one declared secure whose settings are missing is a
configuration error, never an open port.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from tidegate.common.errors import InvalidConfigError


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_listeners(value: str) -> list[Listener]:
    result = []
    for item in filter(None, (v.strip() for v in value.split(","))):
        if "://" not in item:
            raise InvalidConfigError(f"listener {item!r} must look like PLAINTEXT://host:port")
        name, rest = item.split("://", 1)
        parts = urlsplit("//" + rest)
        try:
            port = parts.port
        except ValueError as e:
            raise InvalidConfigError(f"listener {item!r} has an invalid port") from e
        if port is None:
            raise InvalidConfigError(f"listener {item!r} has no port")
        result.append(Listener(name.upper(), parts.hostname or "", port))
    return result


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SERVED_PROTOCOLS = SECURITY_PROTOCOLS  # each checked by common/security_config.py


def parse_protocol_map(value: str) -> dict[str, str]:
    """`listener.security.protocol.map`: listener name -> security protocol."""
    out: dict[str, str] = {}
    for item in filter(None, (v.strip() for v in value.split(","))):
        name, sep, proto = (x.strip() for x in item.partition(":"))
        if not sep or not name or not proto:
            raise InvalidConfigError(
                f"listener.security.protocol.map entry {item!r} must look like NAME:PROTOCOL"
            )
        if proto.upper() not in SECURITY_PROTOCOLS:
            raise InvalidConfigError(
                f"Invalid security protocol `{proto}` defined in "
                f"listener.security.protocol.map (one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        out[name.upper()] = proto.upper()
    return out


def check_listener_security(
    listeners: list[Listener], advertised: list[Listener], protocol_map: dict[str, str]
) -> None:
    """Kafka's listener checks: distinct names, advertised names among `listeners`,
    a known security protocol for each."""
    names = [lis.name for lis in listeners]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidConfigError(
            f"Each listener must have a different name, listeners: "
            f"{','.join(map(str, listeners))} (repeated: {', '.join(dupes)})"
        )
    unknown = sorted({lis.name for lis in advertised} - set(names))
    if unknown:
        raise InvalidConfigError(
            f"advertised.listeners listener names must be equal to or a subset of the ones "
            f"defined in listeners. Found {','.join(unknown)}. The valid options based on "
            f"currently configured listeners are {','.join(names)}"
        )
    for key, group in (("listeners", listeners), ("advertised.listeners", advertised)):
        for lis in group:
            proto = protocol_map.get(lis.name)
            if proto is None:
                raise InvalidConfigError(
                    f"No security protocol defined for listener {lis.name} ({key}={lis}); "
                    f"add {lis.name}:PLAINTEXT to listener.security.protocol.map"
                )
            # SERVED_PROTOCOLS holds every protocol parse_protocol_map accepts; what a
            # secure one needs is checked when its listener is built (security_config).
