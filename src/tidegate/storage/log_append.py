"""`Log.append`, `Log.append_control`: how batches get into a partition's log.

The hot path of a produce. Before the log's lock: the client's batches are checked
whole (`validation.validate_producer_batches`: framing, CRC, sizes, idempotent shape)
and every record scanned (`record_checks.validate_records`), so a bad request is
refused before anything is copied or locked. Under the lock: the producer state checks
each batch carrying a producer id (a retry of one of the producer's last 5 batches is
answered with the original's offsets, `AppendInfo.duplicate`, and not written again),
CreateTime timestamps are checked against the topic's limits, offsets (and the leader
epoch, and LogAppendTime on a private copy) are stamped (`validation.assign_offsets` /
`stamp_offsets`), the active segment is rolled when due (`log_roll`), the batches are
written with one gathered write, and the producer state learns them (opening and
closing transactions; an aborted one's `.txnindex` entry goes to the marker's segment).
`append_control` takes the broker's own batches (transaction markers, coordinator
records): framing checked, producer epochs (and a marker's coordinator epoch) checked,
no client rules.

A Produce's usual partition data, one whole uncompressed CreateTime batch
(`single_batch`), takes `_append_one`: checked in one step
(`validation.check_produce_batch`), the same steps in the same order without the
general path's lists and loops, the timestamps decided inline when all are in range
(`check_timestamps` decides otherwise), and with `advance_hw` the high watermark moved
in the same hold of the lock. Its producer check is the general one
(`ProducerStateManager.validate`, i.e. `producer_rules.classify`), never a mirror of it:
tests/unit/storage/test_append_fast_path_producers.py pins its answers to `classify`.
A Produce over 1,000 partitions makes 1,000 appends: these layers were most of its CPU
(docs/benchmarks.md).

An append is all or nothing: it is the producer-state invariant of `log`'s module
docstring, kept by doing everything that can fail (validation, the roll, the `.log`
write) before anything that cannot be undone. A mixin of `Log` (storage/log_state.py
declares what it shares); it holds the log's lock as `log` describes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import NamedTuple

from tidegate.records.batch import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    stamp_header,
    validate_batch,
)
from tidegate.records.control import ControlType
from tidegate.storage.errors import RecordListTooLargeError
from tidegate.storage.log_state import LogState
from tidegate.storage.markers import marker_of
from tidegate.storage.producer_state import DuplicateBatch
from tidegate.storage.record_checks import (
    NO_TIMESTAMPS,
    BatchRecords,
    Scan,
    decompressed_limit,
    validate_records,
)
from tidegate.storage.txn_index import TxnIndexEntry
from tidegate.storage.validation import (
    assign_offsets,
    check_produce_batch,
    check_timestamps,
    stamp_offsets,
    validate_producer_batches,
)

__all__ = ["UNVERIFIED", "AppendInfo", "AppendingLog"]

# `Log.append`'s default for `verification_guard`: no KIP-890 check (internal callers).
UNVERIFIED: object = object()

_position, _header = itemgetter(0), itemgetter(1)  # of a (position, header) pair


class AppendInfo(NamedTuple):
    # A NamedTuple, not a frozen dataclass: made once per append, and the dataclass's
    # __init__ (one object.__setattr__ per field) cost ~1.5 us, a twentieth of a small
    # batch's append.
    first_offset: int  # -1 if nothing was appended
    last_offset: int
    log_append_time: int  # -1 under CreateTime
    log_start_offset: int
    max_timestamp: int
    record_count: int
    batches: list[BatchHeader]  # as stored (offsets assigned)
    # A producer's retry of a batch already in the log: nothing was written; the offsets
    # (and max_timestamp / log_append_time) are the original batch's.
    duplicate: bool = False


class AppendingLog(LogState):
    """A part of `Log` (storage/log_state.py declares what it shares)."""

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        now_ms: int | None = None,
        leader_epoch: int | None = None,
        single_batch: bool = False,
        verification_guard: object = UNVERIFIED,
        advance_hw: bool = False,
    ) -> AppendInfo:
        """Validate producer batches, check producer sequences, assign offsets, append.
        No fsync. Every record is parsed once to be checked (`record_checks`).
        `advance_hw`: move the high watermark to the new log end within the same hold
        of the lock (the embedded broker under a relaxed flush policy: ReplicaManager).

        The whole request is rejected (nothing appended) if any batch is invalid; a
        producer's retry of a cached batch is answered with `duplicate` set. An
        idempotent batch must come alone, as must any batch with `single_batch` (the
        Produce API's rule, see `validation`). When `verification_guard` is given (even
        None), a transactional batch that would start a transaction here needs the
        current guard from `begin_verification`, else InvalidTxnStateError (KIP-890).
        """
        now = self._clock.now_ms() if now_ms is None else now_ms
        cfg = self._config
        # a view is only read (written as it is, or copied): read-only bytes from here on
        view = data.toreadonly().cast("B") if isinstance(data, memoryview) else data
        # A Produce's usual partition data, one whole batch, is checked in one step
        # (`check_produce_batch`); anything else by the general steps
        one = check_produce_batch(view, cfg) if single_batch else None
        scans: list[Scan | None] = []  # the records scanned with the headers (one C call)
        if one is None:
            found = validate_producer_batches(view, cfg, single_batch=single_batch, scans=scans)
            if not found:
                return AppendInfo(-1, -1, -1, self._log_start_offset, -1, 0, [])
        if len(view) > cfg.segment_bytes:
            raise RecordListTooLargeError(
                f"{len(view)} bytes of batches exceed segment.bytes ({cfg.segment_bytes})"
            )
        if one is not None:
            header, scan = one
            # records scanned and valid, uncompressed, CreateTime, no LogAppendTime: what
            # `validate_records` would find fine without a decode (and its BatchRecords
            # is built only if a timestamp looks out of range: `_append_one`)
            if (scan is not None and scan[2] < 0 and not (scan[3] and cfg.compact)
                    and scan[0] is not None and scan[1] is not None
                    and not header.attributes & (COMPRESSION_MASK | TIMESTAMP_TYPE_MASK)
                    and not cfg.log_append_time):
                return self._append_one(
                    view if isinstance(view, memoryview) and view.readonly
                    else memoryview(view).toreadonly(),
                    header, scan[0], scan[1], now, leader_epoch, verification_guard,
                    advance_hw,
                )
            found = [(0, header)]
            scans.append(scan)
        checked = validate_records(view, found, cfg, scans=scans)  # every record (record_checks)
        # LogAppendTime rewrites timestamps under the CRC: a private copy; else the
        # request's bytes are written as they are, around new headers (stamp_offsets)
        buf: bytearray | memoryview
        if cfg.log_append_time:
            buf = bytearray(view)
        elif isinstance(view, memoryview):  # the Produce handler's (read-only already)
            buf = view if view.readonly else view.toreadonly()
        else:
            buf = memoryview(view).toreadonly()
        return self._append(
            buf,
            found,
            now,
            leader_epoch,
            from_client=True,
            records=checked,
            guard=verification_guard,
            advance_hw=advance_hw,
        )

    def _append_one(
        self,
        buf: memoryview,
        header: BatchHeader,
        lo: int,
        hi: int,
        now: int,
        leader_epoch: int | None,
        guard: object,
        advance_hw: bool,
    ) -> AppendInfo:
        """`_append` of one checked client batch (`append`'s fast case: records scanned
        valid, CreateTime, uncompressed; `lo`/`hi` its records' timestamp range): the
        same steps in the same order, without the general path's lists and loops."""
        cfg = self._config
        if cfg.log_append_time:  # the config changed since `append` read it
            found = [(0, header)]
            checked = validate_records(buf, found, cfg)
            return self._append(buf, found, now, leader_epoch, from_client=True,
                                records=checked, guard=guard, advance_hw=advance_hw)
        with self._lock:
            if self._closed:
                self._check_open()  # raises
            psm = self._producers
            if header.producer_id >= 0:
                dup = psm.validate(
                    header,
                    is_from_client=True,
                    coordinator_epoch=None,
                    verification_guard=guard,
                    check_verification=guard is not UNVERIFIED,
                )
                if dup is not None:
                    return self._duplicate(dup, False)
            # `check_timestamps`, decided here when everything is in range (the usual
            # case; the limits may be LONG_MAX: Python's ints do not overflow)
            lo_lim = now - cfg.timestamp_before_max_ms
            hi_lim = now + cfg.timestamp_after_max_ms
            bts, mts, n = header.base_timestamp, header.max_timestamp, header.records_count
            if not ((not n or (lo >= lo_lim and hi <= hi_lim))
                    and (bts < 0 or lo_lim <= bts <= hi_lim)
                    and (mts < 0 or lo_lim <= mts <= hi_lim)):
                records = [BatchRecords(None, n, lo, hi, (header, buf[HEADER_SIZE:header.size],
                                                          decompressed_limit(cfg)))
                           if n else NO_TIMESTAMPS]
                check_timestamps([header], now, cfg, records)
            seg = self._segs.segments[-1]  # the active segment, unless rolled now
            head, last = stamp_header(buf, 0, seg.next_offset, leader_epoch)
            last_offset = last.base_offset + last.last_offset_delta  # (not the property)
            if seg.should_roll(len(buf), last.max_timestamp, last_offset, now):
                seg = self._maybe_roll(len(buf), last.max_timestamp, last_offset, now)
            seg.append_batch(head, buf[HEADER_SIZE:], last)
            # From here nothing may fail (see `_append`). A client's batch is never a
            # marker: it completes no transaction.
            psm.update(last, now)
            if leader_epoch is not None:
                self._note_epochs((last,))
            if advance_hw:
                self._advance_hw_locked(last_offset + 1)
            lso = self._log_start_offset
        return AppendInfo(last.base_offset, last_offset, -1, lso, last.max_timestamp,
                          last.records_count, [last])

    def append_control(
        self,
        data: bytes,
        *,
        now_ms: int | None = None,
        coordinator_epoch: int | None = None,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Append broker-built batches (e.g. transaction markers), control ones included.
        Producer epochs are still checked (markers also against `coordinator_epoch`). A
        control batch must be a COMMIT/ABORT marker (else InvalidRecordError).
        `leader_epoch` is stamped as in `append` (outside the CRC)."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        found: list[tuple[int, BatchHeader]] = []
        types: list[ControlType | None] = []
        pos = 0
        while pos < len(data):
            header = validate_batch(data, pos)
            found.append((pos, header))
            types.append(marker_of(data, pos, check_crc=False)[0] if header.is_control else None)
            pos += header.size
        if not found:
            return AppendInfo(-1, -1, -1, self._log_start_offset, -1, 0, [])
        return self._append(
            bytearray(data),
            found,
            now,
            leader_epoch,
            from_client=False,
            coordinator_epoch=coordinator_epoch,
            control_types=types,
        )

    def _append(
        self,
        buf: bytearray | memoryview,
        found: list[tuple[int, BatchHeader]],
        now: int,
        leader_epoch: int | None,
        *,
        from_client: bool,
        coordinator_epoch: int | None = None,
        records: list[BatchRecords] | None = None,
        control_types: list[ControlType | None] | None = None,
        guard: object = UNVERIFIED,
        advance_hw: bool = False,
    ) -> AppendInfo:
        cfg = self._config
        log_append = cfg.log_append_time
        positions = list(map(_position, found))
        with self._lock:
            self._check_open()
            psm = self._producers
            for _, h in found:
                if h.producer_id >= 0:
                    dup = psm.validate(
                        h,
                        is_from_client=from_client,
                        coordinator_epoch=coordinator_epoch,
                        verification_guard=guard,
                        check_verification=guard is not UNVERIFIED,
                    )
                    if dup is not None:  # only ever the request's single batch
                        return self._duplicate(dup, log_append)
            if from_client:
                check_timestamps(list(map(_header, found)), now, cfg, records)
            data: bytearray | Sequence[bytearray | memoryview]
            if log_append and not isinstance(buf, bytearray):  # the config changed since
                buf = bytearray(buf)
            if isinstance(buf, bytearray):  # a private copy: patched in place
                headers = assign_offsets(
                    buf,
                    positions,
                    self.log_end_offset,
                    log_append_time=now if log_append else None,
                    leader_epoch=leader_epoch,
                )
                data = buf
            else:  # read-only bytes of the request: new headers, the rest as it is
                headers, data = stamp_offsets(
                    buf, positions, self.log_end_offset, leader_epoch=leader_epoch
                )
            last = headers[-1]
            # one batch per request is the rule (Produce v3+): no generator for it
            max_ts = last.max_timestamp if len(headers) == 1 else max(
                h.max_timestamp for h in headers
            )
            seg = self._maybe_roll(len(buf), max_ts, last.last_offset, now)
            seg.append(data, headers, positions)
            # The batches are in the log: from here on nothing may fail the append, or
            # the log would hold batches the producer state does not know (a retry
            # written twice, a transaction open on disk but not in memory). An aborted
            # transaction's index entry is in memory at once; its file write may stay
            # pending on a full disk (`flush` writes it, and fails until it can).
            for h, ctype in zip(headers, control_types or repeat(None)):
                done = psm.update(h, now, coordinator_epoch=coordinator_epoch, control_type=ctype)
                if done is not None and done.is_aborted:
                    stable = psm.index_stable_offset(done)
                    seg.txn_index.append(
                        TxnIndexEntry(done.producer_id, done.first_offset, done.last_offset, stable)
                    )
            if leader_epoch is not None:
                self._note_epochs(headers)
            if advance_hw:
                self._advance_hw_locked(last.last_offset + 1)
            lso = self._log_start_offset
        # By position (the keywords' binding cost as much again as the tuple's making)
        return AppendInfo(
            headers[0].base_offset,  # first_offset
            last.last_offset,  # last_offset
            now if log_append else -1,  # log_append_time
            lso,  # log_start_offset
            max_ts,  # max_timestamp
            last.records_count if len(headers) == 1 else sum(  # record_count
                h.records_count for h in headers
            ),
            headers,  # batches
        )

    def _duplicate(self, dup: DuplicateBatch, log_append: bool) -> AppendInfo:
        return AppendInfo(
            first_offset=dup.first_offset,
            last_offset=dup.last_offset,
            log_append_time=dup.timestamp if log_append else -1,
            log_start_offset=self._log_start_offset,
            max_timestamp=dup.timestamp,
            record_count=0,
            batches=[],
            duplicate=True,
        )
