"""What each listener requires: its security protocol, TLS settings and SASL mechanisms.

Kafka resolves a listener's security settings with a prefix first:
`listener.name.<listener, lower case>.<key>` wins over the bare `<key>`, and a SASL
mechanism's JAAS configuration is `listener.name.<listener>.<mechanism, lower case>.
sasl.jaas.config` (the bare `sasl.jaas.config` as a fallback). `listener_security()`
applies those rules and checks what a listener needs before it is served: a TLS
listener needs a PEM key store, a SASL listener needs mechanisms Tidegate implements,
and PLAIN needs users. A listener whose requirements are not met is a configuration
error at start, never a port served open.

The JAAS parser accepts Kafka's syntax:
`org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";`
(module class, control flag, key="value" options, a closing `;`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tidegate.common.errors import InvalidConfigError
from tidegate.common.oauth_config import OAUTH_KEYS, OAuthSettings, oauth_settings

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")

# The TLS keys a listener reads (Kafka's names). Only PEM stores are supported: the
# standard library's ssl module reads PEM, not JKS or PKCS12.
SSL_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.principal.mapping.rules",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
)


@dataclass(frozen=True)
class JaasEntry:
    module: str
    flag: str
    options: dict[str, str]


_JAAS_TOKEN = re.compile(
    r'\s*(?:(?P<kv>[A-Za-z0-9_.\-]+)\s*=\s*(?:"(?P<q>(?:\\.|[^"\\])*)"|(?P<u>[^\s;"]+))'
    r"|(?P<semi>;))"
)


def parse_jaas(text: str) -> JaasEntry:
    """One JAAS login module entry, as Kafka's `sasl.jaas.config` holds it."""
    head = re.match(r"\s*([A-Za-z0-9_.$]+)\s+(required|requisite|sufficient|optional)\b", text)
    if head is None:
        raise InvalidConfigError(
            "sasl.jaas.config must look like '<LoginModule class> required key=\"value\" ...;'"
        )
    options: dict[str, str] = {}
    pos = head.end()
    ended = False
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _JAAS_TOKEN.match(text, pos)
        if m is None or ended:
            raise InvalidConfigError(f"sasl.jaas.config: cannot parse near {text[pos:pos + 20]!r}")
        if m.group("semi"):
            ended = True
        else:
            raw = m.group("q")
            value = m.group("u") if raw is None else re.sub(r"\\(.)", r"\1", raw)
            options[m.group("kv")] = value
        pos = m.end()
    if not ended:
        raise InvalidConfigError("sasl.jaas.config must end with ';'")
    return JaasEntry(head.group(1), head.group(2), options)


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """PLAIN's users: Kafka's `user_<name>="<password>"` options."""
    return {k[5:]: v for k, v in entry.options.items() if k.startswith("user_") and k[5:]}


@dataclass(frozen=True)
class ListenerSecurity:
    """Everything one listener requires of a connection (see the module docstring)."""

    name: str
    protocol: str
    ssl: dict[str, str] = field(default_factory=dict)
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = field(default_factory=dict)
    reauth_ms: int = 0
    oauth: OAuthSettings | None = None  # OAUTHBEARER enabled (common/oauth_config.py)

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    def describe(self) -> str:
        """One line for `tidegate serve`: what a client must bring to this listener."""
        parts = []
        if self.tls:
            auth = self.ssl.get("ssl.client.auth", "none") or "none"
            parts.append("TLS" + ("" if auth == "none" else f", client certificate {auth}"))
        if self.sasl:
            parts.append("SASL " + "/".join(self.mechanisms))
        if self.oauth is not None:
            parts.append(self.oauth.describe())
        if self.reauth_ms:
            parts.append(f"re-authentication every {self.reauth_ms} ms")
        return ", ".join(parts) or "no encryption, no authentication"


def prefixed(props: Mapping[str, str], listener: str, key: str) -> str:
    """`listener.name.<listener>.<key>` if set, else `<key>` (Kafka's lookup order)."""
    own = props.get(f"listener.name.{listener.lower()}.{key}")
    if own is not None and own != "":
        return own
    return props.get(key, "") or ""


def listener_security(
    props: Mapping[str, str], name: str, protocol: str
) -> ListenerSecurity:
    """Resolve and check one listener's settings; InvalidConfigError if unusable."""
    ssl: dict[str, str] = {}
    if protocol in TLS_PROTOCOLS:
        ssl = {k: prefixed(props, name, k) for k in SSL_KEYS}
        _check_ssl(name, ssl)
    mechanisms: tuple[str, ...] = ()
    users: dict[str, str] = {}
    if protocol in SASL_PROTOCOLS:
        raw = prefixed(props, name, "sasl.enabled.mechanisms") or "GSSAPI"
        mechanisms = tuple(m.strip().upper() for m in raw.split(",") if m.strip())
        bad = [m for m in mechanisms if m not in SASL_MECHANISMS]
        if bad or not mechanisms:
            raise InvalidConfigError(
                f"listener {name}: SASL mechanism(s) {', '.join(bad) or '(none)'} not "
                f"supported; set listener.name.{name.lower()}.sasl.enabled.mechanisms (or "
                f"sasl.enabled.mechanisms) to some of {', '.join(SASL_MECHANISMS)}"
            )
        if "PLAIN" in mechanisms:
            jaas = prefixed(props, name, "plain.sasl.jaas.config") or props.get(
                "sasl.jaas.config", ""
            )
            if not jaas:
                raise InvalidConfigError(
                    f"listener {name} enables PLAIN but has no users: set "
                    f"listener.name.{name.lower()}.plain.sasl.jaas.config to "
                    f"'org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'user_alice="alice-secret";\''
                )
            users = plain_users(parse_jaas(jaas))
    oauth = None
    if "OAUTHBEARER" in mechanisms:
        jaas = prefixed(props, name, "oauthbearer.sasl.jaas.config")
        oauth = oauth_settings(props, name, parse_jaas(jaas).options if jaas else {})
    reauth = prefixed(props, name, "connections.max.reauth.ms") or "0"
    try:
        reauth_ms = int(reauth)
    except ValueError:
        raise InvalidConfigError(
            f"connections.max.reauth.ms={reauth!r} is not an integer"
        ) from None
    return ListenerSecurity(name, protocol, ssl, mechanisms, users, max(0, reauth_ms), oauth)


def _check_ssl(name: str, ssl: dict[str, str]) -> None:
    pre = f"listener.name.{name.lower()}."
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        value = ssl.get(key, "") or "PEM"
        if value.upper() != "PEM":
            raise InvalidConfigError(
                f"listener {name}: {key}={value} is not supported; Tidegate reads PEM files "
                f"(set {key}=PEM)"
            )
    if not ssl.get("ssl.keystore.location") and not (
        ssl.get("ssl.keystore.certificate.chain") and ssl.get("ssl.keystore.key")
    ):
        raise InvalidConfigError(
            f"listener {name} uses TLS but has no key store: set {pre}ssl.keystore.location "
            f"(a PEM file with the private key and certificate chain) or "
            f"{pre}ssl.keystore.certificate.chain and {pre}ssl.keystore.key"
        )
    auth = (ssl.get("ssl.client.auth") or "none").lower()
    if auth not in ("none", "requested", "required"):
        raise InvalidConfigError(
            f"listener {name}: ssl.client.auth={auth} must be required, requested or none"
        )
    if auth != "none" and not (
        ssl.get("ssl.truststore.location") or ssl.get("ssl.truststore.certificates")
    ):
        raise InvalidConfigError(
            f"listener {name}: ssl.client.auth={auth} needs {pre}ssl.truststore.location "
            "(the PEM certificates of the CAs that sign client certificates)"
        )
    ssl["ssl.client.auth"] = auth


# The broker keys of this module, for common/config.py's BROKER_KEYS (and the docs
# table): (default, type, doc). Each may also be set per listener with the
# `listener.name.<listener>.` prefix.
SECURITY_KEYS: dict[str, tuple[str, str, str]] = {
    "sasl.enabled.mechanisms": (
        "GSSAPI",
        "list",
        "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, "
        "OAUTHBEARER (Kafka's "
        "default GSSAPI is not implemented, so a SASL listener must set this).",
    ),
    "sasl.jaas.config": (
        "",
        "str",
        "JAAS entry for PLAIN users when no listener.name.<l>.plain.sasl.jaas.config is set "
        "(user_<name>=\"<password>\" options).",
    ),
    "connections.max.reauth.ms": (
        "0",
        "int",
        "KIP-368: SASL session lifetime; a connection must re-authenticate before it ends "
        "or is closed at its next request. 0: sessions never expire.",
    ),
    "ssl.keystore.type": ("PEM", "str", "Key store format; only PEM (Kafka: JKS)."),
    "ssl.keystore.location": ("", "str", "PEM file with the private key and certificate chain."),
    "ssl.keystore.certificate.chain": ("", "str", "PEM certificate chain, inline."),
    "ssl.keystore.key": ("", "str", "PEM private key, inline (with the chain above)."),
    "ssl.key.password": ("", "str", "Password of an encrypted private key."),
    "ssl.truststore.type": ("PEM", "str", "Trust store format; only PEM (Kafka: JKS)."),
    "ssl.truststore.location": ("", "str", "PEM file of the CAs client certificates chain to."),
    "ssl.truststore.certificates": ("", "str", "The trusted CA certificates as PEM, inline."),
    "ssl.client.auth": ("none", "str", "Client certificates: required, requested or none."),
    "ssl.principal.mapping.rules": (
        "DEFAULT",
        "str",
        "Certificate subject -> user name: RULE:pattern/replacement/[LU], ..., DEFAULT.",
    ),
    "ssl.enabled.protocols": ("TLSv1.2,TLSv1.3", "list", "TLS versions accepted."),
    "ssl.cipher.suites": ("", "list", "TLS 1.2 cipher suites (OpenSSL names); empty: defaults."),
    **OAUTH_KEYS,
}


def is_listener_key(key: str) -> bool:
    """`listener.name.<l>.<security key>` or `listener.name.<l>.<mech>.sasl.jaas.config`."""
    if not key.startswith("listener.name."):
        return False
    rest = key[len("listener.name."):].partition(".")[2]
    if rest in SECURITY_KEYS or rest.removeprefix("oauthbearer.") in OAUTH_KEYS:
        return True
    mech, _, tail = rest.partition(".")
    return tail == "sasl.jaas.config" and mech.upper() in SASL_MECHANISMS
