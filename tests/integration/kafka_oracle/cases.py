"""The differential cases: valid, malformed, out-of-range and misuse requests per API.

Each case makes its own topics (named after the case) so that cases do not depend on one
another's order; both brokers see the same steps in the same order. `sample=True` marks
the few that `make test` runs; `make soak` runs them all.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from typing import Any

from tests.integration.kafka_oracle.differential import Case, Step, wait_topics_served
from tests.integration.rawclient import RawClient

from tidegate.protocol.headers import encode_request_header, parse_response_header
from tidegate.protocol.messages import decode, response_class
from tidegate.records.builder import build_batch

TS = 1_700_000_000_000
UNKNOWN_ID = uuid.UUID("6f1c1c7e-0b1d-4c55-9a4e-2f0d7c1e9b3a")  # no topic's id


def batch(n: int = 1) -> bytes:
    return build_batch([(TS + i, b"k", b"v%d" % i, ()) for i in range(n)])


def corrupt_crc() -> bytes:
    b = bytearray(batch())
    b[-1] ^= 0xFF
    return bytes(b)


def bad_magic() -> bytes:
    b = bytearray(batch())
    b[16] = 1  # the magic byte: a v2 header claiming v1
    return bytes(b)


def create(name: str, partitions: int = 1, rf: int = 1,
           configs: dict[str, str] | None = None, validate_only: bool = False) -> Step:
    return Step(19, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 10000, "validate_only": validate_only,
    }, view=_create_view, settle=None if validate_only else wait_topics_served)


def _create_view(r: Any) -> Any:
    # the configs a successful create echoes are Kafka's whole topic config set; compare
    # the outcome (error, partitions, replication factor), not the config catalogue
    for t in r["topics"]:
        t.pop("configs", None)
    return r


def produce(topic: str, records: bytes, acks: int = -1, partition: int = 0) -> Step:
    return Step(0, {"acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})


def list_offsets(topic: str, *timestamps: int, partition: int = 0) -> Step:
    return Step(2, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": t}
                                       for t in timestamps]}]})


def fetch(topic: str, offset: int, partition: int = 0) -> Step:
    return Step(1, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": topic, "partitions": [
                        {"partition": partition, "fetch_offset": offset,
                         "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                         "log_start_offset": -1}]}],
                    "forgotten_topics_data": [], "rack_id": ""},
                view=_fetch_view)


def _fetch_view(r: Any) -> Any:
    for t in r["responses"]:
        for p in t["partitions"]:
            # Kafka sends null records with an error, Tidegate empty ones: both "nothing"
            if p.get("records") in (None, "<0 bytes>"):
                p["records"] = None
            # null and empty lists of aborted transactions mean the same to clients
            if not p.get("aborted_transactions"):
                p["aborted_transactions"] = None
    return r


def session_fetch(topic: str, epoch: int, offsets: dict[int, int],
                  session: int | None = None, forget: tuple[int, ...] = ()) -> Step:
    """A Fetch v12 in a fetch session (KIP-227): `session` None uses the id the case's
    step 2 opened; the id itself differs by broker, so only whether one is open is
    compared."""
    def data(raw: list[Any]) -> dict[str, Any]:
        sid = session if session is not None else int(raw[2].session_id) if epoch else 0
        return {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": sid,
                "session_epoch": epoch,
                "topics": [{"topic": topic, "partitions": [
                    {"partition": p, "fetch_offset": o, "partition_max_bytes": 1 << 20,
                     "current_leader_epoch": -1, "log_start_offset": -1}
                    for p, o in offsets.items()]}] if offsets else [],
                "forgotten_topics_data": (
                    [{"topic": topic, "partitions": list(forget)}] if forget else []),
                "rack_id": ""}

    def view(r: Any) -> Any:
        r["session_id"] = "open" if r["session_id"] else 0
        return _fetch_view(r)
    return Step(1, data, version=12, view=view)


def metadata(*topics: str, auto_create: bool = False) -> Step:
    return Step(3, {"topics": [{"name": t} for t in topics],
                    "allow_auto_topic_creation": auto_create,
                    "include_topic_authorized_operations": False}, view=_metadata_view)


def _metadata_view(r: Any) -> Any:
    # Kafka lists a topic's partitions in no set order (a hash map's)
    for t in r["topics"]:
        t["partitions"].sort(key=lambda p: p["partition_index"])
    return r


def _metadata_errors(r: Any) -> Any:
    return [(t["name"], t["error_code"]) for t in r["topics"]]


def describe_configs(rtype: int, name: str, *keys: str) -> Step:
    return Step(32, {"resources": [{"resource_type": rtype, "resource_name": name,
                                    "configuration_keys": list(keys) or None}],
                     "include_synonyms": False, "include_documentation": False})


def alter_configs(rtype: int, name: str, key: str, value: str | None, op: int = 0) -> Step:
    return Step(44, {"resources": [{"resource_type": rtype, "resource_name": name,
                                    "configs": [{"name": key, "config_operation": op,
                                                 "value": value}]}],
                     "validate_only": False})


def legacy_alter_configs(rtype: int, name: str, configs: dict[str, str],
                         validate_only: bool = False) -> Step:
    """AlterConfigs (API 33, the pre-KIP-339 one): the resource's overrides become
    exactly `configs`."""
    return Step(33, {"resources": [{"resource_type": rtype, "resource_name": name,
                                    "configs": [{"name": k, "value": v}
                                                for k, v in configs.items()]}],
                     "validate_only": validate_only})


def _wait_until(what: str, api: int, version: int, request: dict[str, Any],
                done: Callable[[Any], bool], timeout: float = 15.0
                ) -> Callable[[RawClient, Any], None]:
    """A settle step: repeat request (`api`, `version`) until `done(response)`, or raise
    TimeoutError after `timeout` s naming `what` and the last response. Kafka 4 applies
    some changes after answering (its broker's metadata publisher, its transaction
    markers run later); Tidegate before: the next step compares once both have."""

    def settle(client: RawClient, _: Any) -> None:
        deadline = time.monotonic() + timeout
        while not done(r := client.call(api, version, request)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: {r}")
            time.sleep(0.05)

    return settle


def _wait_deletable(topic: str) -> Callable[[RawClient, Any], None]:
    """After altering cleanup.policy to include delete: until a no-op DeleteRecords
    (offset 0) on partition 0 is no longer refused."""
    return _wait_until(
        f"{topic}: DeleteRecords still refused", 21, 2,
        {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 0}]}],
         "timeout": 5000},
        lambda r: r.topics[0].partitions[0].error_code == 0)


def _wait_config(rtype: int, resource: str, key: str, listed: bool, value: str | None = None
                 ) -> Callable[[RawClient, Any], None]:
    """After an alter: until DescribeConfigs lists `key` (or not), with `value` if one is
    given (a sensitive config's is never shown). Earlier alters of the same resource are
    applied in order, so they are in too."""

    def done(r: Any) -> bool:
        shown = [c.value for c in r.results[0].configs]
        return bool(shown) == listed and (value is None or shown == [value])

    return _wait_until(
        f"{resource} {key}: not yet {listed}/{value}", 32, 4,
        {"resources": [{"resource_type": rtype, "resource_name": resource,
                        "configuration_keys": [key]}],
         "include_synonyms": False, "include_documentation": False}, done)


def _configs_by_name(r: Any) -> Any:
    # Kafka lists a broker resource's configs in no set order (a hash map's)
    for res in r["results"]:
        res["configs"].sort(key=lambda c: c["name"])
    return r


def _offset_delete_view(r: Any) -> Any:
    # Kafka lists the partitions in no set order
    for t in r["topics"]:
        t["partitions"].sort(key=lambda p: p["partition_index"])
    return r


def _api_versions_view(r: Any) -> Any:
    # which APIs and versions each serves is docs/compatibility.md's table; compare the
    # error and the finalized features clients choose behaviour by
    return {"error_code": r["error_code"],
            "finalized": sorted(f["name"] for f in r["finalized_features"])}


def _end_txn(txn: str, init: Any, commit: bool, epoch_delta: int = 0,
             pid_delta: int = 0) -> dict[str, Any]:
    return {"transactional_id": txn, "producer_id": int(init.producer_id) + pid_delta,
            "producer_epoch": int(init.producer_epoch) + epoch_delta, "committed": commit}


def _add_partitions(txn: str, init: Any, topic: str, partition: int,
                    epoch_delta: int = 0) -> dict[str, Any]:
    return {"v3_and_below_transactional_id": txn,
            "v3_and_below_producer_id": int(init.producer_id),
            "v3_and_below_producer_epoch": int(init.producer_epoch) + epoch_delta,
            "v3_and_below_topics": [{"name": topic, "partitions": [partition]}]}


def _txn_produce(txn: str, init: Any, topic: str, ts: int) -> dict[str, Any]:
    records = build_batch([(ts, b"k", b"v", ())], producer_id=int(init.producer_id),
                          producer_epoch=int(init.producer_epoch), base_sequence=0,
                          is_transactional=True)
    return {"transactional_id": txn, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


def _describe_producers(topic: str) -> Step:
    """DescribeProducers of partition 0, a producer's last timestamp shown as what it
    is: TS (the data record's), "now" (a broker-written marker's: within 10 minutes of
    the test's clock) or the number."""
    def view(r: Any) -> Any:
        now = time.time() * 1000
        for t in r["topics"]:
            for p in t["partitions"]:
                for s in p["active_producers"]:
                    ts = s["last_timestamp"]
                    s["last_timestamp"] = (
                        "TS" if ts == TS else "now" if abs(ts - now) < 600_000 else ts)
        return r
    return Step(61, {"topics": [{"name": topic, "partition_indexes": [0]}]}, view=view)


def _wait_txn_ended(topic: str) -> Callable[[RawClient, Any], None]:
    """After EndTxn: until partition 0 has no open transaction (Kafka writes the markers
    after it answers)."""
    return _wait_until(
        f"{topic}: transaction still open", 61, 0,
        {"topics": [{"name": topic, "partition_indexes": [0]}]},
        lambda r: all(int(s.current_txn_start_offset) == -1
                      for s in r.topics[0].partitions[0].active_producers))


def _txn_write(txn: str, topic: str) -> list[Step]:
    """`topic` made, then one transactional record (timestamp TS, sequence 0) in its
    partition 0 by `txn`: steps 0-3, InitProducerId's answer is step 1's."""
    return [
        create(topic),
        Step(22, {"transactional_id": txn, "transaction_timeout": 60000,
                  "producer_id": -1, "producer_epoch": -1}),
        Step(24, lambda r: _add_partitions(txn, r[1], topic, 0)),
        Step(0, lambda r: _txn_produce(txn, r[1], topic, TS)),
    ]


def _txn_then_end(txn: str, topic: str, commit: bool) -> list[Step]:
    """One transactional record (timestamp TS) in `topic`, then EndTxn v4 (transaction
    version 1: the epoch stays) and DescribeProducers before and after the marker."""
    return [
        *_txn_write(txn, topic),
        _describe_producers(topic),
        Step(26, lambda r: _end_txn(txn, r[1], commit), version=4,
             settle=_wait_txn_ended(topic)),
        _describe_producers(topic),
    ]


def _wait_txn_complete(txn: str, topic: str) -> Callable[[RawClient, Any], None]:
    """After EndTxn: until partition 0 has its marker and the coordinator has completed
    the transaction (Kafka does both after it answers; the next transaction's
    AddPartitionsToTxn would meet CONCURRENT_TRANSACTIONS)."""
    markers = _wait_txn_ended(topic)
    completed = _wait_until(
        f"{txn}: not yet completed", 65, 0, {"transactional_ids": [txn]},
        lambda r: r.transaction_states[0].transaction_state in ("CompleteAbort",
                                                                "CompleteCommit"))

    def settle(client: RawClient, response: Any) -> None:
        markers(client, response)
        completed(client, response)

    return settle


def _sequence_reused_after_abort(txn: str, topic: str) -> list[Step]:
    """A transactional batch (sequence 0) aborted, then the same batch, same epoch and
    sequences, in the next transaction (EndTxn v4: transaction version 1, the epoch
    stays): what librdkafka sends after aborting a transaction whose written batch lost
    its answer. Kafka answers it as a duplicate of the aborted batch (NONE, its old
    offset: the new transaction would commit nothing); Tidegate refuses the reuse,
    OUT_OF_ORDER_SEQUENCE_NUMBER (storage/producer_rules.py, REUSED_AFTER_MARKER)."""
    return [
        *_txn_write(txn, topic),
        Step(26, lambda r: _end_txn(txn, r[1], False), version=4,
             settle=_wait_txn_complete(txn, topic)),
        Step(24, lambda r: _add_partitions(txn, r[1], topic, 0)),
        Step(0, lambda r: _txn_produce(txn, r[1], topic, TS)),
        Step(26, lambda r: _end_txn(txn, r[1], False), version=4),
    ]


def _api_versions_unsupported(client: RawClient) -> Any:
    """ApiVersions at version 127 (KIP-511): the broker answers UNSUPPORTED_VERSION in a
    v0 response that still lists its ranges, so the client can pick a version."""
    client.correlation += 1
    # v3+ headers are flexible; the body is empty (its tagged fields: none)
    header = encode_request_header(18, 127, client.correlation, "oracle", True)
    client.send_frame(header + b"\x00\x00\x00\x00")
    frame = client.recv_frame()
    assert frame is not None, "connection closed"
    _, pos = parse_response_header(frame, False)
    return decode(response_class(18, 0), frame, pos)


def _unsupported_view(r: Any) -> Any:
    return {"error_code": r["error_code"],
            "api_versions_listed": any(k["api_key"] == 18 for k in r["api_keys"])}


TOPIC, BROKER, GROUP = 2, 4, 3
TXN_TIMEOUT_TOO_BIG = 3_600_000  # transaction.max.timeout.ms defaults to 15 min

CASES: list[Case] = [
    Case("api_versions", [Step(18, {"client_software_name": "oracle",
                                    "client_software_version": "1"},
                               view=_api_versions_view)], sample=True),
    Case("api_versions_unsupported_version", [
        Step(18, {}, version=0, send=_api_versions_unsupported, view=_unsupported_view)],
         sample=True),
    Case("metadata_unknown_and_invalid", [
        Step(3, {"topics": [{"name": "oracle-nosuch"}, {"name": "bad name!"}],
                 "allow_auto_topic_creation": False,
                 "include_topic_authorized_operations": False}, view=_metadata_errors),
    ], sample=True),
    Case("metadata_auto_create", [metadata("oracle-auto", auto_create=True)]),
    Case("metadata_of_a_topic", [create("oracle-md", partitions=2), metadata("oracle-md")]),
    Case("create_topics_valid_and_exists", [
        create("oracle-ct"), create("oracle-ct"),
        create("oracle-ct-v", validate_only=True), metadata("oracle-ct-v"),
    ], sample=True),
    Case("create_topics_invalid", [
        create("oracle-p0", partitions=0), create("oracle-pneg", partitions=-5),
        create("oracle-rf3", rf=3), create("oracle-rf0", rf=0),
        create("bad name!"), create("a" * 250),
        create("oracle-badcfg", configs={"no.such.config": "1"}),
        create("oracle-badval", configs={"retention.ms": "abc"}),
        create("oracle-badpolicy", configs={"cleanup.policy": "sideways"}),
    ], sample=True),
    Case("create_topics_duplicate_in_request", [Step(19, {
        "topics": [{"name": "oracle-dup", "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}] * 2,
        "timeout": 5000, "validate_only": False})]),
    Case("delete_topics_unknown", [Step(20, {"topics": [{"name": "oracle-nosuch"}],
                                             "topic_names": ["oracle-nosuch"],
                                             "timeout": 5000})], sample=True),
    # a topic named by an id no topic has: UNKNOWN_TOPIC_ID (a cluster broker looks the id
    # up in ZooKeeper before saying so; embedded, its topics file). Kafka 4.1.1 serves
    # neither OffsetCommit v10 nor OffsetFetch v10 (ApiVersions: v9 at most for both)
    Case("delete_topics_unknown_id", [
        Step(20, {"topics": [{"name": None, "topic_id": UNKNOWN_ID}], "timeout": 5000},
             version=6),
    ]),
    Case("produce_unknown_topic", [produce("oracle-nosuch-p", batch())]),
    Case("produce_bad_acks", [create("oracle-acks"), produce("oracle-acks", batch(), acks=2)],
         sample=True),
    Case("produce_corrupt", [
        create("oracle-corrupt"), produce("oracle-corrupt", corrupt_crc()),
        produce("oracle-corrupt", bad_magic()), produce("oracle-corrupt", batch(), partition=7),
        list_offsets("oracle-corrupt", -1),
    ], sample=True),
    Case("fetch_out_of_range", [
        create("oracle-fetch"), produce("oracle-fetch", batch(3)),
        fetch("oracle-fetch", 100), fetch("oracle-fetch", -5), fetch("oracle-fetch", 0, 9),
    ]),
    Case("fetch_sessions", [
        create("oracle-fs", partitions=2), produce("oracle-fs", batch(3)),
        session_fetch("oracle-fs", 0, {0: 0, 1: 0}),  # opens a session, answered in full
        session_fetch("oracle-fs", 1, {0: 3}),  # moved on, nothing new: empty answer
        session_fetch("oracle-fs", 1, {}),  # a replayed epoch
        session_fetch("oracle-fs", 1, {}, session=2**30),  # no such session
        session_fetch("oracle-fs", 2, {}, forget=(1,)),
        session_fetch("oracle-fs", 3, {0: 0}),  # back to 0: records again
        session_fetch("oracle-fs", -1, {1: 0}),  # closes it; a full, sessionless answer
        session_fetch("oracle-fs", 4, {}),  # closed
    ], sample=True),
    Case("list_offsets_specials", [
        create("oracle-lo"), produce("oracle-lo", batch(3)),
        list_offsets("oracle-lo", -1), list_offsets("oracle-lo", -2),
        list_offsets("oracle-lo", -3), list_offsets("oracle-lo", -4),
        list_offsets("oracle-lo", -5),  # latest tiered (KIP-1005): none here, offset -1
        list_offsets("oracle-lo", TS + 1),
        list_offsets("oracle-lo", TS + 10**9), list_offsets("oracle-lo", -1, partition=4),
    ], sample=True),
    Case("offset_commit_unknown_group", [
        create("oracle-oc"),
        Step(8, {"group_id": "oracle-g-simple", "generation_id_or_member_epoch": -1,
                 "member_id": "", "group_instance_id": None,
                 "topics": [{"name": "oracle-oc", "partitions": [
                     {"partition_index": 0, "committed_offset": 1,
                      "committed_leader_epoch": -1, "committed_metadata": ""}]}]}),
        Step(8, {"group_id": "oracle-g-nosuch", "generation_id_or_member_epoch": 5,
                 "member_id": "m-1", "group_instance_id": None,
                 "topics": [{"name": "oracle-oc", "partitions": [
                     {"partition_index": 0, "committed_offset": 1,
                      "committed_leader_epoch": -1, "committed_metadata": ""}]}]}),
        Step(9, {"groups": [{"group_id": "oracle-g-simple",
                             "topics": [{"name": "oracle-oc", "partition_indexes": [0, 3]}]},
                            {"group_id": "oracle-g-none", "topics": None}],
                 "require_stable": False}),
    ], sample=True),
    Case("find_coordinator", [
        Step(10, {"key_type": 0, "coordinator_keys": ["oracle-g"]}),
        Step(10, {"key_type": 1, "coordinator_keys": ["oracle-tx"]}),
        Step(10, {"key_type": 5, "coordinator_keys": ["oracle-g"]}),
    ], sample=True),
    Case("init_producer_id_bad_timeout", [
        Step(22, {"transactional_id": "oracle-tx-bad", "transaction_timeout":
                  TXN_TIMEOUT_TOO_BIG, "producer_id": -1, "producer_epoch": -1}),
        Step(22, {"transactional_id": "oracle-tx-zero", "transaction_timeout": 0,
                  "producer_id": -1, "producer_epoch": -1}),
        Step(22, {"transactional_id": None, "transaction_timeout": 60000,
                  "producer_id": -1, "producer_epoch": -1}),
    ], sample=True),
    Case("add_partitions_to_txn_unknown", [
        create("oracle-apt"),
        Step(24, {"v3_and_below_transactional_id": "oracle-tx-unknown",
                  "v3_and_below_producer_id": 123456, "v3_and_below_producer_epoch": 0,
                  "v3_and_below_topics": [{"name": "oracle-apt", "partitions": [0]}]}),
    ]),
    Case("end_txn_misuse", [
        Step(26, {"transactional_id": "oracle-tx-none", "producer_id": 123456,
                  "producer_epoch": 0, "committed": True}),
        Step(22, {"transactional_id": "oracle-tx-end", "transaction_timeout": 60000,
                  "producer_id": -1, "producer_epoch": -1}),
        # no transaction open: committing one; a stale epoch, a wrong producer id, an
        # epoch from the future
        Step(26, lambda r: _end_txn("oracle-tx-end", r[1], True)),
        Step(26, lambda r: _end_txn("oracle-tx-end", r[1], True, epoch_delta=-1)),
        Step(26, lambda r: _end_txn("oracle-tx-end", r[1], True, pid_delta=1)),
        Step(26, lambda r: _end_txn("oracle-tx-end", r[1], True, epoch_delta=5)),
    ], sample=True),
    Case("end_txn_abort_without_transaction", [
        Step(22, {"transactional_id": "oracle-tx-abort", "transaction_timeout": 60000,
                  "producer_id": -1, "producer_epoch": -1}),
        # (Kafka's next EndTxn would race its markers: CONCURRENT_TRANSACTIONS or not)
        Step(26, lambda r: _end_txn("oracle-tx-abort", r[0], False)),
    ], sample=True),
    Case("add_partitions_to_txn_misuse", [
        create("oracle-apt2"),
        Step(22, {"transactional_id": "oracle-tx-apt", "transaction_timeout": 60000,
                  "producer_id": -1, "producer_epoch": -1}),
        Step(24, lambda r: _add_partitions("oracle-tx-apt", r[1], "oracle-nosuch-apt", 0)),
        Step(24, lambda r: _add_partitions("oracle-tx-apt", r[1], "oracle-apt2", 5)),
        Step(24, lambda r: _add_partitions("oracle-tx-apt", r[1], "oracle-apt2", 0,
                                           epoch_delta=1)),
        Step(24, lambda r: _add_partitions("oracle-tx-apt", r[1], "oracle-apt2", 0)),
        Step(26, lambda r: _end_txn("oracle-tx-apt", r[1], False)),
    ]),
    Case("describe_configs_unknown", [
        describe_configs(TOPIC, "oracle-nosuch-dc"), describe_configs(4, "77"),
        describe_configs(4, "notanumber"),
    ], sample=True),
    Case("describe_configs_topic_key", [
        create("oracle-dc"), describe_configs(TOPIC, "oracle-dc", "retention.ms",
                                              "cleanup.policy", "no.such.key"),
    ]),
    Case("incremental_alter_configs_invalid", [
        create("oracle-iac"),
        alter_configs(TOPIC, "oracle-iac", "retention.ms", "abc"),
        alter_configs(TOPIC, "oracle-iac", "no.such.config", "1"),
        alter_configs(TOPIC, "oracle-nosuch-iac", "retention.ms", "1000"),
        alter_configs(TOPIC, "oracle-iac", "retention.ms", "1000", op=7),
        alter_configs(TOPIC, "oracle-iac", "retention.ms", "1000"),
    ], sample=True),
    # topic configs Kafka 4 removed (KIP-724: message.format.version and
    # message.downconversion.enable; KIP-937: message.timestamp.difference.max.ms) are
    # unknown names now: refused wherever a client sets them
    Case("topic_configs_kafka4_removed", [
        create("oracle-rm-fmt", configs={"message.format.version": "3.0-IV1"}),
        create("oracle-rm-dc", configs={"message.downconversion.enable": "true"}),
        create("oracle-rm-diff", configs={"message.timestamp.difference.max.ms": "1000"}),
        create("oracle-rm-v", configs={"message.format.version": "3.0-IV1"},
               validate_only=True),
        create("oracle-rm"),
        alter_configs(TOPIC, "oracle-rm", "message.format.version", "3.0-IV1"),
        alter_configs(TOPIC, "oracle-rm", "message.downconversion.enable", "false"),
        alter_configs(TOPIC, "oracle-rm", "message.timestamp.difference.max.ms", "1000"),
        alter_configs(TOPIC, "oracle-rm", "message.format.version", None, op=1),
        legacy_alter_configs(TOPIC, "oracle-rm", {"retention.ms": "1000",
                                                  "message.format.version": "3.0-IV1"}),
        legacy_alter_configs(TOPIC, "oracle-rm",
                             {"message.timestamp.difference.max.ms": "1000"},
                             validate_only=True),
        describe_configs(TOPIC, "oracle-rm", "retention.ms", "message.format.version",
                         "message.downconversion.enable",
                         "message.timestamp.difference.max.ms"),
    ]),
    # a broker config Kafka 4.1 does not know (a plugin's, or one Kafka 4 removed) is
    # accepted on a broker resource, stored, and described as sensitive (no value, type
    # UNKNOWN, read-only); one of Kafka's static configs is refused
    Case("alter_broker_configs_unknown_keys", [
        *[alter_configs(BROKER, "", key, value) for key, value in (
            ("log.message.format.version", "3.0-IV1"),
            ("log.message.timestamp.difference.max.ms", "1000"),
            ("socket.send.buffer.bytes", "1000"),
            ("controller.quorum.voters", "1@localhost:1"))],
        dataclasses.replace(alter_configs(BROKER, "", "oracle.custom.key", "x"),
                            settle=_wait_config(BROKER, "", "oracle.custom.key", True)),
        dataclasses.replace(
            describe_configs(BROKER, "", "log.message.format.version", "oracle.custom.key",
                             "log.message.timestamp.difference.max.ms",
                             "socket.send.buffer.bytes"),
            view=_configs_by_name),
        *[alter_configs(BROKER, "", key, None, op=1) for key in (
            "log.message.format.version", "log.message.timestamp.difference.max.ms")],
        dataclasses.replace(alter_configs(BROKER, "", "oracle.custom.key", None, op=1),
                            settle=_wait_config(BROKER, "", "oracle.custom.key", False)),
        describe_configs(BROKER, "", "log.message.format.version", "oracle.custom.key"),
    ]),
    # Kafka 4's tiered-storage switches (KIP-950): accepted and described, though
    # Tidegate has no tiered storage (nor has this Kafka enabled it)
    Case("topic_configs_remote_log_switches", [
        create("oracle-rls", configs={"remote.log.copy.disable": "true"}),
        create("oracle-rls-bad", configs={"remote.log.delete.on.disable": "maybe"}),
        dataclasses.replace(
            alter_configs(TOPIC, "oracle-rls", "remote.log.delete.on.disable", "true"),
            settle=_wait_config(TOPIC, "oracle-rls", "remote.log.delete.on.disable", True,
                                "true")),
        alter_configs(TOPIC, "oracle-rls", "remote.log.copy.disable", "sometimes"),
        dataclasses.replace(
            describe_configs(TOPIC, "oracle-rls", "remote.log.copy.disable",
                             "remote.log.delete.on.disable", "remote.storage.enable"),
            view=_configs_by_name),
    ]),
    Case("delete_records_beyond_hw", [
        create("oracle-dr"), produce("oracle-dr", batch(3)),
        Step(21, {"topics": [{"name": "oracle-dr", "partitions": [
            {"partition_index": 0, "offset": 100}]}], "timeout": 5000}),
        Step(21, {"topics": [{"name": "oracle-dr", "partitions": [
            {"partition_index": 0, "offset": 1}, {"partition_index": 3, "offset": 0}]}],
            "timeout": 5000}),
        Step(21, {"topics": [{"name": "oracle-dr", "partitions": [
            {"partition_index": 0, "offset": -1}]}], "timeout": 5000}),
        list_offsets("oracle-dr", -2),
    ], sample=True),
    # a compact-only topic refuses DeleteRecords (POLICY_VIOLATION) before any range
    # check; compact,delete allows it (kafka-delete-records against a compacted topic)
    Case("delete_records_compacted", [
        create("oracle-drc", configs={"cleanup.policy": "compact"}),
        produce("oracle-drc", batch(3)),
        Step(21, {"topics": [{"name": "oracle-drc", "partitions": [
            {"partition_index": 0, "offset": 1}]}], "timeout": 5000}),
        Step(21, {"topics": [{"name": "oracle-drc", "partitions": [
            {"partition_index": 0, "offset": 100}]}], "timeout": 5000}),
        dataclasses.replace(
            alter_configs(TOPIC, "oracle-drc", "cleanup.policy", "compact,delete"),
            settle=_wait_deletable("oracle-drc")),
        Step(21, {"topics": [{"name": "oracle-drc", "partitions": [
            {"partition_index": 0, "offset": 1}]}], "timeout": 5000}),
    ], sample=True),
    Case("describe_and_list_groups", [
        Step(15, {"groups": ["oracle-g-nosuch2", ""],
                  "include_authorized_operations": False}),
        Step(16, {"states_filter": ["NoSuchState"], "types_filter": []}),
    ], sample=True),
    # the authorized-operations bit sets (no authorizer on either broker: each resource
    # type's supported operations, as Kafka's AclEntry lists them)
    Case("authorized_operations", [
        create("oracle-ao"),
        Step(8, {"group_id": "oracle-ao-g", "generation_id_or_member_epoch": -1,
                 "member_id": "", "group_instance_id": None,
                 "topics": [{"name": "oracle-ao", "partitions": [
                     {"partition_index": 0, "committed_offset": 1,
                      "committed_leader_epoch": -1, "committed_metadata": ""}]}]}),
        Step(15, {"groups": ["oracle-ao-g"], "include_authorized_operations": True},
             view=lambda r: [g["authorized_operations"] for g in r["groups"]]),
        Step(3, {"topics": [{"name": "oracle-ao"}], "allow_auto_topic_creation": False,
                 "include_topic_authorized_operations": True},
             view=lambda r: [t["topic_authorized_operations"] for t in r["topics"]]),
        Step(60, {"include_cluster_authorized_operations": True, "endpoint_type": 1,
                  "include_fenced_brokers": False},
             view=lambda r: r["cluster_authorized_operations"]),
    ], sample=True),
    Case("describe_cluster", [Step(60, {"include_cluster_authorized_operations": False,
                                        "endpoint_type": 1, "include_fenced_brokers": False}),
                              Step(60, {"include_cluster_authorized_operations": False,
                                        "endpoint_type": 2, "include_fenced_brokers": False}),
                              Step(60, {"include_cluster_authorized_operations": False,
                                        "endpoint_type": 3, "include_fenced_brokers": False})],
         sample=True),
    # -- beyond the brief's list: the group, transaction and admin misuse cases --
    Case("classic_group_misuse", [
        Step(11, {"group_id": "oracle-cg", "session_timeout": 10000,
                  "rebalance_timeout": 10000, "member_id": "", "group_instance_id": None,
                  "protocol_type": "consumer",
                  "protocols": [{"name": "range", "metadata": b""}], "reason": None}),
        Step(11, {"group_id": "oracle-cg2", "session_timeout": 1,
                  "rebalance_timeout": 10000, "member_id": "", "group_instance_id": None,
                  "protocol_type": "consumer",
                  "protocols": [{"name": "range", "metadata": b""}], "reason": None}),
        Step(12, {"group_id": "oracle-cg-nosuch", "generation_id": 1, "member_id": "m",
                  "group_instance_id": None}),
        Step(14, {"group_id": "oracle-cg-nosuch", "generation_id": 1, "member_id": "m",
                  "group_instance_id": None, "protocol_type": "consumer",
                  "protocol_name": "range", "assignments": []}),
        Step(13, {"group_id": "oracle-cg-nosuch",
                  "members": [{"member_id": "m", "group_instance_id": None,
                               "reason": None}]}),
        Step(11, {"group_id": "", "session_timeout": 10000, "rebalance_timeout": 10000,
                  "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                  "protocols": [{"name": "range", "metadata": b""}], "reason": None}),
    ]),
    Case("delete_groups_and_offsets", [
        create("oracle-dg"),
        Step(8, {"group_id": "oracle-dg-g", "generation_id_or_member_epoch": -1,
                 "member_id": "", "group_instance_id": None,
                 "topics": [{"name": "oracle-dg", "partitions": [
                     {"partition_index": 0, "committed_offset": 2,
                      "committed_leader_epoch": -1, "committed_metadata": "m"}]}]}),
        Step(15, {"groups": ["oracle-dg-g"], "include_authorized_operations": False}),
        Step(47, {"group_id": "oracle-dg-nosuch", "topics": [
            {"name": "oracle-dg", "partitions": [{"partition_index": 0}]}]}),
        Step(47, {"group_id": "oracle-dg-g", "topics": [
            {"name": "oracle-dg", "partitions": [{"partition_index": 0},
                                                 {"partition_index": 4}]}]},
             view=_offset_delete_view),
        Step(42, {"groups_names": ["oracle-dg-nosuch", "oracle-dg-g"]}),
    ]),
    Case("delete_simple_group", [
        create("oracle-dsg"),
        Step(8, {"group_id": "oracle-dsg-g", "generation_id_or_member_epoch": -1,
                 "member_id": "", "group_instance_id": None,
                 "topics": [{"name": "oracle-dsg", "partitions": [
                     {"partition_index": 0, "committed_offset": 2,
                      "committed_leader_epoch": -1, "committed_metadata": "m"}]}]}),
        Step(42, {"groups_names": ["oracle-dsg-g"]}),
        Step(42, {"groups_names": ["oracle-dsg-g"]}),
    ]),
    Case("txn_offsets_misuse", [
        Step(25, {"transactional_id": "oracle-tx-nosuch2", "producer_id": 123456,
                  "producer_epoch": 0, "group_id": "oracle-txg"}),
        Step(22, {"transactional_id": "oracle-tx-off", "transaction_timeout": 60000,
                  "producer_id": -1, "producer_epoch": -1}),
        Step(28, lambda r: {"transactional_id": "oracle-tx-off", "group_id": "oracle-txg",
                            "producer_id": int(r[1].producer_id),
                            "producer_epoch": int(r[1].producer_epoch),
                            "generation_id": -1, "member_id": "",
                            "group_instance_id": None, "topics": []}),
        # (DescribeTransactions is left out: kio cannot decode the -1 start time Kafka
        # sends for an Empty transaction)
    ]),
    Case("create_partitions_invalid", [
        create("oracle-cp", partitions=2),
        Step(37, {"topics": [{"name": "oracle-cp", "count": 1, "assignments": None}],
                  "timeout": 5000, "validate_only": False}),
        Step(37, {"topics": [{"name": "oracle-cp", "count": 2, "assignments": None}],
                  "timeout": 5000, "validate_only": False}),
        Step(37, {"topics": [{"name": "oracle-cp-nosuch", "count": 3,
                              "assignments": None}],
                  "timeout": 5000, "validate_only": False}),
        Step(37, {"topics": [{"name": "oracle-cp", "count": 4, "assignments": None}],
                  "timeout": 5000, "validate_only": True}),
    ]),
    # kafka-transactions describe-producers: a producer's LastTimestamp is its last data
    # batch's, then its marker's (Kafka's ProducerStateEntry.lastTimestamp)
    Case("describe_producers_after_abort",
         _txn_then_end("oracle-tx-dpa", "oracle-dpa", commit=False)),
    Case("describe_producers_after_commit",
         _txn_then_end("oracle-tx-dpc", "oracle-dpc", commit=True)),
    # a transaction's sequences reused by the next one (beyond Kafka: docs/transactions.md)
    Case("txn_sequence_reused_after_abort",
         _sequence_reused_after_abort("oracle-tx-reuse", "oracle-reuse"), sample=True),
    Case("describe_producers_unknown", [
        Step(61, {"topics": [{"name": "oracle-nosuch-dp", "partition_indexes": [0]}]}),
    ]),
    Case("acls_without_authorizer", [
        Step(29, {"resource_type_filter": 1, "resource_name_filter": None,
                  "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                  "operation": 1, "permission_type": 1}),
    ]),
    Case("sasl_on_plaintext", [Step(17, {"mechanism": "PLAIN"})]),
]
