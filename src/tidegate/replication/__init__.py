"""Replication rules of cluster mode, sans-IO: plain functions and state objects, time
passed in as milliseconds, no asyncio, sockets or ZooKeeper client (import-linter checks).

- `replica_state`: the leader's view of one partition: followers' positions, ISR
  (committed and pending), high watermark, acks=all and min.insync.replicas checks;
- `follower`: the follower's rules: high watermark, truncation point from an
  OffsetForLeaderEpoch answer or a diverging epoch (KIP-101, KIP-279, KIP-595 style);
- `election`: Kafka's partition leader election algorithms;
- `assignment`: Kafka's replica assignment (rack-unaware and rack-aware);
- `znodes`: ZooKeeper paths and JSON codecs; `zk_ops`: ZooKeeper operations as values
  (conditional writes the I/O layer runs as one `multi`).

The leader epoch cache these rules read lives with the log: `tidegate.storage.leader_epochs`.
The I/O shells that drive them (fetcher, controller, ZooKeeper bridge) are in
`tidegate.server.cluster`.
"""
