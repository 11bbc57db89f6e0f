"""The idempotent producer's InitProducerId exchange (for the sender).

`init_producer_id` asks any broker for a producer id and epoch, carrying the current
ones (v3+, KIP-360) so the broker can bump the epoch instead of handing out a new id,
and retries retriable errors every ``retry.backoff.ms`` while the manager still needs an
id and records are queued. A non-retriable error is fatal to the producer
(`IdempotenceManager.set_fatal`). A broker without InitProducerId makes the producer
drop idempotence if it was only the default, else is fatal too.

Threading: runs as a task on the producer's event loop (the sender starts it).
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from tidegate.client.config import ProducerConfig
from tidegate.client.net import NetworkClient
from tidegate.client.producer.accumulator import RecordAccumulator
from tidegate.client.producer.completion import Completion
from tidegate.client.producer.idempotence import FatalProducerError, IdempotenceManager
from tidegate.common.errors import KafkaError, error_for_code

__all__ = ["INIT_PRODUCER_ID", "init_producer_id"]

log = logging.getLogger("tidegate.client.producer")

INIT_PRODUCER_ID = 22
_INIT_PRODUCER_ID_VERSIONS = (0, 5)  # v3+ carry the current id/epoch (KIP-360)


async def init_producer_id(config: ProducerConfig, net: NetworkClient,
                           acc: RecordAccumulator[Completion],
                           idem: IdempotenceManager) -> bool:
    """Get a producer id (and epoch) for the idempotent producer; retry retriable
    failures until it works, the producer stops, or a fatal error. False: the broker
    cannot run an idempotent producer and idempotence was not asked for explicitly, so
    the caller produces without it."""
    backoff = config.retry_backoff_ms / 1000
    while idem.needs_producer_id and acc.has_unsent():
        try:
            conn = await net.any_connection()
            theirs = conn.broker_versions.get(INIT_PRODUCER_ID)
            lo, hi = _INIT_PRODUCER_ID_VERSIONS
            if theirs is None or theirs[1] < lo or theirs[0] > hi:
                if idem.producer_id < 0 and not config.idempotence_explicit:
                    log.warning(
                        "broker %s:%s does not support InitProducerId: producing "
                        "without idempotence (set enable.idempotence=false to say "
                        "so, or true to make this an error)", conn.host, conn.port)
                    return False
                idem.set_fatal(FatalProducerError(
                    f"broker {conn.host}:{conn.port} does not support "
                    "InitProducerId, so it cannot run an idempotent producer: set "
                    "enable.idempotence=false", code=ErrorCode.unsupported_version))
                return True
            resp = await conn.request(INIT_PRODUCER_ID, {
                "transactional_id": None,
                "transaction_timeout": 60_000,
                "producer_id": idem.producer_id,
                "producer_epoch": idem.epoch,
            }, version=min(hi, theirs[1]))
        except KafkaError as e:
            if not e.retriable:
                idem.set_fatal(FatalProducerError(f"InitProducerId failed: {e}",
                                                  code=e.code))
                return True
            log.debug("InitProducerId failed, retrying: %s", e)
            await asyncio.sleep(backoff)
            continue
        except Exception as e:  # a bug: fail loudly rather than hang every send
            log.exception("InitProducerId failed unexpectedly")
            idem.set_fatal(FatalProducerError(f"InitProducerId failed: {e!r}"))
            return True
        code = resp.error_code
        if code == ErrorCode.none:
            reason = idem.reset_reason
            idem.set_producer_id(int(resp.producer_id), int(resp.producer_epoch),
                                 acc.queued_batches())
            log.log(logging.INFO if reason else logging.DEBUG,
                    "idempotent producer id %d epoch %d%s", idem.producer_id,
                    idem.epoch, f" (reset: {reason})" if reason else "")
            return True
        err = error_for_code(code.value, f"InitProducerId failed: {code.name.upper()}")
        if not err.retriable:
            idem.set_fatal(FatalProducerError(str(err), code=code))
            return True
        await asyncio.sleep(backoff)
    return True
