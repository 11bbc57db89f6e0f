"""`controller_mutation_rate` (KIP-599): partitions created or deleted per second.

CreateTopics, CreatePartitions and DeleteTopics count one mutation per partition they
create or delete (validate_only requests count nothing). From CreateTopics v6,
CreatePartitions v3 and DeleteTopics v5 on (the versions whose clients know
THROTTLING_QUOTA_EXCEEDED) the quota is *strict*, as Kafka's: before each topic of the
request, in order, a client already over its quota has that topic refused with
THROTTLING_QUOTA_EXCEEDED, else the topic's partitions are counted (so the topic that
takes a client over is still accepted); only the accepted topics reach the handler, the
partitions of those it then fails are given back, and the response carries the time to
wait only if a topic was refused. Older versions are *permissive*: never refused, their
mutations counted once done and the client throttled for any excess.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tidegate.common.errors import ErrorCode
from tidegate.protocol.messages import build, view
from tidegate.server.quotas.entities import CONTROLLER_MUTATION_RATE

if TYPE_CHECKING:
    from tidegate.server.broker import Broker
    from tidegate.server.context import RequestContext
    from tidegate.server.quotas.throttle import Call

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
APIS = frozenset({CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS})
KEY = CONTROLLER_MUTATION_RATE
# the first version of each API whose clients understand THROTTLING_QUOTA_EXCEEDED
STRICT_FROM = {CREATE_TOPICS: 6, DELETE_TOPICS: 5, CREATE_PARTITIONS: 3}
MESSAGE = "The throttling quota has been exceeded."


async def run(broker: Broker, call: Call, ctx: RequestContext, request: Any, user: str,
              client: str) -> Any:
    from tidegate.server.quotas.throttle import with_throttle

    mgr, api = broker.quotas, ctx.api_key
    if mgr.match(KEY, user, client) is None or bool(view(request, "validate_only", False)):
        return await call(ctx, request)
    items = _items(api, request)
    if not items:
        return await call(ctx, request)
    counted = {_key(i): _permits(broker, api, i) for i in items}  # before any change
    # permissive: count what was done. (A request naming a topic twice goes this way
    # too: the handler refuses the duplicates, and splitting it could not keep them.)
    if ctx.api_version < STRICT_FROM[api] or len(counted) < len(items):
        response = await call(ctx, request)
        if response is None:
            return None
        done = sum(_counted(counted, r) for r in _results(api, response)
                   if r.error_code == ErrorCode.none)
        throttle = mgr.record_mutations(user, client, done, broker.clock.now_ms())
        return with_throttle(response, throttle) if throttle > 0 else response
    accepted, refused, throttle = [], [], 0
    for item in items:
        now = broker.clock.now_ms()
        wait = mgr.mutation_throttle(user, client, now)
        if wait > 0:
            refused.append(item)
            throttle = max(throttle, wait)
        else:
            mgr.record_mutations(user, client, counted[_key(item)], now)
            accepted.append(item)
    results: list[Any] = []
    if accepted:
        response = await call(ctx, _with_items(api, request, accepted))
        if response is None:
            return None
        results = list(_results(api, response))
        failed = sum(_counted(counted, r) for r in results
                     if r.error_code != ErrorCode.none)
        mgr.record_mutations(user, client, -failed, broker.clock.now_ms())  # given back
    if not refused:
        return response
    by_key = {k: r for r in results for k in _result_keys(r)}
    merged = [by_key.get(_key(i)) or _refusal(api, i) for i in items]
    return build(ctx.response_class, {"throttle_time": throttle, _RESULTS[api]: merged})


_RESULTS = {CREATE_TOPICS: "topics", CREATE_PARTITIONS: "results", DELETE_TOPICS: "responses"}


def _items(api: int, request: Any) -> list[Any]:
    """The request's topics, in order: entities, or names for DeleteTopics before v6."""
    names = view(request, "topic_names") if api == DELETE_TOPICS else None
    return list(names) if names is not None else list(request.topics)


def _with_items(api: int, request: Any, items: list[Any]) -> Any:
    if api == DELETE_TOPICS and view(request, "topic_names") is not None:
        return dataclasses.replace(request, topic_names=tuple(items))
    return dataclasses.replace(request, topics=tuple(items))


def _key(item: Any) -> str:
    if isinstance(item, str):
        return item
    name = view(item, "name")
    return str(name) if name else str(view(item, "topic_id"))


def _result_keys(result: Any) -> list[str]:
    """What may name a result's topic in the request: its name, its id (DeleteTopics
    v6 deletes by either)."""
    keys = [str(view(result, "name") or "")]
    topic_id = view(result, "topic_id")
    if topic_id is not None:
        keys.append(str(topic_id))
    return keys


def _counted(counted: dict[str, int], result: Any) -> int:
    return next((counted[k] for k in _result_keys(result) if k in counted), 0)


def _results(api: int, response: Any) -> Sequence[Any]:
    return tuple(getattr(response, _RESULTS[api]))


def _permits(broker: Broker, api: int, item: Any) -> int:
    """The partitions this topic of the request would create or delete."""
    if api == CREATE_TOPICS:
        n = int(item.num_partitions)
        if n >= 0:
            return n
        return len(item.assignments) if item.assignments else broker.default_partitions()
    if isinstance(item, str):
        topic = broker.metadata.topic(item)
    else:
        name = view(item, "name")
        topic = broker.metadata.topic(name) if name else None
        if topic is None and view(item, "topic_id") is not None:
            topic = broker.metadata.topic_by_id(item.topic_id)
    current = len(topic.partitions) if topic is not None else 0
    if api == CREATE_PARTITIONS:
        return max(0, int(item.count) - current)
    return current


def _refusal(api: int, item: Any) -> dict[str, Any]:
    err = {"error_code": ErrorCode.throttling_quota_exceeded, "error_message": MESSAGE}
    if api == CREATE_TOPICS:
        return {"name": item.name, "num_partitions": -1, "replication_factor": -1, **err}
    if api == CREATE_PARTITIONS:
        return {"name": item.name, **err}
    if isinstance(item, str):
        return {"name": item, "topic_id": None, **err}
    return {"name": item.name, "topic_id": item.topic_id, **err}
