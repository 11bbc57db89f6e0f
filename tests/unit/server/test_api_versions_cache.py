"""ApiVersions answers are built and encoded once (server/handlers/api_versions.py,
protocol/messages.py's `remember_encoding`): the cached answer must stay what a fresh
build would say — the APIs registered now, the transaction.version level now."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tidegate.common.config import BrokerConfig
from tidegate.protocol.messages import _writer, encode
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext
from tidegate.server.handlers import api_versions


def _ask(broker: Broker, version: int = 3) -> Any:
    ctx = RequestContext(18, version, 1, "t", "test")
    return asyncio.run(api_versions.handle(broker, ctx, None))


def _kio_bytes(entity: Any) -> bytes:
    import io

    out = io.BytesIO()
    _writer(type(entity))(out, entity)
    return out.getvalue()


def test_the_cached_answer_follows_registrations_and_the_level(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path), "node.id": "0"}))
    try:
        first = _ask(broker)
        assert _ask(broker) is first  # cached
        assert encode(first) == _kio_bytes(first)  # the remembered bytes are kio's
        keys = {k.api_key: k for k in first.api_keys}
        assert 72 not in keys or keys[72].max_version == 0

        async def handler(_b: Broker, _c: RequestContext, _r: Any) -> Any:
            return None

        # an API registered after the first answer (metrics/wiring.py does this)
        broker.dispatcher.register(33, handler, 0, 1)
        second = _ask(broker)
        assert second is not first
        assert {k.api_key: (k.min_version, k.max_version) for k in second.api_keys}[33] \
            == (0, 1)
        assert encode(second) == _kio_bytes(second)

        # another transaction.version level: another answer
        config = broker.txn_coordinator.config
        old = config.transaction_version
        object.__setattr__(config, "transaction_version", 1 if old != 1 else 2)
        third = _ask(broker)
        finalized = {f.name: f.max_version_level for f in third.finalized_features}
        assert finalized["transaction.version"] == config.transaction_version
        # every version of the request gets its own answer
        assert type(_ask(broker, 0)) is not type(third)
    finally:
        broker.close()
