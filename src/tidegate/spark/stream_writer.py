"""Streaming write, exactly once: prepared transactions (KIP-939) committed by the driver.

Protocol for micro-batch N of query Q (Q is Spark's query id, stable across restarts
from the same checkpoint; tasks read it and N from the task's local properties):

1. Task (partition p, attempt a) first reads Q's *decision record*; if it says batch N
   is already committed (a replay), the task writes nothing. Else it opens a producer
   with ``transactional.id = {prefix}-{Q}-{N}-{p}-{a}`` and two-phase commit,
   `init_transactions()` (which aborts whatever that id left), writes its rows in one
   transaction and *prepares* it: durable, invisible, never timed out. Its commit
   message carries the `PreparedTxnState`. A failing task aborts its transaction. After
   preparing, the task reads the decision record again and aborts if batch N was
   decided meanwhile (it lost; the driver's sweep may have run before it prepared).
2. Driver `commit(messages, N)`: writes the decision record — the committed offset N+1
   of consumer group ``tidegate-spark-{Q}`` on partition 0 of the commit topic, with the
   winners' prepared states as metadata (OffsetCommit is durable in
   ``__consumer_offsets``) — then completes each winner (`init_transactions(
   keep_prepared_txn=True)` + `complete_transaction(commit=True)`), then aborts every
   other open transaction of Q for batches <= N (failed, killed or speculative attempts,
   and leftovers of an earlier run), found with ListTransactions.
3. Replays: if the decision for N exists, `commit` completes the recorded winners again
   (a no-op for those already committed) and writes nothing new.

The producers use two-phase commit, which the broker must allow
(``transaction.two.phase.commit.enable``, true by default in Tidegate): a refusal
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED) becomes `TwoPhaseCommitRefusedError`, whose
message — the last line of the Python traceback Spark shows — names the setting and the
``exactlyOnce=false`` alternative.

Invariant: a batch's rows become visible iff its decision record exists, once: before
the record every prepared transaction can still be aborted, after it every winner is
committed by whichever driver gets there. `abort(messages, N)` aborts the batch's
transactions.

Test-only fault injection (inert unless the variables are set; used by
tests/integration/test_spark_failures.py): ``TIDEGATE_SPARK_TEST_KILL_AT="point:N"``
with ``TIDEGATE_SPARK_TEST_KILL_PGID`` SIGKILLs that whole process group (the driver:
its Python process, the JVM and the Python workers) when batch N reaches ``point`` of
the driver's commit (`KILL_POINTS`) or, for ``task_write``, when a task of batch N has
sent its rows and not yet prepared. ``TIDEGATE_SPARK_TEST_TASK_FAULT="mode:N"`` makes
attempt 0 of each task of batch N fail after sending its rows: ``raise`` an exception,
or ``exit`` its Python worker (leaving its transaction open).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from tidegate.client import (
    Admin,
    Consumer,
    FatalProducerError,
    PreparedTxnState,
    Producer,
    TopicPartition,
)
from tidegate.client.consumer.group_offsets import OffsetAndMetadata
from tidegate.spark.options import WriteOptions, client_config
from tidegate.spark.writer import RowEncoder, WriteResult, send_batches, send_rows

__all__ = ["TidegateStreamArrowWriter", "TidegateStreamWriter", "TwoPhaseCommitRefusedError",
           "TxnWriteResult"]

QUERY_ID_KEY = "sql.streaming.queryId"
BATCH_ID_KEY = "streaming.sql.batchId"
KILL_POINTS = ("before_decision", "after_decision", "after_broker_commit", "task_write")
TWO_PC_REFUSED = (
    "the exactly-once sink needs two-phase commit (KIP-939) and the broker refused it "
    "(TRANSACTIONAL_ID_AUTHORIZATION_FAILED for {txn_id!r}): start the broker with "
    "transaction.two.phase.commit.enable=true (Tidegate's default; Kafka's is false), "
    "or write at least once with .option(\"exactlyOnce\", \"false\"). With an "
    "authorizer, the principal also needs WRITE and TWO_PHASE_COMMIT on the "
    "transactional id.")


class TwoPhaseCommitRefusedError(RuntimeError):
    """The broker refused the exactly-once sink's two-phase-commit producer."""


def _test_kill(point: str, batch_id: int) -> None:
    """Test only: SIGKILL the driver's process group at `point` of batch `batch_id`."""
    want = os.environ.get("TIDEGATE_SPARK_TEST_KILL_AT")
    pgid = os.environ.get("TIDEGATE_SPARK_TEST_KILL_PGID")
    if want == f"{point}:{batch_id}" and pgid:
        os.killpg(int(pgid), signal.SIGKILL)


def _test_task_fault(batch_id: int, part: int, attempt: int) -> None:
    """Test only: make attempt 0 of a task of batch `batch_id` fail mid-write."""
    mode, _, batch = os.environ.get("TIDEGATE_SPARK_TEST_TASK_FAULT", "").partition(":")
    if not mode or attempt != 0 or batch != str(batch_id):
        return
    if mode == "raise":
        raise RuntimeError(f"test fault: task {part} attempt 0 of batch {batch_id}")
    if mode == "exit":
        os._exit(17)


@dataclass
class TxnWriteResult(WriteResult):
    query_id: str = ""
    batch_id: int = -1
    skipped: bool = False


class TidegateStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self.opts = opts
        self.encoder = RowEncoder.for_schema(schema, opts.topic)
        self.exactly_once = opts.exactly_once
        if self.exactly_once and opts.commit_topic is None:
            raise ValueError("the exactly-once sink needs the topic option or "
                             "eos.commitTopic (where its decision records live)")

    # -- helpers ------------------------------------------------------------------

    def _txn_prefix(self, query_id: str, batch_id: int | None = None) -> str:
        base = f"{self.opts.txn_prefix}-{query_id}-"
        return base if batch_id is None else f"{base}{batch_id}-"

    def _decided(self, query_id: str) -> tuple[int, str]:
        """(next undecided batch, metadata of the last decision) of the query."""
        assert self.opts.commit_topic is not None
        tp = TopicPartition(self.opts.commit_topic, 0)
        config = client_config(self.opts.kafka, "consumer",
                               **{"group.id": f"tidegate-spark-{query_id}",
                                  "enable.auto.commit": False})
        with Consumer(config) as consumer:
            found = consumer.committed([tp]).get(tp)
        return (found.offset, found.metadata) if found is not None else (0, "")

    def _record_decision(self, query_id: str, batch_id: int, winners: list[str]) -> None:
        assert self.opts.commit_topic is not None
        tp = TopicPartition(self.opts.commit_topic, 0)
        config = client_config(self.opts.kafka, "consumer",
                               **{"group.id": f"tidegate-spark-{query_id}",
                                  "enable.auto.commit": False})
        with Consumer(config) as consumer:
            consumer.assign([tp])
            consumer.commit({tp: OffsetAndMetadata(batch_id + 1, json.dumps(winners))})

    def _txn_producer(self, txn_id: str) -> Producer:
        return Producer(client_config(self.opts.kafka, "producer", **{
            "transactional.id": txn_id, "transaction.two.phase.commit.enable": True}))

    @staticmethod
    def _init(producer: Producer, keep_prepared_txn: bool = False) -> PreparedTxnState | None:
        """`init_transactions`, turning the broker's refusal of two-phase commit into
        an error that says what to do (its text is the first line Spark shows)."""
        try:
            return producer.init_transactions(keep_prepared_txn=keep_prepared_txn)
        except FatalProducerError as e:
            if e.name != "TRANSACTIONAL_ID_AUTHORIZATION_FAILED":
                raise
            # `from None`: the client's message says the same, without the Spark option
            raise TwoPhaseCommitRefusedError(
                TWO_PC_REFUSED.format(txn_id=producer.config.transactional_id)) from None

    # -- executor -----------------------------------------------------------------

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        if not self.exactly_once:
            with Producer(self.opts.producer_config) as producer:
                return WriteResult(self._send(producer, iterator))
        ctx = TaskContext.get()
        assert ctx is not None, "write() runs in a Spark task"
        query_id = ctx.getLocalProperty(QUERY_ID_KEY)
        batch = ctx.getLocalProperty(BATCH_ID_KEY)
        if not query_id or batch is None:
            raise RuntimeError("the exactly-once sink runs in streaming queries only")
        batch_id = int(batch)
        part, attempt = ctx.partitionId(), ctx.attemptNumber()
        if self._decided(query_id)[0] > batch_id:
            for _ in iterator:  # a replay of a committed batch: nothing to write
                pass
            return TxnWriteResult(0, part, attempt, None, query_id, batch_id, skipped=True)
        txn_id = f"{self._txn_prefix(query_id, batch_id)}{part}-{attempt}"
        with self._txn_producer(txn_id) as producer:
            self._init(producer)
            producer.begin_transaction()
            try:
                n = self._send(producer, iterator)
                _test_kill("task_write", batch_id)
                _test_task_fault(batch_id, part, attempt)
                state = producer.prepare_transaction()
            except BaseException:
                producer.abort_transaction()
                raise
            if self._decided(query_id)[0] > batch_id:
                # A late copy (speculative, or a zombie of a lost attempt): the batch
                # was decided without it, perhaps after the driver's sweep had already
                # looked for open transactions. Abort, or it stays prepared forever.
                producer.abort_transaction()
                return TxnWriteResult(0, part, attempt, None, query_id, batch_id,
                                      skipped=True)
        return TxnWriteResult(n, part, attempt, state.to_json(), query_id, batch_id)

    def _send(self, producer: Producer, iterator: Iterator[Any]) -> int:
        return send_rows(producer, self.encoder, iterator)

    # -- driver -------------------------------------------------------------------

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        results = [m for m in messages if isinstance(m, TxnWriteResult)]
        if not results:
            return
        query_id = results[0].query_id
        decided, meta = self._decided(query_id)
        if decided > batchId:
            winners = json.loads(meta) if decided == batchId + 1 and meta else []
        else:
            winners = [m.prepared for m in results if m.prepared is not None]
            _test_kill("before_decision", batchId)
            self._record_decision(query_id, batchId, winners)
            _test_kill("after_decision", batchId)
        keep = set()
        for text in winners:
            state = PreparedTxnState.from_json(text)
            keep.add(state.transactional_id)
            with self._txn_producer(state.transactional_id) as producer:
                if self._init(producer, keep_prepared_txn=True) is not None:
                    producer.complete_transaction(state, commit=True)
        self._abort_open(query_id, batchId, keep)
        _test_kill("after_broker_commit", batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        results = [m for m in messages if isinstance(m, TxnWriteResult)]
        if results:
            self._abort_open(results[0].query_id, batchId, set())

    def _abort_open(self, query_id: str, batch_id: int, keep: set[str]) -> None:
        """Abort every open transaction of the query for batches <= batch_id but `keep`."""
        prefix = self._txn_prefix(query_id)
        with Admin(client_config(self.opts.kafka, "admin")) as admin:
            listing = admin.list_transactions(states=["Ongoing"])
        for t in listing:
            tid = t.transactional_id
            if not tid.startswith(prefix) or tid in keep:
                continue
            try:
                txn_batch = int(tid[len(prefix):].split("-")[0])
            except ValueError:
                continue
            if txn_batch <= batch_id:
                with self._txn_producer(tid) as producer:
                    self._init(producer)  # fences the id and aborts its transaction


class TidegateStreamArrowWriter(TidegateStreamWriter, DataSourceStreamArrowWriter):
    """The streaming sink fed Arrow record batches (the default, ``arrowBatches=true``):
    the same protocol, only the records' encoding differs (`writer.send_batches`)."""

    def _send(self, producer: Producer, iterator: Iterator[Any]) -> int:
        return send_batches(producer, self.encoder, iterator)
