"""Client quotas and throttling (Kafka's ClientQuotaManager, KIP-13/55/124/219/546/599).

Pure parts: `rate.py` (sampled rates, throttle time, the mutation token bucket),
`entities.py` (entities, precedence, validation, filters), `manager.py` (configs and
sensors). I/O parts: `store.py` (the file), `cluster.py` (ZooKeeper), `throttle.py` and
`mutations.py` (the listener's hook). docs/security.md ("Quotas") is the user's view.
"""
