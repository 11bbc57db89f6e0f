"""The client side of a secured connection: TLS context, SASL login, from Kafka's settings.

`ClientSecurity.from_config` reads a client config's ``security.protocol``, ``ssl.*``
and ``sasl.*`` keys once, when the client is made, so a missing file or a missing
password is a `ConfigError` before anything connects. It accepts both librdkafka's
names (``ssl.ca.location``, ``ssl.certificate.location`` + ``ssl.key.location``,
``sasl.mechanisms``, ``sasl.username`` / ``sasl.password``) and the Java client's
(``ssl.truststore.location``, ``ssl.keystore.location`` holding key and chain in one PEM
file, ``sasl.mechanism``, ``sasl.jaas.config`` with a PlainLoginModule or
ScramLoginModule line).

`SaslClient` is the sans-IO mechanism: tokens in, tokens out. PLAIN is one token;
SCRAM-SHA-256/512 is client-first, server-first, client-final, server-final, run by
the `scramp` library (the same one the broker uses), which also checks the server's
signature, so a broker that does not know the password cannot pass itself off; it is
imported on the first SCRAM login (it costs ~90 ms). The whole module is imported only
by a client whose ``security.protocol`` is not PLAINTEXT (`net.NetworkClient`).
`AuthenticationError` and `SslHandshakeError` live in client/errors.py (re-exported
here) so that catching them does not need this module.
`sasl_login` drives it over a `BrokerConnection` with SaslHandshake v1 and
SaslAuthenticate v2, after ApiVersions, as Kafka's clients do.

Re-authentication (KIP-368): the broker says how long the session lasts
(``session_lifetime_ms``). Rather than re-authenticate in the middle of pipelined
requests, the client retires the connection a little before that (see
`net.NetworkClient`): new requests go to a fresh, freshly authenticated connection and
the old one closes once its in-flight requests are answered.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidegate.client.config import ClientConfig
from tidegate.client.errors import AuthenticationError, ConfigError, SslHandshakeError
from tidegate.common.errors import InvalidConfigError
from tidegate.common.security_config import SASL_MECHANISMS, parse_jaas

if TYPE_CHECKING:
    from tidegate.client.net import BrokerConnection

__all__ = [
    "AuthenticationError",
    "ClientSecurity",
    "SaslClient",
    "SaslCredentials",
    "SslHandshakeError",
    "sasl_login",
]

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
_TLS = ("SSL", "SASL_SSL")
_SASL = ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"SaslCredentials({self.mechanism}, {self.username!r})"


def _readable(key: str, path: str | None) -> str | None:
    if path is not None and not os.access(path, os.R_OK):
        raise ConfigError(f"{key}={path!r}: no such readable file")
    return path


def _tls_context(cfg: ClientConfig) -> ssl.SSLContext:
    ca = _readable("ssl.ca.location", cfg.ssl_ca_location) or \
        _readable("ssl.truststore.location", cfg.ssl_truststore_location)
    # Without a CA file the system's trusted roots are used, as librdkafka does.
    ctx = ssl.create_default_context(cafile=ca)
    cert = _readable("ssl.certificate.location", cfg.ssl_certificate_location) or \
        _readable("ssl.keystore.location", cfg.ssl_keystore_location)
    key = _readable("ssl.key.location", cfg.ssl_key_location)
    if key is not None and cert is None:
        raise ConfigError("ssl.key.location needs ssl.certificate.location (the client "
                          "certificate that goes with the key)")
    if cert is not None:
        try:
            ctx.load_cert_chain(cert, key, cfg.ssl_key_password)
        except (ssl.SSLError, OSError) as e:
            raise ConfigError(f"cannot load the client certificate {cert!r} "
                              f"(key {key or cert!r}): {e}; check ssl.key.password if "
                              "the key is encrypted") from e
    if cfg.ssl_endpoint_identification_algorithm == "none":
        ctx.check_hostname = False  # the chain is still verified against the CA
    return ctx


def _sasl_credentials(cfg: ClientConfig) -> SaslCredentials:
    mechanism = cfg.sasl_mechanism or cfg.sasl_mechanisms
    user, password = cfg.sasl_username, cfg.sasl_password
    if cfg.sasl_jaas_config:
        try:
            entry = parse_jaas(cfg.sasl_jaas_config)
        except InvalidConfigError as e:
            raise ConfigError(str(e)) from None
        user = user if user is not None else entry.options.get("username")
        password = password if password is not None else entry.options.get("password")
        if mechanism is None and entry.module.endswith("PlainLoginModule"):
            mechanism = "PLAIN"
    if mechanism is None:
        raise ConfigError(f"security.protocol={cfg.security_protocol} needs sasl.mechanism "
                          f"(one of {', '.join(SASL_MECHANISMS)}; GSSAPI is not supported)")
    if not user or password is None:
        raise ConfigError(f"SASL {mechanism} needs sasl.username and sasl.password (or a "
                          "sasl.jaas.config with username and password)")
    return SaslCredentials(mechanism, user, password)


@dataclass(frozen=True)
class ClientSecurity:
    """What a connection needs beyond TCP: a TLS context and/or SASL credentials."""

    protocol: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None

    @classmethod
    def from_config(cls, cfg: ClientConfig) -> ClientSecurity:
        proto = cfg.security_protocol
        return cls(proto, _tls_context(cfg) if proto in _TLS else None,
                   _sasl_credentials(cfg) if proto in _SASL else None)


class SaslClient:
    """One SASL exchange, sans-IO: `first()` then `step(server_token)` until done."""

    def __init__(self, creds: SaslCredentials) -> None:
        self.creds = creds
        self.done = False
        self._scram: Any = None  # a scramp ScramClient (the library is untyped)
        self._step = 0

    def first(self) -> bytes:
        c = self.creds
        if c.mechanism == "PLAIN":
            self.done = True  # the broker's answer is the whole verdict
            return b"\0" + c.username.encode() + b"\0" + c.password.encode()
        import scramp  # type: ignore[import-untyped]  # ~90 ms: only for SCRAM logins

        self._scram = scramp.ScramClient([c.mechanism], c.username, c.password)
        return str(self._scram.get_client_first()).encode()

    def step(self, server_token: bytes) -> bytes | None:
        """Feed the broker's token; the next one to send, or None when finished.
        AuthenticationError if the broker's SCRAM messages do not check out."""
        import scramp  # already imported by `first()`

        try:
            if self._step == 0:
                self._step = 1
                self._scram.set_server_first(server_token.decode())
                return str(self._scram.get_client_final()).encode()
            self._scram.set_server_final(server_token.decode())
        except (scramp.ScramException, UnicodeDecodeError, ValueError) as e:
            raise AuthenticationError(
                f"SASL authentication failed with mechanism {self.creds.mechanism}: the "
                f"broker's SCRAM answer does not check out ({e})") from e
        self.done = True
        return None


async def sasl_login(conn: BrokerConnection, creds: SaslCredentials) -> int:
    """Authenticate `conn`; return the session lifetime in ms (0: no limit).
    AuthenticationError with the broker's message if refused."""
    where = f"{conn.host}:{conn.port}"
    resp = await conn.request(SASL_HANDSHAKE, {"mechanism": creds.mechanism}, version=1)
    if resp.error_code != ErrorCode.none:
        offered = ", ".join(resp.mechanisms) or "none"
        raise AuthenticationError(
            f"SASL authentication failed: broker {where} does not accept mechanism "
            f"{creds.mechanism} (it offers {offered}); set sasl.mechanism accordingly")
    client = SaslClient(creds)
    token: bytes | None = client.first()
    lifetime = 0
    while token is not None:
        resp = await conn.request(SASL_AUTHENTICATE, {"auth_bytes": token}, version=2)
        if resp.error_code != ErrorCode.none:
            raise AuthenticationError(
                f"SASL authentication failed with mechanism {creds.mechanism} for user "
                f"{creds.username!r} at {where}: {resp.error_message or resp.error_code.name}")
        lifetime = int(resp.session_lifetime.total_seconds() * 1000)
        token = None if client.done else client.step(bytes(resp.auth_bytes))
    return lifetime


def describe_tls_failure(e: ssl.SSLError, where: str) -> str:
    """One line naming the certificate problem and the setting that fixes it."""
    reason = getattr(e, "verify_message", None) or getattr(e, "reason", None) or str(e)
    hint = ""
    if isinstance(e, ssl.SSLCertVerificationError):
        if "hostname" in str(reason).lower() or "IP address mismatch" in str(reason):
            hint = ("; the broker's certificate does not name this host (fix the "
                    "certificate or set ssl.endpoint.identification.algorithm=none)")
        else:
            hint = "; is the broker's CA in ssl.ca.location?"
    return f"TLS handshake with {where} failed: certificate verify failed: {reason}{hint}" \
        if isinstance(e, ssl.SSLCertVerificationError) \
        else f"TLS handshake with {where} failed: {reason} (is this port a TLS listener?)"
