"""InitProducerId (API key 22): give an idempotent producer its producer id and epoch.

Without a transactional id, as Kafka's TransactionCoordinator: a fresh id from the
broker's `ProducerIdManager` with epoch 0, whatever producer id / epoch the request
carries. KIP-360 lets an idempotent client send its current (id, epoch) to ask for a
bump; for non-transactional producers Kafka "always blindly accepts the request" and
hands out a new id, and so do we (the client starts its sequences at 0 for it).

With a transactional id the transaction coordinator answers (server/txn_coordinator.py,
coordinator/txn/ops.py): it bumps the epoch (fencing older producers with the same id),
aborts or completes what an earlier incarnation left open, and answers
CONCURRENT_TRANSACTIONS while it does, which clients retry. An empty transactional id is
INVALID_REQUEST, as in Kafka.

Choices where Kafka gives no single answer:
  * Reserving a new block of ids fsyncs a file, so `next_id` runs in a worker thread.
    If that write fails the answer is COORDINATOR_LOAD_IN_PROGRESS (14, retriable), the
    error Kafka's producer-id manager gives while no id block is available; running out
    of int64 ids is UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.coordinator.producer_ids import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from tidegate.protocol.messages import build, ms, view
from tidegate.server.authz import AclOperation as Op
from tidegate.server.authz import ResourceType as Res
from tidegate.server.authz import check, check_any, check_cluster
from tidegate.server.broker import Broker
from tidegate.server.context import RequestContext

log = logging.getLogger(__name__)

def _response(ctx: RequestContext, code: ErrorCode, pid: int, epoch: int) -> Any:
    return build(
        ctx.response_class,
        {"throttle_time": 0, "error_code": code, "producer_id": pid, "producer_epoch": epoch},
    )


async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
    transactional_id = view(req, "transactional_id")
    if transactional_id == "":
        return _response(ctx, ErrorCode.invalid_request, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    # ACLs (Kafka): WRITE on the transactional id, and with enable2Pc (KIP-939) also
    # TWO_PHASE_COMMIT on it, which WRITE does not imply (keepPreparedTxn needs no ACL of
    # its own: without enable2Pc the coordinator refuses it); an idempotent producer
    # needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
    if transactional_id is not None:
        tid = str(transactional_id)
        if not check(broker, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, tid) or (
                view(req, "enable2_pc", False)
                and not check(broker, ctx, Op.TWO_PHASE_COMMIT, Res.TRANSACTIONAL_ID, tid)):
            return _response(ctx, ErrorCode.transactional_id_authorization_failed,
                             NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
        return await _transactional(broker, ctx, req, str(transactional_id))
    if broker.authorizer is not None and not (
            check_cluster(broker, ctx, Op.IDEMPOTENT_WRITE, log_denied=False)
            or check_any(broker, ctx, Op.WRITE, Res.TOPIC)):
        check_cluster(broker, ctx, Op.IDEMPOTENT_WRITE)  # logs the denial
        return _response(ctx, ErrorCode.cluster_authorization_failed, NO_PRODUCER_ID,
                         NO_PRODUCER_EPOCH)
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


async def _transactional(broker: Broker, ctx: RequestContext, req: Any,
                         transactional_id: str) -> Any:
    from tidegate.coordinator.txn.messages import InitProducerIdRequest

    loop = asyncio.get_running_loop()
    try:
        # a fresh id in case the coordinator needs one (fsync: off the event loop)
        fresh = await loop.run_in_executor(None, broker.producer_ids.next_id)
    except (KafkaError, OSError) as e:
        log.error("cannot allocate a producer id: %s", e)
        return _response(
            ctx, ErrorCode.coordinator_load_in_progress, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        )
    request = InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout_ms=ms(req.transaction_timeout),
        producer_id=int(view(req, "producer_id", NO_PRODUCER_ID)),
        producer_epoch=int(view(req, "producer_epoch", NO_PRODUCER_EPOCH)),
        enable_2pc=bool(view(req, "enable2_pc", False)),
        keep_prepared_txn=bool(view(req, "keep_prepared_txn", False)),
    )
    try:
        resp = await broker.txn_coordinator.init_producer_id(request, fresh)
    except KafkaError as e:
        return _response(ctx, e.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    code = resp.error
    if code == ErrorCode.producer_fenced and ctx.api_version < 4:
        code = ErrorCode.invalid_producer_epoch  # KIP-588: older clients know only 47
    return build(ctx.response_class, {
        "throttle_time": 0, "error_code": code,
        "producer_id": resp.producer_id, "producer_epoch": resp.producer_epoch,
        "ongoing_txn_producer_id": resp.ongoing_txn_producer_id,
        "ongoing_txn_producer_epoch": resp.ongoing_txn_producer_epoch,
    })
