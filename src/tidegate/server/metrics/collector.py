"""The /metrics collector: broker state read when Prometheus scrapes, named as Kafka's.

Names are those the Prometheus JMX exporter's Kafka rules (kafka-2_0_0.yml,
lowercased) give Kafka's MBeans — `kafka.log:type=Log,name=Size,topic=t,partition=0`
becomes `kafka_log_log_size{topic="t",partition="0"}`, a `...PerSec` meter's count
`..._total` — so existing Kafka dashboards and alerts mostly work; consumer lag uses
kafka_exporter's `kafka_consumergroup_*` names, which Kafka dashboards use for lag.
What Kafka has no MBean for is `tidegate_*`. docs/observability.md lists every family
with the MBean it mirrors.

A scrape reads in-memory values only: offsets, sizes and segment counts the logs keep,
the coordinators' loaded state, counters (requests.py, state.py). No fsync, no log read,
no request to another broker. It runs on the event loop, so it sees a consistent
broker; a topic deleted meanwhile simply is not in the next scrape (a log closed under
the scrape is skipped), and the per-topic request counters of deleted topics are
dropped here as Kafka removes their MBeans.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from tidegate.server.dispatch import api_name
from tidegate.server.metrics.requests import Histogram
from tidegate.server.metrics.state import MetricsState

if TYPE_CHECKING:
    from tidegate.server.broker import Broker

_OPEN_TXN = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")
_MAX_TXN_SERIES = 1000  # per-transaction age series kept (oldest first)


def _error_name(code: int) -> str:
    from tidegate.common.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


@functools.cache
def _request_name(api_key: int) -> str:
    """Kafka's name of an API as RequestMetrics tags it: init_producer_id -> InitProducerId."""
    return "".join(w.capitalize() for w in api_name(api_key).split("_"))


def _hist(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=labels)


def _add_hist(fam: HistogramMetricFamily, values: list[str], h: Histogram) -> None:
    fam.add_metric(values, h.cumulative(), h.sum)


class BrokerCollector:
    def __init__(self, broker: Broker, state: MetricsState) -> None:
        self.broker = broker
        self.state = state
        self.last_scrape_ms = 0.0

    def collect(self) -> Iterator[Metric]:
        began = time.perf_counter()
        yield from self._broker()
        yield from self._requests()
        yield from self._logs()
        yield from self._transactions()
        yield from self._groups()
        yield from self._clients()
        took = GaugeMetricFamily("tidegate_metrics_scrape_duration_seconds",
                                 "Time the previous scrape's broker collector took")
        took.add_metric([], self.last_scrape_ms / 1000.0)
        yield took
        self.last_scrape_ms = (time.perf_counter() - began) * 1000.0

    # -- the broker -----------------------------------------------------------------------

    def _broker(self) -> Iterator[Metric]:
        b, st = self.broker, self.state
        state = GaugeMetricFamily("kafka_server_kafkaserver_brokerstate",
                                  "Broker state (kafka.server:type=KafkaServer,name=BrokerState):"
                                  " 3 running, 2 recovering, 7 shutting down")
        ready = st.readiness
        state.add_metric([], 7 if ready.stopping else 3 if ready.listening else 2)
        yield state
        up = GaugeMetricFamily("tidegate_uptime_seconds", "Seconds since the broker started")
        up.add_metric([], (b.clock.now_ms() - st.started_ms) / 1000.0)
        yield up
        conns = GaugeMetricFamily(
            "kafka_server_socketservermetrics_connection_count",
            "Open client connections per listener (socket-server-metrics connection-count)",
            labels=["listener"])
        for name, n in sorted(st.connections().items()):
            conns.add_metric([name], n)
        yield conns
        purg = GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting: Produce for an fsync (or acks=all), Fetch for data",
            labels=["delayedOperation"])
        purg.add_metric(["Produce"], b.group_commit.waiting)
        purg.add_metric(["Fetch"], b.replicas.waiting_fetches)
        yield purg
        sessions = b.fetch_sessions
        n_sessions = GaugeMetricFamily(
            "kafka_server_fetchsessioncache_numincrementalfetchsessions",
            "Fetch sessions cached (kafka.server:type=FetchSessionCache,"
            "name=NumIncrementalFetchSessions)")
        n_sessions.add_metric([], len(sessions))
        yield n_sessions
        n_parts = GaugeMetricFamily(
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "Partitions held by cached fetch sessions (kafka.server:type=FetchSessionCache,"
            "name=NumIncrementalFetchPartitionsCached)")
        n_parts.add_metric([], sessions.partitions_cached)
        yield n_parts
        evictions = CounterMetricFamily(
            "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
            "Fetch sessions evicted for new ones (kafka.server:type=FetchSessionCache,"
            "name=IncrementalFetchSessionEvictionsPerSec)")
        evictions.add_metric([], sessions.evictions)
        yield evictions
        fsync = _hist("kafka_log_logflushstats_logflushrateandtimems",
                      "fsync latency in ms (kafka.log:type=LogFlushStats,"
                      "name=LogFlushRateAndTimeMs)", [])
        _add_hist(fsync, [], st.fsync_ms)
        yield fsync
        batch = _hist("tidegate_log_group_commit_requests",
                      "Requests released by one group-commit fsync", [])
        _add_hist(batch, [], st.group_commit)
        yield batch
        load = GaugeMetricFamily(
            "tidegate_coordinator_load_time_ms",
            "Time the coordinator took to load its partitions at start "
            "(group/transaction-coordinator-metrics partition-load-time)",
            labels=["coordinator"])
        for name, ms in sorted(st.load_time_ms.items()):
            load.add_metric([name], ms)
        yield load

    # -- requests, errors, bytes ----------------------------------------------------------

    def _requests(self) -> Iterator[Metric]:
        rm = self.state.requests
        reqs = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                   "Requests per API and version (RequestsPerSec)",
                                   labels=["request", "version"])
        errs = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                   "Error codes in responses per API (ErrorsPerSec)",
                                   labels=["request", "error"])
        total = _hist("kafka_network_requestmetrics_totaltimems",
                      "Request time in ms, read to answered (TotalTimeMs)", ["request"])
        queue = _hist("kafka_network_requestmetrics_requestqueuetimems",
                      "Time in ms a request waited behind its connection's earlier requests "
                      "(RequestQueueTimeMs)", ["request"])
        local = _hist("kafka_network_requestmetrics_localtimems",
                      "Time in ms the request's handler ran (LocalTimeMs)", ["request"])
        for key, stats in sorted(rm.apis.items()):
            name = _request_name(key)
            for version, n in sorted(stats.requests.items()):
                reqs.add_metric([name, str(version)], n)
            for code, n in sorted(stats.errors.items()):
                errs.add_metric([name, _error_name(code)], n)
            _add_hist(total, [name], stats.total)
            _add_hist(queue, [name], stats.queue)
            _add_hist(local, [name], stats.local)
        yield from (reqs, errs, total, queue, local)
        ends = CounterMetricFamily("tidegate_transaction_endtxn",
                                   "EndTxn requests answered NONE, by result",
                                   labels=["result"])
        ends.add_metric(["commit"], rm.end_txn[True])
        ends.add_metric(["abort"], rm.end_txn[False])
        yield ends
        topics = self.broker.logs.topics
        for name in [t for t in rm.topics if t not in topics]:
            rm.forget_topic(name)  # deleted: its meters go, as Kafka's do
        fams = {
            "bytes_in": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_bytesin", "Bytes appended (BytesInPerSec)",
                labels=["topic"]),
            "messages_in": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_messagesin",
                "Records appended (MessagesInPerSec)", labels=["topic"]),
            "bytes_out": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_bytesout",
                "Bytes fetched by consumers (BytesOutPerSec)", labels=["topic"]),
            "replication_bytes_out": CounterMetricFamily(
                "kafka_server_brokertopicmetrics_replicationbytesout",
                "Bytes fetched by follower brokers (ReplicationBytesOutPerSec)",
                labels=["topic"]),
        }
        for topic, ts in sorted(rm.topics.items()):
            for attr, fam in fams.items():
                fam.add_metric([topic], getattr(ts, attr))
        yield from fams.values()

    # -- partitions -----------------------------------------------------------------------

    def _logs(self) -> Iterator[Metric]:
        lab = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size", "Partition size in bytes", labels=lab)
        segs = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments", labels=lab)
        leo = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset", labels=lab)
        lso_ = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset",
                                 labels=lab)
        hw = GaugeMetricFamily("tidegate_log_high_watermark", "High watermark", labels=lab)
        lso = GaugeMetricFamily("tidegate_log_last_stable_offset", "Last stable offset",
                                labels=lab)
        lag = GaugeMetricFamily(
            "kafka_cluster_partition_laststableoffsetlag",
            "High watermark minus last stable offset: what open transactions hold back "
            "from read_committed consumers (LastStableOffsetLag)", labels=lab)
        ur = GaugeMetricFamily("kafka_cluster_partition_underreplicated",
                               "1 if a partition led here has followers out of its ISR",
                               labels=lab)
        isr = GaugeMetricFamily("kafka_cluster_partition_insyncreplicascount",
                                "ISR size of a partition led here", labels=lab)
        reps = GaugeMetricFamily("kafka_cluster_partition_replicascount",
                                 "Replicas of a partition led here", labels=lab)
        partitions = leaders = under = 0
        cluster = self.broker.replicas.cluster
        for part in list(self.broker.replicas.partitions()):
            lg = part.log
            try:
                labels = [part.topic, str(part.index)]
                segments = lg.segments
                size.add_metric(labels, sum(s.size for s in segments))
                segs.add_metric(labels, len(segments))
                leo.add_metric(labels, lg.log_end_offset)
                lso_.add_metric(labels, lg.log_start_offset)
                h, s = lg.high_watermark, lg.last_stable_offset
            except Exception:  # closed by a delete under the scrape: skip it
                continue
            hw.add_metric(labels, h)
            lso.add_metric(labels, s)
            partitions += 1
            if not part.is_leader:
                continue
            leaders += 1
            lag.add_metric(labels, max(h - s, 0))
            lead = part.leadership
            if cluster and lead is not None:
                n_isr, n_reps = len(lead.state.isr), len(lead.state.replicas)
                under += n_isr < n_reps
                ur.add_metric(labels, int(n_isr < n_reps))
                isr.add_metric(labels, n_isr)
                reps.add_metric(labels, n_reps)
        yield from (size, segs, leo, lso_, hw, lso, lag)
        if cluster:
            yield from (ur, isr, reps)
        rm = [
            ("kafka_server_replicamanager_partitioncount", "Partitions hosted here", partitions),
            ("kafka_server_replicamanager_leadercount", "Partitions led here", leaders),
            ("kafka_server_replicamanager_underreplicatedpartitions",
             "Partitions led here with a follower out of the ISR", under),
        ]
        for name, doc, value in rm:
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], value)
            yield g
        if cluster:
            yield from self._cluster()

    def _cluster(self) -> Iterator[Metric]:
        st = self.state
        for name, doc, value in (
            ("kafka_server_replicamanager_isrshrinks", "ISR shrinks proposed (IsrShrinksPerSec)",
             st.isr_shrinks),
            ("kafka_server_replicamanager_isrexpands",
             "ISR expansions proposed (IsrExpandsPerSec)", st.isr_expands),
        ):
            c = CounterMetricFamily(name, doc)
            c.add_metric([], value)
            yield c
        md = self.broker.metadata
        offline = 0
        for name in md.topic_names():
            tv = md.topic(name)
            if tv is not None:
                offline += sum(1 for p in tv.partitions if p.leader < 0)
        active = int(md.controller_id == self.broker.node_id)
        for name, doc, value in (
            ("kafka_controller_kafkacontroller_activecontrollercount",
             "1 on the active controller", active),
            ("kafka_controller_kafkacontroller_offlinepartitionscount",
             "Partitions without a leader (this broker's view of the cluster)", offline),
        ):
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], value)
            yield g

    # -- transactions ---------------------------------------------------------------------

    def _transactions(self) -> Iterator[Metric]:
        tc = self.broker.txn_coordinator
        now = self.broker.clock.now_ms()
        by_state: dict[str, int] = {}
        ages: list[tuple[int, str, int]] = []
        for _p, shard in tc.runtime.active_shards():
            for meta in shard.txns.values():
                state = meta.state.wire_name
                by_state[state] = by_state.get(state, 0) + 1
                if state in _OPEN_TXN and meta.txn_start_ms >= 0:
                    ages.append((meta.txn_start_ms, meta.transactional_id, meta.producer_id))
        states = GaugeMetricFamily("tidegate_transactions",
                                   "transactional.ids known to this coordinator, by state",
                                   labels=["state"])
        for state, n in sorted(by_state.items()):
            states.add_metric([state], n)
        yield states
        ongoing = GaugeMetricFamily("tidegate_transactions_open",
                                    "Transactions open (Ongoing or Prepare*) on this coordinator")
        ongoing.add_metric([], len(ages))
        yield ongoing
        oldest = GaugeMetricFamily("tidegate_transaction_oldest_age_seconds",
                                   "Age of the oldest open transaction (0: none)")
        oldest.add_metric([], (now - min(a[0] for a in ages)) / 1000.0 if ages else 0.0)
        yield oldest
        age = GaugeMetricFamily("tidegate_transaction_age_seconds",
                                "Age of each open transaction (the oldest 1000)",
                                labels=["transactional_id", "producer_id"])
        for start, tid, pid in sorted(ages)[:_MAX_TXN_SERIES]:
            age.add_metric([tid, str(pid)], (now - start) / 1000.0)
        yield age
        hanging = tc.hanging
        hang = GaugeMetricFamily(
            "tidegate_transactions_hanging",
            "Transactions open in a partition that no coordinator knows (server/hanging.py; "
            "checked every transaction.hanging.check.interval.ms)")
        hang.add_metric([], len(hanging))
        yield hang
        hang_p = GaugeMetricFamily("tidegate_transaction_hanging_since_seconds",
                                   "Hanging transactions: seconds since first seen open",
                                   labels=["topic", "partition", "producer_id"])
        for h in hanging[:_MAX_TXN_SERIES]:
            hang_p.add_metric([h.topic, str(h.partition), str(h.producer_id)],
                              (now - h.open_since_ms) / 1000.0)
        yield hang_p
        markers = CounterMetricFamily("tidegate_transaction_markers",
                                      "Transaction markers written (one per partition)",
                                      labels=["result"])
        markers.add_metric(["commit"], self.state.markers[True])
        markers.add_metric(["abort"], self.state.markers[False])
        yield markers

    # -- consumer groups ------------------------------------------------------------------

    def _groups(self) -> Iterator[Metric]:
        gc = self.broker.group_coordinator
        members = GaugeMetricFamily("kafka_consumergroup_members", "Members of the group",
                                    labels=["consumergroup"])
        state = GaugeMetricFamily("tidegate_consumergroup_state",
                                  "1 for the group's current state", labels=["consumergroup",
                                                                             "state"])
        lab = ["consumergroup", "topic", "partition"]
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "Committed offset", labels=lab)
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "High watermark minus committed offset", labels=lab)
        total_lag = GaugeMetricFamily("kafka_consumergroup_lag_sum",
                                      "Lag summed over the group's partitions",
                                      labels=["consumergroup"])
        by_state: dict[str, int] = {}
        logs = self.broker.logs
        for _p, shard in gc.runtime.active_shards():
            for gid, group in list(shard.groups.items()):
                st = str(group.state.value)
                by_state[st] = by_state.get(st, 0) + 1
                members.add_metric([gid], len(group.members))
                state.add_metric([gid, st], 1)
                summed = 0
                for (topic, index), om in list(group.offsets.items()):
                    labels = [gid, topic, str(index)]
                    current.add_metric(labels, om.offset)
                    lg = logs.get_log(topic, index)
                    if lg is None:
                        continue
                    behind = max(lg.high_watermark - om.offset, 0)
                    summed += behind
                    lag.add_metric(labels, behind)
                total_lag.add_metric([gid], summed)
        yield from (members, state, current, lag, total_lag)
        num = GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups",
                                "Groups on this coordinator (NumGroups)")
        num.add_metric([], sum(by_state.values()))
        yield num
        per = GaugeMetricFamily("tidegate_consumergroups", "Groups by state", labels=["state"])
        for st, n in sorted(by_state.items()):
            per.add_metric([st], n)
        yield per

    # -- KIP-714 client metrics -----------------------------------------------------------

    def _clients(self) -> Iterator[Metric]:
        tel = self.state.telemetry
        fams: list[Metric] = []
        for name, kind, samples in tel.families():
            if name.startswith(("kafka_", "tidegate_", "process_", "python_")):
                name = "client_" + name  # a client may not shadow the broker's own
            fam: Any
            if kind == "counter":
                fam = CounterMetricFamily(name, "KIP-714 client metric", labels=None)
            else:
                fam = GaugeMetricFamily(name, "KIP-714 client metric", labels=None)
            for labels, value in samples:
                fam.add_sample(fam.name + ("_total" if kind == "counter" else ""),
                               dict(labels), value)
            fams.append(fam)
        yield from fams
        clients = GaugeMetricFamily("tidegate_client_metrics_clients",
                                    "Client instances pushing KIP-714 metrics")
        clients.add_metric([], len(tel.clients))
        yield clients
        pushes = CounterMetricFamily("tidegate_client_metrics_pushes",
                                     "PushTelemetry requests, by error", labels=["error"])
        pushes.add_metric(["NONE"], tel.pushes)
        for code, n in sorted(tel.rejected.items()):
            pushes.add_metric([_error_name(code)], n)
        yield pushes

