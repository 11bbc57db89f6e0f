"""InitProducerId (API key 22): give an idempotent producer its producer id and epoch.

Without a transactional id, as Kafka's TransactionCoordinator: a fresh id from the
broker's `ProducerIdManager` with epoch 0, whatever producer id / epoch the request
carries. KIP-360 lets an idempotent client send its current (id, epoch) to ask for a
bump; for non-transactional producers Kafka "always blindly accepts the request" and
hands out a new id, and so do we (the client starts its sequences at 0 for it).

Choices where Kafka gives no single answer:
  * A transactional id (transactions are not implemented yet) is answered
    COORDINATOR_NOT_AVAILABLE (15, retriable) and logged: it is what the Java broker
    returns while its transaction log is unavailable, and clients (Java, librdkafka)
    react by finding the coordinator again and retrying until their own timeout, so a
    transactional producer fails with a timeout rather than a misleading fatal error
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and will work unchanged once transactions
    exist. An empty transactional id is INVALID_REQUEST, as in Kafka.
  * Reserving a new block of ids fsyncs a file, so `next_id` runs in a worker thread.
    If that write fails the answer is COORDINATOR_LOAD_IN_PROGRESS (14, retriable), the
    error Kafka's producer-id manager gives while no id block is available; running out
    of int64 ids is UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.producer_ids import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from tidegate.protocol.messages import build, view
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext

log = logging.getLogger(__name__)

_WARN_EVERY_S = 60.0  # clients retry the transactional case every ~100 ms: log sparingly
_last_txn_warning = -_WARN_EVERY_S


def _response(ctx: RequestContext, code: ErrorCode, pid: int, epoch: int) -> Any:
    return build(
        ctx.response_class,
        {"throttle_time": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch},
    )


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    global _last_txn_warning
    transactional_id = view(req, "transactional_id")
    if transactional_id == "":
        return _response(ctx, ErrorCode.invalid_request, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    if transactional_id is not None:
        now = time.monotonic()
        if now - _last_txn_warning >= _WARN_EVERY_S:
            _last_txn_warning = now
            log.warning(
                "InitProducerId for transactional.id %r from %s (%s): transactions are not "
                "supported yet; answering COORDINATOR_NOT_AVAILABLE",
                transactional_id,
                ctx.peer,
                ctx.client_id,
            )
        return _response(
            ctx, ErrorCode.coordinator_not_available, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        )
    loop = asyncio.get_running_loop()
    try:
        producer_id = await loop.run_in_executor(None, broker.producer_ids.next_id)
    except KafkaError as e:
        log.error("cannot allocate a producer id: %s", e)
        return _response(ctx, e.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    except OSError as e:
        log.error("cannot reserve a block of producer ids: %s", e)
        return _response(
            ctx, ErrorCode.coordinator_load_in_progress, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        )
    log.debug("producer id %d for %s (%s)", producer_id, ctx.peer, ctx.client_id)
    return _response(ctx, ErrorCode.none, producer_id, 0)
