"""Each listener's security at run time, and each connection's session on it.

`ListenerSecurityRuntime` is built once per listener at start (a bad setting stops the
broker there): its TLS context (server/tls.py, reloaded when the files change), its
certificate-to-principal rules and its SASL mechanisms. `Session` is one connection's
view: who it is (`principal`, `User:ANONYMOUS` until something better is known), and
for SASL listeners (OAUTHBEARER: with the listener's token validator and JWKS cache,
server/oauth_jwks.py) the sans-IO `SaslServer` (protocol/sasl.py) that must reach
AUTHENTICATED before any request other than ApiVersions, SaslHandshake and
SaslAuthenticate is served.

`GuessDelays` slows password guessing: each failed authentication from an address
doubles the delay before that address's next failure is answered (100 ms up to 5 s);
a success, or a minute without failures, forgets it. Only the failing connection
waits; nothing else on the broker does.
"""

from __future__ import annotations

import importlib
import ssl
import time
from collections.abc import Mapping
from typing import Any

from tidegate.common.errors import InvalidConfigError
from tidegate.common.listeners import parse_protocol_map
from tidegate.common.principal import (
    ANONYMOUS,
    map_subject,
    parse_mapping_rules,
    subject_dn,
)
from tidegate.common.security_config import ListenerSecurity, listener_security
from tidegate.protocol.oauthbearer import SignedValidator, UnsecuredValidator, Validator
from tidegate.protocol.sasl import SaslServer
from tidegate.server.oauth_jwks import JwksCache
from tidegate.server.scram_store import ScramUsers
from tidegate.server.tls import ReloadingContext

# APIs a SASL connection may send before it is authenticated (Kafka's rule).
PRE_AUTH_APIS = frozenset({18, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate


class ListenerSecurityRuntime:
    def __init__(self, sec: ListenerSecurity, scram: ScramUsers | None) -> None:
        self.sec = sec
        self.scram = scram
        self.tls: ReloadingContext | None = None
        self.rules = parse_mapping_rules(sec.ssl.get("ssl.principal.mapping.rules", "DEFAULT"))
        # OAUTHBEARER: signed JWTs against the listener's JWKS, or the unsecured mode
        self.jwks: JwksCache | None = None
        self.oauth: Validator | None = None
        if sec.oauth is not None and sec.oauth.signed:
            jwks = self.jwks = JwksCache(sec.oauth)
            self.oauth = SignedValidator(sec.oauth, jwks.key)
            importlib.import_module("jwt")  # now, not in the first login on the event loop
        elif sec.oauth is not None:
            self.oauth = UnsecuredValidator(sec.oauth)
        if any(m.startswith("SCRAM-") for m in sec.mechanisms):
            importlib.import_module("scramp")  # the same (protocol/sasl.py imports it late)
        if sec.tls:
            try:
                self.tls = ReloadingContext(sec.name, sec.ssl)
            except (ssl.SSLError, OSError, ValueError) as e:
                raise InvalidConfigError(
                    f"listener {sec.name}: cannot load its TLS key or trust store: {e}"
                ) from e

    def session(self) -> Session:
        return Session(self)


class Session:
    """One connection's identity and SASL progress (module docstring)."""

    def __init__(self, rt: ListenerSecurityRuntime) -> None:
        self.rt = rt
        self.listener = rt.sec.name
        self.principal = ANONYMOUS
        self.sasl: SaslServer | None = None
        if rt.sec.sasl:
            store = rt.scram
            self.sasl = SaslServer(
                rt.sec.mechanisms,
                rt.sec.plain_users,
                (lambda m, u: store.lookup(m, u)) if store is not None else (lambda m, u: None),
                rt.sec.reauth_ms,
                rt.oauth,
            )
        self.close_after_answer = False  # SASL failed: the error goes out, then close
        self.raw_tokens = False  # after SaslHandshake v0: bare SASL frames (KIP-43)

    def with_peer_certificate(self, cert: Mapping[str, Any] | None) -> None:
        """TLS without SASL: the client certificate's mapped subject is the principal."""
        if self.sasl is not None or not cert or "subject" not in cert:
            return
        dn = subject_dn(cert["subject"])
        self.principal = "User:" + map_subject(self.rt.rules, dn)

    async def before_oauth(self, message: bytes) -> None:
        """An OAUTHBEARER token is about to be checked: have the JWKS's keys at hand."""
        if self.rt.jwks is not None:
            await self.rt.jwks.ensure(message)

    def allows(self, api_key: int, now_ms: int) -> bool:
        if self.sasl is None:
            return True
        if api_key in PRE_AUTH_APIS:
            return True
        return self.sasl.session_valid(now_ms)

    def authenticated(self) -> None:
        assert self.sasl is not None and self.sasl.principal is not None
        self.principal = self.sasl.principal


def build_runtimes(
    props: Mapping[str, str], listener_names: list[str], scram: ScramUsers | None
) -> dict[str, ListenerSecurityRuntime]:
    protocols = parse_protocol_map(props.get("listener.security.protocol.map", ""))
    out = {}
    for name in listener_names:
        out[name] = ListenerSecurityRuntime(
            listener_security(props, name, protocols[name]), scram
        )
    return out


class GuessDelays:
    """Growing delay per source address for failed authentications (module docstring)."""

    FIRST_S = 0.1
    MAX_S = 5.0
    FORGET_S = 60.0

    def __init__(self) -> None:
        self._by_host: dict[str, tuple[float, float]] = {}  # host -> (delay, last failure)

    def failed(self, host: str, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        delay, last = self._by_host.get(host, (0.0, 0.0))
        if now - last > self.FORGET_S:
            delay = 0.0
        delay = min(self.MAX_S, delay * 2 if delay else self.FIRST_S)
        self._by_host[host] = (delay, now)
        if len(self._by_host) > 10000:  # bounded memory under a scan from many sources
            oldest = min(self._by_host, key=lambda h: self._by_host[h][1])
            del self._by_host[oldest]
        return delay

    def succeeded(self, host: str) -> None:
        self._by_host.pop(host, None)
