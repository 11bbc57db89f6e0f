"""Cluster mode's I/O layer: ZooKeeper (`zk.py`, the only kazoo importer), broker
registration, the controller and topic administration through ZooKeeper.

Imported only when `zookeeper.connect` is set; importing this package itself pulls in
nothing (kazoo loads with `zk.py`). Handlers never import it: they see ports.
"""
