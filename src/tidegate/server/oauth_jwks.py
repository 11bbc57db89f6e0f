"""The JWKS an OAUTHBEARER listener checks signatures with: fetched, cached, refreshed.

KIP-768's broker fetches `sasl.oauthbearer.jwks.endpoint.url` and keeps the keys, fetching
again every `sasl.oauthbearer.jwks.endpoint.refresh.ms` and sooner when a token names a
`kid` it does not know (an identity provider rotating its keys). So does this cache, on
demand rather than on a timer: the first OAUTHBEARER authentication on a listener fetches,
a stale set is fetched again before the next token is checked, and an unknown `kid`
triggers a fetch at most once a second. A failed fetch keeps the old keys, is logged once
per failure streak, and is retried after `...retry.backoff.ms` doubling up to
`...retry.backoff.max.ms`, so an unreachable identity provider cannot stall every
connection. The fetch (urllib: `https:`, `http:`, `file:`) runs in a worker thread.

The sans-IO validator (protocol/oauthbearer.py) reads keys through `key(kid, alg)`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from typing import TYPE_CHECKING, Any

from tidegate.common.oauth_config import OAuthSettings
from tidegate.protocol.oauthbearer import MalformedResponse, parse_client_response

if TYPE_CHECKING:  # PyJWT is imported where it is used: it costs every broker start
    import jwt

log = logging.getLogger(__name__)

UNKNOWN_KID_MIN_INTERVAL_S = 1.0
MAX_JWKS_BYTES = 1 << 20  # a JWKS is a few KB; refuse to buffer anything huge
_FAMILY = {"RS": "RSA", "PS": "RSA", "ES": "EC"}


class JwksCache:
    def __init__(self, settings: OAuthSettings) -> None:
        self.url = settings.jwks_url
        self.refresh_s = settings.refresh_ms / 1000
        self.backoff_s = settings.retry_backoff_ms / 1000
        self.backoff_max_s = settings.retry_backoff_max_ms / 1000
        self._keys: list[tuple[dict[str, Any], jwt.PyJWK]] = []
        self._fetched_at: float | None = None  # monotonic time of the last good fetch
        self._last_try = float("-inf")
        self._next_try = 0.0  # monotonic: no fetch before this after a failure
        self._failures = 0
        self._lock = asyncio.Lock()

    def key(self, kid: str | None, alg: str) -> Any:
        """The key that should have signed a token with this header, or None."""
        family = _FAMILY.get(alg[:2])
        for raw, k in self._keys:
            if kid is not None and k.key_id != kid:
                continue
            if raw.get("kty") != family or raw.get("use", "sig") != "sig":
                continue
            if raw.get("alg") not in (None, alg):
                continue
            return k.key
        return None

    def _kid_known(self, kid: str) -> bool:
        return any(k.key_id == kid for _, k in self._keys)

    async def ensure(self, message: bytes) -> None:
        """Before a token is checked: fetch if never fetched, stale, or its kid unknown."""
        import jwt

        now = time.monotonic()
        if self._fetched_at is None or now - self._fetched_at >= self.refresh_s:
            await self._refresh()
            return
        try:
            token, _ = parse_client_response(message)
            kid = jwt.get_unverified_header(token).get("kid")
        except (MalformedResponse, jwt.PyJWTError):
            return  # the validator refuses it with the reason
        if isinstance(kid, str) and not self._kid_known(kid) and (
            now - self._last_try >= UNKNOWN_KID_MIN_INTERVAL_S
        ):
            await self._refresh()

    async def _refresh(self) -> None:
        started = time.monotonic()
        async with self._lock:
            if self._last_try >= started or time.monotonic() < self._next_try:
                return  # fetched while we waited, or backing off after a failure
            self._last_try = time.monotonic()
            try:
                keys = await asyncio.to_thread(self._fetch)
            except Exception as e:  # network, HTTP, JSON, or no usable key
                self._failures += 1
                wait = min(self.backoff_max_s, self.backoff_s * 2 ** (self._failures - 1))
                self._next_try = time.monotonic() + wait
                if self._failures == 1:
                    log.warning("cannot fetch the JWKS from %s (keeping %d cached keys; "
                                "retrying with backoff): %s", self.url, len(self._keys), e)
                return
            if self._failures:
                log.info("JWKS fetched again from %s after %d failures", self.url,
                         self._failures)
            self._failures = 0
            self._keys = keys
            self._fetched_at = time.monotonic()

    def _fetch(self) -> list[tuple[dict[str, Any], jwt.PyJWK]]:
        import jwt

        with urllib.request.urlopen(self.url, timeout=10) as resp:  # scheme checked at config
            body = resp.read(MAX_JWKS_BYTES + 1)
        if len(body) > MAX_JWKS_BYTES:
            raise ValueError("JWKS larger than 1 MB")
        doc = json.loads(body)
        out = []
        for raw in doc.get("keys", []) if isinstance(doc, dict) else []:
            try:
                out.append((raw, jwt.PyJWK.from_dict(raw)))
            except jwt.PyJWTError as e:  # one unusable key (e.g. an unknown kty) is skipped
                log.debug("JWKS key %s skipped: %s", raw.get("kid"), e)
        if not out:
            raise ValueError("the JWKS has no usable keys")
        log.info("JWKS from %s: %d keys (%s)", self.url, len(out),
                 ", ".join(str(k.key_id) for _, k in out))
        return out
