"""A listener's SASL/OAUTHBEARER settings, with Kafka's names (KIP-255, KIP-768).

Two ways to validate a token, as Kafka has them:

- **signed JWTs** (KIP-768, Kafka's `OAuthBearerValidatorCallbackHandler`): the listener
  sets `sasl.oauthbearer.jwks.endpoint.url` (an `https:`/`http:` URL or a `file:` URL
  of a JWKS document); the token's signature is checked against those keys and its
  `exp`, `iat`, subject, audience and issuer against the `sasl.oauthbearer.*` settings.
- **unsecured JWS** for development (Kafka's `OAuthBearerUnsecuredValidatorCallbackHandler`):
  `alg: none` tokens, trusted as they come. Kafka falls back to it silently; Tidegate
  serves it only when `listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`
  names that class, so a listener is never open to forged tokens by omission. Its
  options are Kafka's JAAS options (`unsecuredValidatorPrincipalClaimName`, ...).

Kafka's lookup order for each key: `listener.name.<l>.oauthbearer.<key>`, then
`listener.name.<l>.<key>`, then `<key>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tidegate.common.errors import InvalidConfigError

UNSECURED_HANDLER = "OAuthBearerUnsecuredValidatorCallbackHandler"
SIGNED_HANDLER = "OAuthBearerValidatorCallbackHandler"


@dataclass(frozen=True)
class OAuthSettings:
    """What a listener checks in an OAUTHBEARER token (module docstring)."""

    jwks_url: str = ""  # empty: unsecured mode
    refresh_ms: int = 3600000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 10000
    clock_skew_s: int = 30
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str = ""
    sub_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()  # unsecured mode only (Kafka's option)

    @property
    def signed(self) -> bool:
        return bool(self.jwks_url)

    def describe(self) -> str:
        if not self.signed:
            return "OAUTHBEARER unsecured (development only)"
        return f"OAUTHBEARER signed JWTs, keys from {self.jwks_url}"


def _lookup(props: Mapping[str, str], listener: str, key: str) -> str:
    pre = f"listener.name.{listener.lower()}."
    for k in (f"{pre}oauthbearer.{key}", f"{pre}{key}", key):
        value = props.get(k)
        if value is not None and value != "":
            return value
    return ""


def _int(props: Mapping[str, str], listener: str, key: str, default: int) -> int:
    raw = _lookup(props, listener, key)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidConfigError(f"{key}={raw!r} is not an integer") from None


def oauth_settings(
    props: Mapping[str, str], listener: str, jaas_options: Mapping[str, str]
) -> OAuthSettings:
    """Resolve and check one listener's OAUTHBEARER settings (InvalidConfigError)."""
    handler = _lookup(props, listener, "sasl.server.callback.handler.class")
    url = _lookup(props, listener, "sasl.oauthbearer.jwks.endpoint.url")
    skew_s = _int(props, listener, "sasl.oauthbearer.clock.skew.seconds", 30)
    if handler.endswith(UNSECURED_HANDLER):
        skew_ms = jaas_options.get("unsecuredValidatorAllowableClockSkewMs", "0") or "0"
        try:
            skew_s = max(0, int(skew_ms)) // 1000
        except ValueError:
            raise InvalidConfigError(
                f"unsecuredValidatorAllowableClockSkewMs={skew_ms!r} is not an integer"
            ) from None
        scope = jaas_options.get("unsecuredValidatorRequiredScope", "")
        return OAuthSettings(
            sub_claim=jaas_options.get("unsecuredValidatorPrincipalClaimName") or "sub",
            scope_claim=jaas_options.get("unsecuredValidatorScopeClaimName") or "scope",
            required_scope=tuple(s for s in scope.split() if s),
            clock_skew_s=skew_s,
        )
    if not url:
        raise InvalidConfigError(
            f"listener {listener} enables OAUTHBEARER but says nothing about how to check "
            f"tokens: set sasl.oauthbearer.jwks.endpoint.url (signed JWTs, KIP-768), or for "
            f"development listener.name.{listener.lower()}.oauthbearer.sasl.server.callback."
            f"handler.class=org.apache.kafka.common.security.oauthbearer.internals.unsecured."
            f"{UNSECURED_HANDLER}"
        )
    if handler and not handler.endswith(SIGNED_HANDLER):
        raise InvalidConfigError(
            f"listener {listener}: sasl.server.callback.handler.class={handler} is not one "
            f"Tidegate implements ({SIGNED_HANDLER} or {UNSECURED_HANDLER})"
        )
    if not url.startswith(("https://", "http://", "file:")):
        raise InvalidConfigError(
            f"sasl.oauthbearer.jwks.endpoint.url={url!r} must be an https:, http: or file: URL"
        )
    audience = _lookup(props, listener, "sasl.oauthbearer.expected.audience")
    return OAuthSettings(
        jwks_url=url,
        refresh_ms=_int(props, listener, "sasl.oauthbearer.jwks.endpoint.refresh.ms", 3600000),
        retry_backoff_ms=_int(
            props, listener, "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", 100),
        retry_backoff_max_ms=_int(
            props, listener, "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", 10000),
        expected_audience=tuple(a.strip() for a in audience.split(",") if a.strip()),
        expected_issuer=_lookup(props, listener, "sasl.oauthbearer.expected.issuer"),
        sub_claim=_lookup(props, listener, "sasl.oauthbearer.sub.claim.name") or "sub",
        scope_claim=_lookup(props, listener, "sasl.oauthbearer.scope.claim.name") or "scope",
        clock_skew_s=skew_s,
    )


# Broker keys (common/config.py's BROKER_KEYS, through security_config.SECURITY_KEYS).
OAUTH_KEYS: dict[str, tuple[str, str, str]] = {
    "sasl.oauthbearer.jwks.endpoint.url": (
        "", "str",
        "OAUTHBEARER (KIP-768): https:, http: or file: URL of the JWKS whose keys sign "
        "tokens. Unset: OAUTHBEARER needs the unsecured handler named explicitly."),
    "sasl.oauthbearer.jwks.endpoint.refresh.ms": (
        "3600000", "int", "How often the JWKS is fetched again (also on an unknown kid)."),
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": (
        "100", "int", "First wait before retrying a failed JWKS fetch (doubles)."),
    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": (
        "10000", "int", "Longest wait between JWKS fetch retries."),
    "sasl.oauthbearer.clock.skew.seconds": (
        "30", "int", "Leeway for exp, iat and nbf against the broker's clock."),
    "sasl.oauthbearer.expected.audience": (
        "", "list", "Audiences one of which a token's aud must name; empty: not checked."),
    "sasl.oauthbearer.expected.issuer": (
        "", "str", "The iss a token must carry; empty: not checked."),
    "sasl.oauthbearer.sub.claim.name": (
        "sub", "str", "Claim holding the principal name (User:<value>)."),
    "sasl.oauthbearer.scope.claim.name": (
        "scope", "str", "Claim holding the token's scopes."),
    "sasl.server.callback.handler.class": (
        "", "str",
        "Per listener and mechanism (listener.name.<l>.oauthbearer.sasl.server.callback."
        "handler.class): Kafka's OAuthBearerValidatorCallbackHandler (signed JWTs) or "
        "OAuthBearerUnsecuredValidatorCallbackHandler (development)."),
}
