"""The quota hook around handlers (server/quotas/throttle.py, mutations.py) and the
DescribeClientQuotas / AlterClientQuotas handlers with the file store, on a stand-in
broker: what gets measured, the throttle time in responses, the mute, throttled fetch
responses, exempt APIs, KIP-599 refusals encoded at every version, request validation
and durability."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tidegate.common.clock import SystemClock
from tidegate.protocol.messages import build, encode, ms, request_class, response_class
from tidegate.server.context import RequestContext
from tidegate.server.handlers.client_quotas import (
    handle_alter_client_quotas,
    handle_describe_client_quotas,
)
from tidegate.server.quotas import mutations
from tidegate.server.quotas.entities import make_entity
from tidegate.server.quotas.manager import QuotaManager
from tidegate.server.quotas.store import FILE_NAME, FileQuotaStore
from tidegate.server.quotas.throttle import Mute, _Timed, run_throttled


def fake_broker(tmp_path: Path | None = None) -> Any:
    quotas = QuotaManager()
    b = SimpleNamespace(clock=SystemClock(), quotas=quotas, authorizer=None,
                        default_partitions=lambda: 1, metadata=SimpleNamespace(
                            topic=lambda name: None, topic_by_id=lambda tid: None))
    if tmp_path is not None:
        b.quota_store = FileQuotaStore(tmp_path, quotas)
    return b


def ctx(api_key: int, version: int, client: str = "c") -> RequestContext:
    return RequestContext(api_key, version, 1, client, "127.0.0.1:1",
                          principal="User:alice")


def set_quota(b: Any, key: str, value: float, client: str = "c") -> None:
    b.quotas.set_entity(make_entity([("client-id", client)]), {key: value})


def produce_request(size: int) -> Any:
    return build(request_class(0, 9), {"acks": 1, "timeout": 1000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"r" * size}]}]})


def fetch_response(size: int) -> Any:
    return build(response_class(1, 12), {"session_id": 0, "responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "high_watermark": 10,
                                       "records": b"r" * size}]}]})


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_produce_is_counted_before_the_handler_and_throttled() -> None:
    b = fake_broker()
    set_quota(b, "producer_byte_rate", 1000)
    seen = []

    async def handler(c: RequestContext, req: Any) -> Any:
        seen.append(b.quotas.match("producer_byte_rate", "alice", "c"))
        return build(c.response_class, {"responses": [], "throttle_time": 0})

    mute = Mute()
    resp = run(run_throttled(b, mute, ctx(0, 9), produce_request(5000), handler))
    assert seen  # the handler ran: Produce is throttled, never refused
    # 5000 B over one 1-s window against 1000 B/s: 4 s to get back under
    assert ms(resp.throttle_time) == 4000
    assert 3.5 < mute.until - time.monotonic() <= 4.0


def test_unmatched_clients_and_exempt_apis_are_untouched() -> None:
    b = fake_broker()
    set_quota(b, "producer_byte_rate", 1, client="other")
    set_quota(b, "request_percentage", 0.0001)

    async def handler(c: RequestContext, req: Any) -> Any:
        return build(c.response_class, {"responses": [], "throttle_time": 0})

    mute = Mute()
    resp = run(run_throttled(b, mute, ctx(0, 9), produce_request(5000), handler))
    assert ms(resp.throttle_time) > 0  # request_percentage for c
    mute2 = Mute()
    resp = run(run_throttled(b, mute2, ctx(0, 9, client="x"), produce_request(5000), handler))
    assert ms(resp.throttle_time) == 0 and mute2.until == 0

    async def sasl(c: RequestContext, req: Any) -> Any:
        return build(c.response_class, {"error_code": 0, "mechanisms": []})

    req = build(request_class(17, 1), {"mechanism": "PLAIN"})
    resp = run(run_throttled(b, Mute(), ctx(17, 1), req, sasl))
    assert resp.error_code.value == 0


def test_fetch_over_quota_answers_empty_and_is_not_counted() -> None:
    b = fake_broker()
    set_quota(b, "consumer_byte_rate", 1000)
    asked = []

    async def handler(c: RequestContext, req: Any) -> Any:
        asked.append(int(req.max_bytes))
        return fetch_response(5000)

    req = build(request_class(1, 12), {"replica_id": -1, "max_wait": 0, "min_bytes": 1,
                                       "max_bytes": 50_000_000, "topics": []})
    resp = run(run_throttled(b, Mute(), ctx(1, 12), req, handler))
    assert asked == [10_000]  # capped at 10 windows of quota
    assert resp.responses == () and ms(resp.throttle_time) == 4000
    encode(resp)
    # not counted: a small fetch right after passes
    assert b.quotas.record("consumer_byte_rate", "alice", "c", 100, b.clock.now_ms()) == 0


def test_follower_fetches_are_exempt() -> None:
    b = fake_broker()
    set_quota(b, "consumer_byte_rate", 1000)

    async def handler(c: RequestContext, req: Any) -> Any:
        return fetch_response(5000)

    req = build(request_class(1, 12), {"replica_id": 2, "max_wait": 0, "min_bytes": 1,
                                       "max_bytes": 50_000_000, "topics": []})
    resp = run(run_throttled(b, Mute(), ctx(1, 12), req, handler))
    assert len(resp.responses) == 1 and ms(resp.throttle_time) == 0


def test_timed_counts_the_steps_not_the_waits() -> None:
    async def handler() -> str:
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
        await asyncio.sleep(0.1)
        return "done"

    spent = [0.0]
    assert run(_wrap(_Timed(handler(), spent))) == "done"
    assert 0.015 < spent[0] < 0.08


async def _wrap(awaitable: Any) -> Any:
    return await awaitable


def test_mute_waits_until_its_end_even_if_extended() -> None:
    mute = Mute()
    mute.extend(time.monotonic(), 50)

    async def main() -> float:
        start = time.monotonic()
        waiter = asyncio.ensure_future(mute.wait(time.monotonic))
        await asyncio.sleep(0.02)
        mute.extend(time.monotonic(), 80)  # a later response extends it
        await waiter
        return time.monotonic() - start

    assert run(main()) >= 0.095


def mutation_request(api: int, version: int, topics: list[tuple[str, int]]) -> Any:
    if api == 19:
        data: dict[str, Any] = {"timeout": 1000, "topics": [
            {"name": n, "num_partitions": p, "replication_factor": 1, "assignments": [],
             "configs": []} for n, p in topics]}
    elif api == 37:
        data = {"timeout": 1000, "topics": [{"name": n, "count": p, "assignments": None}
                                            for n, p in topics]}
    elif version >= 6:
        data = {"timeout": 1000, "topics": [{"name": n, "topic_id": None} for n, _ in topics]}
    else:
        data = {"timeout": 1000, "topic_names": [n for n, _ in topics]}
    return build(request_class(api, version), data)


def echo_handler(api: int, calls: list[list[str]]) -> Any:
    """A handler that succeeds for every topic but `bad` (and records what it got)."""
    async def handler(c: RequestContext, req: Any) -> Any:
        names = [getattr(t, "name", t) for t in (getattr(req, "topic_names", None)
                                                  or req.topics)]
        calls.append(names)
        rows = [{"name": n, "error_code": 36 if n == "bad" else 0} for n in names]
        key = {19: "topics", 37: "results", 20: "responses"}[api]
        return build(c.response_class, {"throttle_time": 0, key: rows})
    return handler


@pytest.mark.parametrize("api,version", [(19, 7), (19, 6), (20, 6), (20, 5), (37, 3)])
def test_strict_quota_refuses_topic_by_topic(api: int, version: int) -> None:
    b = fake_broker()
    counts = {"a": 8, "b": 8, "c": 1}
    b.metadata = SimpleNamespace(  # for deletes and new partitions: what exists now
        topic=lambda name: SimpleNamespace(name=name, partitions=(0,) * (
            counts[name] if api == 20 else 0)),
        topic_by_id=lambda tid: None)
    set_quota(b, "controller_mutation_rate", 1.0)  # a bucket of 11
    calls: list[list[str]] = []
    req = mutation_request(api, version, list(counts.items()))
    resp = run(mutations.run(b, echo_handler(api, calls), ctx(api, version), req, "alice", "c"))
    encode(resp)
    results = getattr(resp, {19: "topics", 37: "results", 20: "responses"}[api])
    # a takes 8 (3 left), b is still allowed (-5 left), c is refused
    assert calls == [["a", "b"]]
    assert [(r.name, r.error_code.value) for r in results] == [("a", 0), ("b", 0), ("c", 89)]
    assert 4900 <= ms(resp.throttle_time) <= 5000


def test_failed_topics_give_their_partitions_back() -> None:
    b = fake_broker()
    set_quota(b, "controller_mutation_rate", 1.0)
    calls: list[list[str]] = []
    req = mutation_request(19, 7, [("bad", 11), ("a", 11)])
    resp = run(mutations.run(b, echo_handler(19, calls), ctx(19, 7), req, "alice", "c"))
    # bad took the whole bucket (0 left is not over), a took 11 more, bad failed and
    # its 11 came back
    assert [(r.name, r.error_code.value) for r in resp.topics] == [("bad", 36), ("a", 0)]
    assert b.quotas.mutation_throttle("alice", "c", b.clock.now_ms()) == 0
    for name, code in (("d", 0), ("e", 89)):  # a's 11 were counted: d empties the bucket
        resp = run(mutations.run(b, echo_handler(19, calls), ctx(19, 7),
                                 mutation_request(19, 7, [(name, 1)]), "alice", "c"))
        assert resp.topics[0].error_code.value == code


def test_permissive_versions_are_throttled_never_refused() -> None:
    b = fake_broker()
    set_quota(b, "controller_mutation_rate", 1.0)
    calls: list[list[str]] = []
    for name in ("a", "b"):
        resp = run(mutations.run(b, echo_handler(19, calls), ctx(19, 5),
                                 mutation_request(19, 5, [(name, 20)]), "alice", "c"))
        assert resp.topics[0].error_code.value == 0
    assert calls == [["a"], ["b"]] and 28_900 <= ms(resp.throttle_time) <= 29_000


def alter_request(entries: list[tuple[list[tuple[str, str | None]], list[tuple[str, float, bool]]]],
                  validate_only: bool = False, version: int = 1) -> Any:
    return build(request_class(49, version), {"validate_only": validate_only, "entries": [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops]}
        for entity, ops in entries]})


def test_alter_validates_each_entry_and_persists(tmp_path: Path) -> None:
    b = fake_broker(tmp_path)
    req = alter_request([
        ([("client-id", "app")], [("producer_byte_rate", 1024.0, False)]),
        ([("user", None), ("client-id", None)], [("request_percentage", 12.5, False)]),
        ([("client-id", "x")], [("unknown_key", 1.0, False)]),
        ([("user", "u"), ("user", "v")], [("producer_byte_rate", 1.0, False)]),
        ([("ip", "1.2.3.4")], [("connection_creation_rate", 1.0, False)]),
        ([], [("producer_byte_rate", 1.0, False)]),
        ([("client-id", "y")], [("consumer_byte_rate", 0.5, False)]),
    ])
    resp = run(handle_alter_client_quotas(b, ctx(49, 1), req))
    encode(resp)
    assert [e.error_code.value for e in resp.entries] == [0, 0, 42, 42, 42, 42, 42]
    assert "unknown_key" in (resp.entries[2].error_message or "")
    assert (tmp_path / FILE_NAME).exists()
    reloaded = QuotaManager()
    FileQuotaStore(tmp_path, reloaded)
    assert reloaded.quotas == b.quotas.quotas == {
        make_entity([("client-id", "app")]): {"producer_byte_rate": 1024.0},
        make_entity([("user", None), ("client-id", None)]): {"request_percentage": 12.5}}
    # validate_only changes nothing; removing the last key removes the entity
    run(handle_alter_client_quotas(b, ctx(49, 0), alter_request(
        [([("client-id", "z")], [("producer_byte_rate", 5.0, False)])], validate_only=True,
        version=0)))
    assert make_entity([("client-id", "z")]) not in b.quotas.quotas
    run(handle_alter_client_quotas(b, ctx(49, 1), alter_request(
        [([("client-id", "app")], [("producer_byte_rate", 0.0, True)])])))
    assert make_entity([("client-id", "app")]) not in b.quotas.quotas


def test_describe_filters_and_refuses_bad_ones(tmp_path: Path) -> None:
    b = fake_broker(tmp_path)
    run(handle_alter_client_quotas(b, ctx(49, 1), alter_request([
        ([("client-id", "app")], [("producer_byte_rate", 1024.0, False)]),
        ([("user", "alice"), ("client-id", "app")], [("consumer_byte_rate", 2048.0, False)]),
    ])))

    def describe(components: list[dict[str, Any]], strict: bool, version: int = 1) -> Any:
        req = build(request_class(48, version), {"components": components, "strict": strict})
        resp = run(handle_describe_client_quotas(b, ctx(48, version), req))
        encode(resp)
        return resp

    resp = describe([{"entity_type": "client-id", "match_type": 0, "match": "app"}], False)
    assert resp.error_code.value == 0 and len(resp.entries) == 2
    resp = describe([{"entity_type": "client-id", "match_type": 0, "match": "app"}], True, 0)
    assert [[(e.entity_type, e.entity_name) for e in x.entity] for x in resp.entries] == [
        [("client-id", "app")]]
    assert [(v.key, v.value) for v in resp.entries[0].values] == [("producer_byte_rate", 1024.0)]
    bad = describe([{"entity_type": "client-id", "match_type": 0, "match": None}], False)
    assert bad.error_code.value == 42 and bad.entries is None


def test_random_requests_get_an_answer_never_an_exception(tmp_path: Path) -> None:
    import random

    rnd = random.Random(17)
    b = fake_broker(tmp_path)
    words = ["user", "client-id", "ip", "", "group", "<default>", "é/ü", None]
    keys = ["producer_byte_rate", "consumer_byte_rate", "request_percentage",
            "controller_mutation_rate", "x", ""]
    values = [0.0, -1.0, 1.0, 1.5, 1e300, float("nan"), float("inf"), 2.0**63]
    for _ in range(300):
        entries = []
        for _ in range(rnd.randint(0, 3)):
            entity = [(str(rnd.choice(words[:5])), rnd.choice(words))
                      for _ in range(rnd.randint(0, 3))]
            ops = [(rnd.choice(keys), rnd.choice(values), rnd.random() < 0.3)
                   for _ in range(rnd.randint(0, 3))]
            entries.append((entity, ops))
        resp = run(handle_alter_client_quotas(b, ctx(49, 1), alter_request(
            entries, validate_only=rnd.random() < 0.5)))
        encode(resp)
        assert len(resp.entries) == len(entries)
        comps = [{"entity_type": str(rnd.choice(words[:5])), "match_type": rnd.randint(-2, 4),
                  "match": rnd.choice(words)} for _ in range(rnd.randint(0, 3))]
        req = build(request_class(48, 1), {"components": comps, "strict": rnd.random() < 0.5})
        encode(run(handle_describe_client_quotas(b, ctx(48, 1), req)))
    # whatever was accepted is still a valid, reloadable set
    reloaded = QuotaManager()
    FileQuotaStore(tmp_path, reloaded)
    assert reloaded.quotas == b.quotas.quotas


def test_delete_by_topic_id_is_counted_and_answered() -> None:
    import uuid

    b = fake_broker()
    ids = {uuid.uuid4(): ("a", 8), uuid.uuid4(): ("b", 8), uuid.uuid4(): ("c", 1)}
    b.metadata = SimpleNamespace(topic=lambda name: None, topic_by_id=lambda tid: (
        SimpleNamespace(name=ids[tid][0], topic_id=tid, partitions=(0,) * ids[tid][1])))
    set_quota(b, "controller_mutation_rate", 1.0)

    async def handler(c: RequestContext, req: Any) -> Any:
        return build(c.response_class, {"throttle_time": 0, "responses": [
            {"name": ids[t.topic_id][0], "topic_id": t.topic_id, "error_code": 0}
            for t in req.topics]})

    req = build(request_class(20, 6), {"timeout": 1000, "topics": [
        {"name": None, "topic_id": tid} for tid in ids]})
    resp = run(mutations.run(b, handler, ctx(20, 6), req, "alice", "c"))
    encode(resp)
    assert [(r.name, r.error_code.value) for r in resp.responses] == [
        ("a", 0), ("b", 0), (None, 89)]
    assert [r.topic_id for r in resp.responses] == list(ids)
