"""The JWKS cache of an OAUTHBEARER listener, against a `file:` URL: first fetch on demand,
a rotated-in key picked up when a token names its kid, old keys kept (and the fetch
backed off) when the JWKS cannot be read."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from tidegate.common.oauth_config import OAuthSettings
from tidegate.server import oauth_jwks
from tidegate.server.oauth_jwks import JwksCache


def _jwk(kid: str) -> tuple[dict[str, str], ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.get_algorithm_by_name("ES256").to_jwk(key.public_key()))
    return {**jwk, "kid": kid, "use": "sig"}, key


def _message(kid: str, key: ec.EllipticCurvePrivateKey) -> bytes:
    tok = jwt.encode({"sub": "a"}, key, algorithm="ES256", headers={"kid": kid})
    return f"n,,\x01auth=Bearer {tok}\x01\x01".encode()


def test_fetch_on_demand_and_rotation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oauth_jwks, "UNKNOWN_KID_MIN_INTERVAL_S", 0.0)
    path = tmp_path / "jwks.json"
    k1, key1 = _jwk("k1")
    path.write_text(json.dumps({"keys": [k1]}))
    cache = JwksCache(OAuthSettings(jwks_url=path.as_uri()))

    async def run() -> None:
        assert cache.key("k1", "ES256") is None  # nothing fetched yet
        await cache.ensure(_message("k1", key1))
        assert cache.key("k1", "ES256") is not None
        assert cache.key("k1", "RS256") is None  # an EC key never verifies RS256
        k2, key2 = _jwk("k2")
        path.write_text(json.dumps({"keys": [k1, k2]}))
        await cache.ensure(_message("k1", key1))  # known kid, fresh set: no fetch
        assert cache.key("k2", "ES256") is None
        await cache.ensure(_message("k2", key2))  # unknown kid: fetched again
        assert cache.key("k2", "ES256") is not None

    asyncio.run(run())


def test_failed_fetch_keeps_old_keys_and_backs_off(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    k1, key1 = _jwk("k1")
    path.write_text(json.dumps({"keys": [k1]}))
    cache = JwksCache(OAuthSettings(jwks_url=path.as_uri(), refresh_ms=0,
                                    retry_backoff_ms=60000))

    async def run() -> None:
        await cache.ensure(_message("k1", key1))
        path.write_text("not json")
        await cache.ensure(_message("k1", key1))  # stale (refresh 0): fetch fails
        assert cache.key("k1", "ES256") is not None
        path.write_text(json.dumps({"keys": []}))
        await cache.ensure(_message("k1", key1))  # backing off: not even tried
        assert cache._failures == 1
        assert cache.key("k1", "ES256") is not None

    asyncio.run(run())
