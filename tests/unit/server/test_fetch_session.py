"""Fetch sessions (KIP-227): the broker's cache (server/fetch_session.py) and the
fetcher's handler (protocol/incremental_fetch.py), alone and as two peers in memory."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidegate.common.errors import ErrorCode, KafkaError
from tidegate.protocol.incremental_fetch import FetchSessionHandler
from tidegate.server.fetch_session import FetchSessionCache, PartitionState


def _state(index: int, offset: int, topic: str = "t") -> PartitionState:
    return PartitionState(topic, None, index, offset, 1 << 20)


def _ids() -> object:
    counter = itertools.count(100)
    return lambda lo, hi: next(counter)


# -- the broker's cache ----------------------------------------------------------------

def test_incremental_fetch_needs_the_next_epoch() -> None:
    cache = FetchSessionCache(rng=_ids())  # type: ignore[arg-type]
    session = cache.open(privileged=True, now_ms=0)
    assert session is not None and session.session_id == 100
    assert cache.get(100, 1, now_ms=1) is session
    with pytest.raises(KafkaError) as e:
        cache.get(100, 1, now_ms=2)  # a replayed epoch
    assert e.value.code == ErrorCode.invalid_fetch_session_epoch
    assert cache.get(100, 2, now_ms=3) is session
    with pytest.raises(KafkaError) as e:
        cache.get(999, 1, now_ms=4)
    assert e.value.code == ErrorCode.fetch_session_id_not_found
    with pytest.raises(KafkaError) as e:
        cache.get(0, 5, now_ms=4)
    assert e.value.code == ErrorCode.invalid_fetch_session_epoch
    cache.close(100)
    with pytest.raises(KafkaError) as e:
        cache.get(100, 3, now_ms=5)
    assert e.value.code == ErrorCode.fetch_session_id_not_found


def test_full_cache_evicts_only_stale_sessions_or_a_consumer_for_a_follower() -> None:
    cache = FetchSessionCache(max_slots=2, eviction_ms=1000, rng=_ids())  # type: ignore[arg-type]
    a = cache.open(privileged=False, now_ms=0)
    b = cache.open(privileged=True, now_ms=0)
    assert a is not None and b is not None
    assert cache.open(privileged=False, now_ms=500) is None  # nothing stale yet
    c = cache.open(privileged=True, now_ms=500)  # a follower displaces the consumer
    assert c is not None and cache.evictions == 1
    with pytest.raises(KafkaError):
        cache.get(a.session_id, 1, now_ms=600)
    assert cache.open(privileged=True, now_ms=600) is None  # only followers left
    cache.get(c.session_id, 1, now_ms=1400)  # c used; b idle since 0
    d = cache.open(privileged=False, now_ms=1500)  # b is stale: evicted
    assert d is not None and cache.evictions == 2
    assert len(cache) == 2


def test_zero_slots_means_no_sessions() -> None:
    assert FetchSessionCache(max_slots=0).open(privileged=True, now_ms=0) is None


def test_incremental_answer_carries_only_what_changed() -> None:
    cache = FetchSessionCache()
    session = cache.open(privileged=False, now_ms=0)
    assert session is not None
    session.apply([(("t", 0), _state(0, 0)), (("t", 1), _state(1, 0))], ())

    def sent(key: tuple[str, int], hw: int, records: bool = False, error: bool = False,
             incremental: bool = True) -> bool:
        return session.sent(key, high_watermark=hw, last_stable_offset=hw,
                            log_start_offset=0, has_records=records, has_error=error,
                            incremental=incremental)

    # the full answer that opened the session carries everything
    assert sent(("t", 0), 5, incremental=False) and sent(("t", 1), 5, incremental=False)
    assert not sent(("t", 0), 5) and not sent(("t", 1), 5)  # nothing new
    assert sent(("t", 1), 6)  # its high watermark moved
    assert not sent(("t", 1), 6)
    assert sent(("t", 0), 5, records=True) and sent(("t", 0), 5, error=True)
    # a partition that returned records goes to the end (fairness under max_bytes)
    assert list(session.partitions) == [("t", 1), ("t", 0)]
    session.apply([(("t", 0), _state(0, 9))], [("t", 1)])
    assert list(session.partitions) == [("t", 0)]
    assert session.partitions[("t", 0)].fetch_offset == 9


# -- the fetcher's handler -------------------------------------------------------------

def test_handler_sends_full_then_only_changes() -> None:
    h: FetchSessionHandler[str] = FetchSessionHandler()
    first = h.next_request({"a": 1, "b": 1})
    assert first.full and first.epoch == 0 and first.session_id == 0
    assert sorted(first.send) == ["a", "b"]
    h.on_response(0, 77)
    nxt = h.next_request({"a": 2, "b": 1, "c": 1})
    assert not nxt.full and (nxt.session_id, nxt.epoch) == (77, 1)
    assert sorted(nxt.send) == ["a", "c"] and nxt.forgotten == []
    h.on_response(0, 77)
    nxt = h.next_request({"a": 2})
    assert nxt.send == [] and sorted(nxt.forgotten) == ["b", "c"] and nxt.epoch == 2
    h.on_response(int(ErrorCode.invalid_fetch_session_epoch), 0)
    again = h.next_request({"a": 2})
    assert again.full and again.session_id == 0 and again.send == ["a"]


def test_handler_without_a_session_keeps_asking_in_full() -> None:
    h: FetchSessionHandler[str] = FetchSessionHandler()
    h.next_request({"a": 1})
    h.on_response(0, 0)  # the broker had no slot
    nxt = h.next_request({"a": 2})
    assert nxt.full and nxt.epoch == 0 and nxt.send == ["a"]


def test_lost_answer_closes_the_old_session_with_a_new_full_fetch() -> None:
    h: FetchSessionHandler[str] = FetchSessionHandler()
    h.next_request({"a": 1})
    h.on_response(0, 5)
    h.next_request({"a": 2})
    h.on_failure()
    nxt = h.next_request({"a": 2})
    assert nxt.full and (nxt.session_id, nxt.epoch) == (5, 0)


# -- both peers in memory --------------------------------------------------------------

wanted_sets = st.lists(
    st.dictionaries(st.integers(0, 6), st.integers(0, 3), max_size=7), min_size=1,
    max_size=25)


@settings(max_examples=150, deadline=None)
@given(rounds=wanted_sets, losses=st.lists(st.booleans(), max_size=25),
       slots=st.integers(0, 2))
def test_the_broker_session_always_holds_what_the_fetcher_wants(
        rounds: list[dict[int, int]], losses: list[bool], slots: int) -> None:
    """Whatever the fetcher wants each round (and whichever answers are lost), the
    partitions the broker reads for it are exactly those, at the states it wants."""
    cache = FetchSessionCache(max_slots=slots)
    h: FetchSessionHandler[int] = FetchSessionHandler()
    for i, wanted in enumerate(rounds):
        nxt = h.next_request(wanted)
        updates = [(("t", k), _state(k, wanted[k])) for k in nxt.send]
        forgotten = [("t", k) for k in nxt.forgotten]
        error, session_id = 0, 0
        if nxt.epoch > 0:
            try:
                session = cache.get(nxt.session_id, nxt.epoch, now_ms=i)
            except KafkaError as e:
                error = int(e.code)
            else:
                session.apply(updates, forgotten)
                session_id = session.session_id
                read = {key[1]: ps.fetch_offset for key, ps in session.partitions.items()}
                assert read == wanted
        else:
            if nxt.session_id:
                cache.close(nxt.session_id)
            assert sorted(nxt.send) == sorted(wanted)
            opened = cache.open(privileged=True, now_ms=i)
            if opened is not None:
                opened.apply(updates, ())
                session_id = opened.session_id
        if i < len(losses) and losses[i]:
            h.on_failure()  # the answer never arrived (the broker did the work)
        else:
            h.on_response(error, session_id)
