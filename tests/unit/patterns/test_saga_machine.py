"""The saga state machine (patterns/saga/machine.py): forward steps, forward recovery
(retries after a timeout), backward recovery (compensation in reverse order), a
compensation that keeps failing, stale replies, and the state's JSON round trip."""

from __future__ import annotations

import pytest

from tidegate.patterns.saga import (
    COMPENSATED,
    COMPENSATING,
    COMPLETED,
    Decision,
    SagaDefinition,
    SagaState,
    Step,
    on_reply,
    on_timeout,
    start,
)

ORDER = SagaDefinition("order", (Step("reserve", "stock", timeout_s=5, retries=1),
                                 Step("charge", "payments", timeout_s=5, retries=1),
                                 Step("ship", "shipping", timeout_s=5, retries=0)))


def sent(dec: Decision) -> list[tuple[str, str, int]]:
    return [(c.step, c.action, c.attempt) for c in dec.commands]


def ok(s: SagaState, now: float = 0.0) -> Decision:
    return on_reply(ORDER, s, ORDER.steps[s.step].name, s.action, s.attempt, True, now)


def test_happy_path_completes() -> None:
    d = start(ORDER, "s1", '{"qty": 2}', 0.0)
    assert sent(d) == [("reserve", "do", 1)]
    assert d.commands[0].idempotency_key == "s1/reserve/do"
    assert d.commands[0].topic == "stock" and d.state.deadline == 5.0
    d = ok(d.state)
    assert sent(d) == [("charge", "do", 1)]
    d = ok(ok(d.state).state)
    assert d.state.status == COMPLETED and d.commands == () and d.state.done


def test_failure_reply_compensates_only_the_steps_before() -> None:
    s = ok(start(ORDER, "s2", "p", 0.0).state).state  # reserve done; charge sent
    d = on_reply(ORDER, s, "charge", "do", 1, False, 1.0, "card declined")
    assert d.state.status == COMPENSATING
    assert sent(d) == [("reserve", "compensate", 1)]  # never charge's compensation
    d = ok(d.state)
    assert d.state.status == COMPENSATED and d.commands == ()
    assert "charge failed: card declined" in d.state.history


def test_first_step_failing_needs_no_compensation() -> None:
    s = start(ORDER, "s3", "p", 0.0).state
    d = on_reply(ORDER, s, "reserve", "do", 1, False, 1.0, "out of stock")
    assert d.state.status == COMPENSATED and d.commands == ()


def test_timeouts_retry_then_compensate_the_silent_step_too() -> None:
    s = ok(start(ORDER, "s4", "p", 0.0).state).state  # charge attempt 1, deadline 5
    assert on_timeout(ORDER, s, 4.9).state == s
    d = on_timeout(ORDER, s, 5.0)
    assert sent(d) == [("charge", "do", 2)] and d.commands[0].idempotency_key == "s4/charge/do"
    d = on_timeout(ORDER, d.state, 10.0)
    assert d.alert and sent(d) == [("charge", "compensate", 1)]
    # a late answer to the charge changes nothing now
    assert on_reply(ORDER, d.state, "charge", "do", 2, True, 11.0).state == d.state
    d = ok(d.state)
    assert sent(d) == [("reserve", "compensate", 1)]
    assert ok(d.state).state.status == COMPENSATED


def test_compensation_is_retried_forever_with_alerts() -> None:
    s = start(ORDER, "s5", "p", 0.0).state
    d = on_timeout(ORDER, on_timeout(ORDER, s, 5.0).state, 10.0)
    assert sent(d) == [("reserve", "compensate", 1)]
    for attempt in range(2, 30):
        d = on_reply(ORDER, d.state, "reserve", "compensate", attempt - 1, False, 0.0, "no")
        assert d.alert and sent(d) == [("reserve", "compensate", attempt)]
    d = on_timeout(ORDER, d.state, d.state.deadline)
    assert d.alert and d.state.status == COMPENSATING
    assert ok(d.state).state.status == COMPENSATED


def test_stale_replies_change_nothing() -> None:
    s = ok(start(ORDER, "s6", "p", 0.0).state).state
    assert on_reply(ORDER, s, "reserve", "do", 1, True, 1.0).state == s  # re-delivered
    assert on_reply(ORDER, s, "charge", "do", 7, True, 1.0).state == s  # wrong attempt
    comp = on_timeout(ORDER, on_timeout(ORDER, s, 5.0).state, 10.0).state  # compensating
    again = on_reply(ORDER, comp, "charge", "compensate", 1, False, 11.0, "busy").state
    assert on_reply(ORDER, again, "charge", "compensate", 1, False, 12.0).state == again
    done = ok(ok(s).state).state
    assert on_reply(ORDER, done, "ship", "do", 1, False, 1.0).state == done


def test_state_round_trips_and_definitions_are_checked() -> None:
    s = on_timeout(ORDER, start(ORDER, "s7", "p", 0.0).state, 5.0).state
    assert SagaState.from_json(s.to_json()) == s
    with pytest.raises(ValueError):
        SagaDefinition("empty", ())
    with pytest.raises(ValueError):
        SagaDefinition("dup", (Step("a", "t"), Step("a", "u")))
