"""The listener's quota hook: measure a request, throttle its client, mute its connection.

server/listener.py calls `run_throttled` instead of the handler whenever some quota is
configured (`broker.quotas.active`; otherwise nothing here runs). As Kafka does since
KIP-219, a client over its quota is answered at once, with the time it must wait in
the response's `throttle_time_ms`, and its connection is muted for that long: the
connection's next request starts only when the mute is over (`Mute`). Modern clients
also wait by themselves on seeing the field; older ones are held by the mute alone.

What is measured, as Kafka measures it:
- `producer_byte_rate`: the record bytes of a Produce request, counted before its
  handler runs, so the mute already holds the connection's next pipelined Produce;
- `consumer_byte_rate`: the record bytes of a Fetch response (replica fetches of
  followers are exempt). A response that breaks the quota is replaced by an empty one
  with the throttle time and its bytes are not counted (Kafka's "throttled response");
  a consumer's fetch size is capped at what the quota allows in (num - 1) windows so a
  single response cannot overshoot for ever;
- `request_percentage`: the event-loop time the handler itself took (its steps, not
  its waits for fsync or long polls: Kafka's request-thread time), as a percentage of
  one thread, throttled for at most one window;
- `controller_mutation_rate`: server/quotas/mutations.py.
The throttle time of a response is the largest of those that apply to it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any

from tidegate.protocol.messages import build, view
from tidegate.server.quotas import mutations
from tidegate.server.quotas.entities import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    user_name,
)

if TYPE_CHECKING:
    from tidegate.server.broker import Broker
    from tidegate.server.context import RequestContext

# the handler as the listener runs it (with its metrics): `call(ctx, request)`
Call = Callable[["RequestContext", Any], Awaitable[Any]]

PRODUCE, FETCH = 0, 1
# Never throttled: the SASL exchange (before a principal is known, as Kafka's network
# layer does it) and the brokers' own cluster actions (ControlledShutdown, markers).
EXEMPT = frozenset({7, 17, 27, 36})


class Mute:
    """A connection's mute: until when (monotonic seconds) its next request waits."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = 0.0

    def extend(self, now_s: float, throttle_ms: int) -> None:
        if throttle_ms > 0:
            self.until = max(self.until, now_s + throttle_ms / 1000)

    async def wait(self, monotonic: Any) -> None:
        # a loop: another response may extend the mute while this one sleeps
        while (left := self.until - monotonic()) > 0:
            await asyncio.sleep(left)


async def run_throttled(broker: Broker, mute: Mute, ctx: RequestContext, request: Any,
                        call: Call) -> Any:
    """`call(ctx, request)` (the handler) under the client's quotas (module docstring)."""
    clock = broker.clock
    await mute.wait(clock.monotonic)
    mgr = broker.quotas
    key = ctx.api_key
    if key in EXEMPT or not mgr.active:
        return await call(ctx, request)
    user, client = user_name(ctx.principal), ctx.client_id or ""
    throttle = 0
    if key == PRODUCE and PRODUCER_BYTE_RATE in mgr.keys:
        throttle = mgr.record(PRODUCER_BYTE_RATE, user, client, produce_bytes(request),
                              clock.now_ms())
        mute.extend(clock.monotonic(), throttle)
    fetching = (key == FETCH and CONSUMER_BYTE_RATE in mgr.keys
                and _replica_id(request) < 0)
    if fetching:
        request = _cap_fetch(broker, request, user, client)
    if key in mutations.APIS and mutations.KEY in mgr.keys:
        running: Awaitable[Any] = mutations.run(broker, call, ctx, request, user, client)
    else:
        running = call(ctx, request)
    if (REQUEST_PERCENTAGE in mgr.keys
            and mgr.match(REQUEST_PERCENTAGE, user, client) is not None):
        spent = [0.0]
        response = await _Timed(running, spent)
        t = mgr.record(REQUEST_PERCENTAGE, user, client, spent[0] * 100, clock.now_ms(),
                       cap_ms=mgr.window_ms)
        throttle = max(throttle, t)
    else:
        response = await running
    if response is None:
        return None
    if fetching:
        size = fetch_bytes(response)
        now = clock.now_ms()
        throttle = max(throttle, mgr.record(CONSUMER_BYTE_RATE, user, client, size, now))
        if throttle > 0:
            mgr.unrecord(CONSUMER_BYTE_RATE, user, client, size, now)
            response = build(type(response), {"error_code": 0, "responses": [],
                                              "session_id": view(response, "session_id", 0)})
    throttle = max(throttle, _throttle_of(response))
    if throttle > 0:
        mute.extend(clock.monotonic(), throttle)
        response = with_throttle(response, throttle)
    return response


def produce_bytes(request: Any) -> int:
    return sum(len(p.records or b"") for t in request.topic_data for p in t.partition_data)


def fetch_bytes(response: Any) -> int:
    return sum(len(p.records or b"") for t in response.responses for p in t.partitions)


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """The response with `throttle_time_ms` set, if its schema has the field."""
    if dataclasses.is_dataclass(response) and hasattr(response, "throttle_time"):
        return dataclasses.replace(response,  # type: ignore[type-var]
                                   throttle_time=datetime.timedelta(milliseconds=throttle_ms))
    return response


def _throttle_of(response: Any) -> int:
    value = getattr(response, "throttle_time", None)
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return 0


def _replica_id(request: Any) -> int:
    state = view(request, "replica_state")
    if state is not None:
        return int(state.replica_id)
    return int(view(request, "replica_id", -1))


def _cap_fetch(broker: Broker, request: Any, user: str, client: str) -> Any:
    """Kafka's `getMaxValueInQuotaWindow`: a consumer never asks for more than its quota
    allows over (num - 1) windows, or every answer would break the quota."""
    mgr = broker.quotas
    m = mgr.match(CONSUMER_BYTE_RATE, user, client)
    if m is None or not hasattr(request, "max_bytes"):
        return request
    cap = int(m.bound * max(1, mgr.window_num - 1) * mgr.window_ms / 1000)
    if int(request.max_bytes) <= cap:
        return request
    return dataclasses.replace(request, max_bytes=max(1, cap))


class _Timed:
    """Awaits a coroutine and adds the time spent *inside* its steps to `spent[0]`:
    the event-loop time this request took, not its waits."""

    __slots__ = ("call", "spent")

    def __init__(self, call: Awaitable[Any], spent: list[float]) -> None:
        self.call = call
        self.spent = spent

    def __await__(self) -> Generator[Any, Any, Any]:
        it = self.call.__await__()
        send: Any = None
        error: BaseException | None = None
        while True:
            start = time.perf_counter()
            try:
                yielded = it.throw(error) if error is not None else it.send(send)
            except StopIteration as stop:
                self.spent[0] += time.perf_counter() - start
                return stop.value
            except BaseException:
                self.spent[0] += time.perf_counter() - start
                raise
            self.spent[0] += time.perf_counter() - start
            try:
                send, error = (yield yielded), None
            except BaseException as e:  # cancellation and the like go to the handler
                send, error = None, e
