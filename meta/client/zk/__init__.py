"""The client's ZooKeeper side: the only client modules that import kazoo.

``cluster_view`` (brokers and partitions of the topics a factory publishes), ``group``
(a consumer's membership and partition ownership), ``balance`` (the strategies that share a
topic's partitions among a group's consumers) and ``spark`` (the Spark planner's one-shot
reads). Imported only when a factory uses ZooKeeper, so direct-mode users never load kazoo.
Import the modules themselves; this package re-exports nothing.
"""
