"""The classic group coordinator: groups, rebalances and committed offsets.

`shard.GroupShard` holds one `__consumer_offsets` partition's groups; the operations
are in `rebalance` (JoinGroup), `membership` (SyncGroup, Heartbeat, LeaveGroup),
`offsets` (OffsetCommit, OffsetFetch, OffsetDelete, expiry) and `admin`
(DescribeGroups, ListGroups, DeleteGroups); `states` is the state-transition table.
"""
