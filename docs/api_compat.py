"""The table of docs/compatibility.md: every Kafka API key, the versions Tidegate serves
(embedded and in cluster mode, read from the dispatcher) and one line on what it does.

Imported by docs/gen_tables.py, which writes the table into the page and checks it
(`--check`, run by tests/integration/test_examples.py). The key list is kio's index plus
the ZooKeeper-era inter-broker APIs kio lacks; a key with no line in `NOTES` fails the
generation, so a new API in kio cannot slip into the page undescribed.
"""

from __future__ import annotations

from kio.schema.index import api_key_map, schema_name_map

from tidegate.protocol import hand_written
from tidegate.server.dispatch import Dispatcher, default_dispatcher, register_cluster_apis

# Kafka's inter-broker APIs of ZooKeeper mode, removed in Kafka 4.0 and absent from kio.
OLD_APIS: dict[int, str] = {
    4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown",
}

# Registered by server/metrics/wiring.py only while `http.listeners` is on.
NEEDS_HTTP = {71, 72}

_ZK = "ZooKeeper-mode inter-broker API; Tidegate's brokers learn this from ZooKeeper " \
      "watches instead, so it is not served"
_KRAFT = "KRaft controller/quorum API; Tidegate's cluster mode runs on ZooKeeper, so " \
         "not served"
_SHARE = "Share groups (KIP-932): not built"

NOTES: dict[int, str] = {
    0: "Writes one record batch per partition (v3+ format only); acks 0/1/all, "
       "idempotent and transactional batches, KIP-890 verification, per-record errors.",
    1: "Reads whole batches to the HW (LSO for read_committed) with long polling; "
       "KIP-227 fetch sessions (incremental fetches); KIP-392 closest replica.",
    2: "Offsets by timestamp and -1..-5 (latest, earliest, max timestamp, earliest local "
       "and tiered = earliest: no tiered storage).",
    3: "Brokers, topics, leaders, topic auto-creation, authorized operations; "
       "ACL-filtered topic list.",
    4: _ZK + ".",
    5: _ZK + ".",
    6: _ZK + ".",
    7: "Cluster mode only: a stopping broker moves its leaderships away first.",
    8: "Commits to `__consumer_offsets` for classic and KIP-848 groups (member-epoch "
       "fencing); simple (group-less) commits.",
    9: "Committed offsets, several groups per request from v8; stable offsets "
       "(UNSTABLE_OFFSET_COMMIT while a transaction holds one).",
    10: "Group and transaction coordinators (batched keys v4+); share-group keys are "
        "INVALID_REQUEST.",
    11: "Classic group protocol: static members, KIP-394 member id round trip.",
    12: "Classic group heartbeat.",
    13: "Classic group leave, batched members (v3+).",
    14: "Classic group assignment distribution.",
    15: "Classic groups; member metadata only for Stable groups (Kafka's summary).",
    16: "Classic and consumer groups, state filter (v4+) and type filter (v5+).",
    17: "The SASL mechanisms of docs/security.md (PLAIN, SCRAM-SHA-256/512, ...).",
    18: "Versions below and features (KIP-584): transaction.version, group.version, "
        "metadata.version.",
    19: "Partitions, replication factor, configs, validate_only; replica assignments in "
        "cluster mode; configs hidden without DescribeConfigs (topic_config_error_code).",
    20: "By name or topic id.",
    21: "Moves a partition's log start offset (Kafka's checks and errors).",
    22: "Producer ids and epochs; transactional ids with fencing; KIP-360 epoch bump; "
        "KIP-939 two-phase commit (v6; needs TwoPhaseCommit on the transactional id).",
    23: "Last offset of a leader epoch (the epoch history in cluster mode).",
    24: "Adds partitions to a transaction; v4+ (broker-to-broker, verify_only) too.",
    25: "Adds a group's offsets partition to a transaction.",
    26: "Commit or abort; v5 returns the bumped epoch (transaction version 2).",
    27: "COMMIT/ABORT control batches; also what `tidegate txn abort` sends for a hanging "
        "transaction. v0 is not in kio.",
    28: "Pending offsets visible at the COMMIT marker; v5 adds the partition itself "
        "(transaction version 2).",
    29: "ACLs (v0 predates pattern types and kio); SECURITY_DISABLED without an "
        "authorizer.",
    30: "As DescribeAcls; durable before the answer.",
    31: "As DescribeAcls.",
    32: "Topic, broker, broker-logger and group resources, with sources and synonyms; "
        "no client-metrics resources.",
    33: "Whole-set config changes (topics, broker dynamic keys).",
    34: "Moves a partition to another of `log.dirs` (closed, copied, reopened; answers "
        "when done; Kafka copies online). Embedded broker only.",
    35: "One result per `log.dirs` directory: partitions' sizes, the volume's space; an "
        "offline directory answers KAFKA_STORAGE_ERROR.",
    36: "The SASL exchange; KIP-368 re-authentication (session lifetime).",
    37: "Adds partitions (never removes, as Kafka).",
    38: "Delegation tokens: not built.",
    39: "Delegation tokens: not built.",
    40: "Delegation tokens: not built.",
    41: "Delegation tokens: not built.",
    42: "Deletes Empty groups with their offsets.",
    43: "Preferred and unclean leader election (cluster mode; the one node embedded).",
    44: "SET/DELETE/APPEND/SUBTRACT on topics, broker and group resources.",
    45: "Reassignments through the controller (cluster mode).",
    46: "Ongoing reassignments.",
    47: "Deletes a group's offsets for partitions no member consumes.",
    48: "Quotas by user, client id or both (KIP-546).",
    49: "As DescribeClientQuotas; kept in the log dir or ZooKeeper.",
    50: "SCRAM users (salted and hashed, in the log dir or ZooKeeper).",
    51: "As DescribeUserScramCredentials.",
    52: _KRAFT + ".",
    53: _KRAFT + ".",
    54: _KRAFT + ".",
    55: "KRaft quorum description: not served (no KRaft quorum).",
    56: "KRaft-era ISR change API: not served (the ZooKeeper controller's znodes instead).",
    57: "Feature level changes: not served; levels are fixed by broker config.",
    58: "KRaft forwarding envelope: not served.",
    59: _KRAFT + ".",
    60: "Brokers, controller id, authorized operations; endpoint type 2 (controllers, "
        "v1+) is MISMATCHED_ENDPOINT_TYPE as on a Kafka broker; v2: no broker is fenced.",
    61: "A partition's producers and their open transactions (KIP-664).",
    62: _KRAFT + ".",
    63: _KRAFT + ".",
    64: _KRAFT + ".",
    65: "The coordinator's view of transactional ids (KIP-664).",
    66: "Transactions filtered by state, producer id and (v1+) duration; v2 "
        "transactional-id pattern (matched whole, as Java's matches()); Dead never listed.",
    67: _KRAFT + ".",
    68: "KIP-848 consumer groups: member epochs, server-side uniform/range assignors.",
    69: "KIP-848 groups: members, assignments, target assignment.",
    70: _KRAFT + ".",
    71: "KIP-714 client metrics; only while `http.listeners` is on.",
    72: "KIP-714 pushed client metrics, re-exported on /metrics; only with "
        "`http.listeners`.",
    73: "KRaft JBOD directory assignment: not served.",
    74: "Client-metrics resources (v0, was ListClientMetricsResources); v1 (Kafka 4.1) "
        "also topics, groups and the broker, by resource type.",
    75: "KIP-966 describe of topics with cursor pagination; eligible-leader-replica "
        "fields always empty (no ELR).",
    76: _SHARE + ".",
    77: _SHARE + ".",
    78: _SHARE + ".",
    79: _SHARE + ".",
    80: _KRAFT + ".",
    81: _KRAFT + ".",
    82: _KRAFT + ".",
    83: _SHARE + ".",
    84: _SHARE + ".",
    85: _SHARE + ".",
    86: _SHARE + ".",
    87: _SHARE + ".",
    88: "Kafka Streams groups (KIP-1071): not built.",
    89: "Kafka Streams groups (KIP-1071): not built.",
    90: _SHARE + ".",
    91: _SHARE + ".",
    92: _SHARE + ".",
}


def _kafka_name(key: int) -> str:
    if key in OLD_APIS:
        return OLD_APIS[key]
    return "".join(part.capitalize() for part in api_key_map[key].split("_"))


def _kio_versions(key: int) -> str:
    own = hand_written.version_range(key)
    if own is not None:  # kio lacks it: Tidegate's own codec (protocol/hand_written.py)
        return f"{own[0]}-{own[1]} (own codec)"
    if key not in api_key_map:
        return "-"
    versions = sorted(schema_name_map[api_key_map[key]].keys())
    return f"{versions[0]}-{versions[-1]}"


def _served(d: Dispatcher, key: int) -> str:
    api = d.apis.get(key)
    return "-" if api is None else f"{api.min_version}-{api.max_version}"


def compat_table() -> str:
    embedded = default_dispatcher()
    cluster = default_dispatcher()
    register_cluster_apis(cluster)
    keys = sorted(set(api_key_map) | set(OLD_APIS))
    missing = [k for k in keys if k not in NOTES]
    if missing:
        raise SystemExit(f"docs/api_compat.py: no NOTES line for API keys {missing}")
    rows = ["| key | API | kio's versions | embedded | cluster | what Tidegate does |",
            "|---|---|---|---|---|---|"]
    for key in keys:
        emb, clu = _served(embedded, key), _served(cluster, key)
        if key in NEEDS_HTTP:  # the dispatcher gets these from the metrics wiring
            emb = clu = f"{_kio_versions(key)}*"
        rows.append(f"| {key} | {_kafka_name(key)} | {_kio_versions(key)} | {emb} | {clu} "
                    f"| {NOTES[key].replace('|', chr(92) + '|')} |")
    return "\n".join(rows)
