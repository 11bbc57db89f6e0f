"""Generate the reference tables in docs/*.md from the code, so they cannot drift.

    .venv/bin/python docs/gen_tables.py           # rewrite the tables in place
    .venv/bin/python docs/gen_tables.py --check   # exit 1 if a table is out of date

Each table sits between ``<!-- generated:NAME -->`` and ``<!-- end generated:NAME -->``
in its page. Sources: the client configs (`tidegate.client.config`; the descriptions
are below, in Kafka's words where they fit), the broker keys
(`tidegate.common.config.BROKER_KEYS`), the topic keys
(`tidegate.storage.config.TOPIC_CONFIG_KEYS` and `BROKER_SYNONYMS`) and the API table
(`tidegate.server.dispatch.default_dispatcher`; every Kafka API key in compatibility.md,
with docs/api_compat.py's notes). tests/integration/test_examples.py
runs the check.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Callable
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "src"))

from tidegate.client.config import (  # noqa: E402
    AdminConfig,
    ClientConfig,
    ConsumerConfig,
    ProducerConfig,
)
from tidegate.common.config import BROKER_KEYS  # noqa: E402
from tidegate.storage.config import BROKER_SYNONYMS, TOPIC_CONFIG_KEYS  # noqa: E402

sys.path.insert(0, str(DOCS))
from api_compat import compat_table  # noqa: E402  (docs/api_compat.py: compatibility.md)

# What each client key does (Kafka's meaning unless a note says otherwise).
CLIENT_DOCS: dict[str, str] = {
    # every client
    "bootstrap.servers": "host:port pairs (list or comma-separated string) to fetch the "
                         "cluster metadata from; the rest of the cluster is discovered.",
    "client.id": "Sent with every request; shows in broker logs.",
    "request.timeout.ms": "How long to wait for a response before failing the request and "
                          "closing the connection.",
    "retry.backoff.ms": "Wait before retrying a failed request.",
    "retry.backoff.max.ms": "Upper bound of the retry backoff.",
    "reconnect.backoff.ms": "Wait before reconnecting to a broker; doubles per failure "
                            "(with 20% jitter).",
    "reconnect.backoff.max.ms": "Upper bound of the reconnect backoff.",
    "socket.connection.setup.timeout.ms": "How long a TCP connect may take.",
    "metadata.max.age.ms": "Refresh metadata at least this often.",
    "connections.max.idle.ms": "Accepted; idle connections are not closed yet.",
    "security.protocol": "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (see security.md).",
    "ssl.ca.location": "PEM file of the CA(s) that signed the broker's certificate; "
                       "default: the system's trusted roots.",
    "ssl.truststore.location": "Java's name for ssl.ca.location (PEM only).",
    "ssl.truststore.type": "PEM only (the standard library's ssl reads no JKS/PKCS12).",
    "ssl.certificate.location": "Client certificate (PEM), for listeners that ask for one.",
    "ssl.key.location": "The client certificate's private key (PEM).",
    "ssl.keystore.location": "Java's PEM key store: key and certificate chain in one file.",
    "ssl.keystore.type": "PEM only.",
    "ssl.key.password": "Password of an encrypted private key.",
    "ssl.endpoint.identification.algorithm": "https: the broker's certificate must name "
                                             "the host; none (or empty): only the chain "
                                             "is checked.",
    "sasl.mechanism": "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
    "sasl.mechanisms": "librdkafka's name for sasl.mechanism.",
    "sasl.username": "SASL user.",
    "sasl.password": "SASL password (never shown in the config's repr).",
    "sasl.jaas.config": "Java's form: a PlainLoginModule or ScramLoginModule line with "
                        "username and password.",
    # producer
    "acks": "Acknowledgements a write needs: 0 (none), 1 (the leader's log), all (-1: "
            "in-sync replicas; on Tidegate also fsynced, see broker.md).",
    "linger.ms": "Wait up to this long for more records before sending a batch that is "
                 "not full.",
    "batch.size": "Target size in bytes of a per-partition batch (a larger record gets a "
                  "batch of its own).",
    "buffer.memory": "Bytes of records waiting to be sent or acknowledged; send() waits "
                     "(up to max.block.ms) when full.",
    "compression.type": "none, gzip, snappy, lz4 or zstd, per batch.",
    "max.in.flight.requests.per.connection": "Unanswered produce requests per broker; 1 "
                                             "keeps order across retries.",
    "retries": "How often a retriable failure is retried (within delivery.timeout.ms).",
    "delivery.timeout.ms": "Upper bound on the time from send() to success or failure, "
                           "retries included; at least linger.ms + request.timeout.ms.",
    "max.request.size": "Largest produce request, hence largest record; bigger records "
                        "fail in send() with MessageTooLargeError.",
    "max.block.ms": "How long send() may wait for metadata or buffer space.",
    "enable.idempotence": "Producer id + per-partition sequences: retries neither "
                          "duplicate nor reorder records. Needs acks=all, max.in.flight <= 5, "
                          "retries > 0 (if only defaulted, conflicting settings turn it off).",
    "transactional.id": "Makes the producer transactional (init_transactions(), "
                        "begin/commit/abort_transaction()); one live producer per id.",
    "transaction.timeout.ms": "The coordinator aborts a transaction open for longer "
                              "(at most the broker's transaction.max.timeout.ms).",
    "transaction.two.phase.commit.enable": "KIP-939: transactions that never time out, "
                                           "prepare_transaction() / complete_transaction().",
    "tidegate.transaction.version.max": "Tidegate: highest transaction version (KIP-890) "
                                        "to use; 1 forces AddPartitionsToTxn and EndTxn < v5.",
    "partitioner.ignore.keys": "Spread keyed records like unkeyed ones (sticky) instead "
                               "of by murmur2(key).",
    "key.serializer": "Callable turning your key into bytes (default: bytes, str as "
                      "UTF-8, or None).",
    "value.serializer": "Callable turning your value into bytes (same default).",
    # consumer
    "group.id": "The consumer group; needed for subscribe() and commits, not for "
                "assign().",
    "auto.offset.reset": "Where to start without a committed offset or position: earliest, "
                         "latest or none (poll raises NoOffsetForPartitionError).",
    "fetch.min.bytes": "The broker waits for this many bytes (or fetch.max.wait.ms) "
                       "before answering a fetch.",
    "fetch.max.wait.ms": "Longest the broker holds a fetch waiting for fetch.min.bytes.",
    "fetch.max.bytes": "Largest fetch response (at least one batch is always returned).",
    "max.partition.fetch.bytes": "Largest amount of data per partition in a fetch.",
    "max.poll.records": "Most records one poll() returns.",
    "queued.max.messages.kbytes": "librdkafka's name: while fetched records wait to be "
                                  "polled, the next fetch of their partition goes out "
                                  "ahead as long as the consumer holds less than this "
                                  "many KiB of fetched data (0: never fetch ahead).",
    "isolation.level": "read_committed returns only committed transactional data (up to "
                       "the last stable offset, aborted records dropped); read_uncommitted "
                       "(Kafka's default) returns everything below the high watermark.",
    "check.crcs": "Verify each fetched batch's CRC-32C.",
    "enable.auto.commit": "Commit positions every auto.commit.interval.ms (needs a "
                          "group.id; forced off without one).",
    "client.rack": "Sent with fetches (rack-aware reads need replicas).",
    "allow.auto.create.topics": "Let metadata requests create missing topics (if the "
                                "broker allows it).",
    "default.api.timeout.ms": "Timeout of blocking calls that take no timeout argument "
                              "(offset lookups, admin requests).",
    "group.instance.id": "Static membership: a restart with the same id keeps the "
                         "member's partitions without a rebalance.",
    "session.timeout.ms": "A member that sends no heartbeat for this long is removed.",
    "heartbeat.interval.ms": "How often the member heartbeats; below session.timeout.ms.",
    "max.poll.interval.ms": "A member that does not poll for this long leaves the group.",
    "auto.commit.interval.ms": "Period of auto-commits.",
    "partition.assignment.strategy": "Assignors in order of preference: range, roundrobin, "
                                     "sticky, cooperative-sticky.",
    "exclude.internal.topics": "Pattern subscriptions never match internal topics.",
    "group.protocol": "classic (JoinGroup/SyncGroup, client-side assignors) or consumer "
                      "(KIP-848: the broker assigns; session.timeout.ms, "
                      "heartbeat.interval.ms and partition.assignment.strategy are then "
                      "the broker's).",
    "group.remote.assignor": "With group.protocol=consumer: the server-side assignor to "
                             "ask for (uniform, range); default: the broker's first.",
}


def _default(key: str, value: object) -> str:
    if key == "acks":
        return {-1: "all", 0: "0", 1: "1"}[value]  # type: ignore[index]
    if value is None:
        return "(none)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "(empty)"
    return str(value) if value != "" else "(empty)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def client_table(cls: type[ClientConfig], base: type[ClientConfig] | None) -> str:
    inherited = set(base.keys()) if base is not None else set()
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key, f in cls.keys().items():
        if key in inherited:
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        rows.append(f"| `{key}` | `{_default(key, default)}` | "
                    f"{_cell(CLIENT_DOCS.get(key, ''))} |")
    return "\n".join(rows)


def broker_table() -> str:
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key, (default, _type, doc) in BROKER_KEYS.items():
        rows.append(f"| `{key}` | `{default or '(empty)'}` | {_cell(doc)} |")
    return "\n".join(rows)


def _topic_default(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value) or "(empty)"
    return str(value)


def topic_table() -> str:
    rows = ["| key | default | broker default key | meaning |", "|---|---|---|---|"]
    for key, spec in TOPIC_CONFIG_KEYS.items():
        synonyms = ", ".join(f"`{k}`" for k, _ in BROKER_SYNONYMS.get(key, ())) or "-"
        rows.append(f"| `{key}` | `{_topic_default(spec.default)}` | {synonyms} | "
                    f"{_cell(spec.doc)} |")
    return "\n".join(rows)


def api_table() -> str:
    from tidegate.server.dispatch import default_dispatcher

    apis = default_dispatcher().apis
    rows = ["| key | API | versions |", "|---|---|---|"]
    for key in sorted(apis):
        api = apis[key]
        name = "".join(part.capitalize() for part in api.name.split("_"))
        rows.append(f"| {key} | {name} | {api.min_version}-{api.max_version} |")
    return "\n".join(rows)


TABLES: dict[tuple[str, str], Callable[[], str]] = {
    ("client.md", "client-config"): lambda: client_table(ClientConfig, None),
    ("client.md", "producer-config"): lambda: client_table(ProducerConfig, ClientConfig),
    ("client.md", "consumer-config"): lambda: client_table(ConsumerConfig, ClientConfig),
    ("client.md", "admin-config"): lambda: client_table(AdminConfig, ClientConfig),
    ("broker.md", "broker-config"): broker_table,
    ("broker.md", "topic-config"): topic_table,
    ("broker.md", "apis"): api_table,
    ("compatibility.md", "api-compat"): compat_table,
}


def render(page: str, text: str) -> str:
    for (file, name), make in TABLES.items():
        if file != page:
            continue
        pattern = re.compile(rf"(<!-- generated:{name} -->\n).*?(<!-- end generated:{name} -->)",
                             re.S)
        if not pattern.search(text):
            raise SystemExit(f"docs/{page} has no <!-- generated:{name} --> block")
        match = pattern.search(text)
        assert match is not None
        text = text[:match.start()] + match.group(1) + make() + "\n" + match.group(2) + \
            text[match.end():]
    return text


def stale() -> list[str]:
    """Pages whose tables differ from what the code says now."""
    out = []
    for page in sorted({file for file, _ in TABLES}):
        text = (DOCS / page).read_text()
        if render(page, text) != text:
            out.append(page)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only report stale tables")
    args = ap.parse_args()
    pages = stale()
    if args.check:
        for page in pages:
            print(f"docs/{page}: tables are out of date; run docs/gen_tables.py")
        return 1 if pages else 0
    for page in pages:
        path = DOCS / page
        path.write_text(render(page, path.read_text()))
        print(f"updated docs/{page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
