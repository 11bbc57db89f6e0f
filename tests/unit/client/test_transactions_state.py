"""The transactional producer's client state table (seed 000) and KIP-1050's error
classes: Hypothesis drives `TransactionState` with random moves and checks each against
the table; the public calls' checks raise the seed's errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from tidegate.client.config import ProducerConfig
from tidegate.client.errors import (
    ConfigError,
    FatalProducerError,
    IllegalStateError,
    ProducerFencedError,
    TransactionAbortableError,
)
from tidegate.client.producer.transactions import (
    TRANSITIONS,
    ErrorKind,
    PreparedTxnState,
    TransactionState,
    TxnState,
    classify,
)
from tidegate.client.types import TopicPartition
from tidegate.common.errors import KafkaError

S = TxnState


@given(st.lists(st.sampled_from(list(TxnState)), max_size=40))
def test_random_moves_follow_the_table(moves: list[TxnState]) -> None:
    s = TransactionState("t")
    for target in moves:
        before = s.state
        allowed = target in TRANSITIONS[before]
        if allowed:
            s.transition_to(target, KafkaError("boom", code=ErrorCode.producer_fenced))
            assert s.state is target
        else:
            with pytest.raises(KafkaError):  # IllegalStateError, or the stored error
                s.transition_to(target)
            assert s.state is before
    assert S.FATAL_ERROR not in TRANSITIONS[S.FATAL_ERROR] and not TRANSITIONS[S.FATAL_ERROR]


def test_every_state_but_fatal_can_fail_fatally() -> None:
    for state, targets in TRANSITIONS.items():
        assert (S.FATAL_ERROR in targets) == (state is not S.FATAL_ERROR)


def test_the_happy_path_and_the_seeds_misuse_errors() -> None:
    s = TransactionState("t")
    with pytest.raises(IllegalStateError, match="init_transactions"):
        s.require(S.READY, what="begin_transaction()")
    s.transition_to(S.INITIALIZING)
    s.transition_to(S.READY)
    s.transition_to(S.IN_TRANSACTION)
    with pytest.raises(IllegalStateError, match="from state IN_TRANSACTION to state "
                                                "IN_TRANSACTION"):
        s.transition_to(S.IN_TRANSACTION)
    s.partitions.add(TopicPartition("a", 0))
    s.transition_to(S.COMMITTING_TRANSACTION)
    s.transition_to(S.READY)
    assert not s.partitions  # a new transaction starts empty


def test_a_failed_send_is_abortable_and_fencing_is_fatal() -> None:
    s = TransactionState("t", state=S.IN_TRANSACTION)
    s.fail(KafkaError("x", code=ErrorCode.message_too_large))
    assert s.state is S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError):
        s.require(S.IN_TRANSACTION, what="send")
    s.transition_to(S.ABORTING_TRANSACTION)
    s.transition_to(S.READY)
    s.fail(KafkaError("fenced", code=ErrorCode.producer_fenced))
    assert s.state is S.FATAL_ERROR
    with pytest.raises(ProducerFencedError):
        s.require(S.READY, what="begin_transaction()")
    s.fail(KafkaError("x", code=ErrorCode.message_too_large))
    assert s.state is S.FATAL_ERROR  # stays fatal


@pytest.mark.parametrize(("code", "kind"), [
    (ErrorCode.producer_fenced, ErrorKind.FATAL),
    (ErrorCode.invalid_producer_epoch, ErrorKind.FATAL),
    (ErrorCode.transactional_id_authorization_failed, ErrorKind.FATAL),
    (ErrorCode.cluster_authorization_failed, ErrorKind.FATAL),
    (ErrorCode.not_coordinator, ErrorKind.REDISCOVER),
    (ErrorCode.coordinator_load_in_progress, ErrorKind.REDISCOVER),
    (ErrorCode.coordinator_not_available, ErrorKind.REDISCOVER),
    (ErrorCode.concurrent_transactions, ErrorKind.RETRIABLE),
    (ErrorCode.request_timed_out, ErrorKind.RETRIABLE),
    (ErrorCode.topic_authorization_failed, ErrorKind.ABORTABLE),
    (ErrorCode.group_authorization_failed, ErrorKind.ABORTABLE),
    (ErrorCode.illegal_generation, ErrorKind.ABORTABLE),
    (ErrorCode.unknown_member_id, ErrorKind.ABORTABLE),
    (ErrorCode.transaction_abortable, ErrorKind.ABORTABLE),
    (ErrorCode.message_too_large, ErrorKind.ABORTABLE),
])
def test_error_classes(code: ErrorCode, kind: ErrorKind) -> None:
    assert classify(code) is kind


def test_fatal_errors_are_typed() -> None:
    s = TransactionState("t", state=S.IN_TRANSACTION)
    s.fail(KafkaError("auth", code=ErrorCode.transactional_id_authorization_failed))
    exc = s.fatal_exception()
    assert isinstance(exc, FatalProducerError) and not isinstance(exc, ProducerFencedError)
    assert not exc.retriable


def test_prepared_state_is_json() -> None:
    p = PreparedTxnState("id \u00e9", 4001, 7)
    assert PreparedTxnState.from_json(p.to_json()) == p
    assert PreparedTxnState.from_json(p.to_json().encode()) == p


def test_partitions_registration_by_version() -> None:
    v1 = TransactionState("t", version=1)
    tp = TopicPartition("a", 1)
    v1.on_new_partition(tp)
    assert tp in v1.pending and not v1.may_send(tp)
    v2 = TransactionState("t", version=2)
    v2.on_new_partition(tp)
    assert not v2.pending and v2.may_send(tp)


def test_transactional_config() -> None:
    cfg = ProducerConfig.from_dict({"transactional.id": "tx"})
    assert cfg.transaction_timeout_ms == 60_000 and cfg.enable_idempotence
    assert cfg.tidegate_transaction_version_max == 2
    with pytest.raises(ConfigError, match=r"enable\.idempotence"):
        ProducerConfig.from_dict({"transactional.id": "tx", "enable.idempotence": False})
    with pytest.raises(ConfigError, match="acks"):
        ProducerConfig.from_dict({"transactional.id": "tx", "acks": 1})
    with pytest.raises(ConfigError, match=r"needs a transactional\.id"):
        ProducerConfig.from_dict({"transaction.two.phase.commit.enable": True})
    with pytest.raises(ConfigError):
        ProducerConfig.from_dict({"transactional.id": ""})
