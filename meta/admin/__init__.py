"""``meta-admin``: the operator tool of a metaq-py (MetaQ 1.x) cluster (``meta.admin.main``).

Commands live in their own modules: ``tx`` (transactions, one broker over the wire),
``cluster`` (brokers, topics, partitions, stats), ``groups`` (groups, lag, reset-offsets),
``group_delete`` (groups delete) and ``messages`` (browse, find-message). The cluster
commands read ZooKeeper (``zk``) and the brokers (``reads``) within one ``session``;
``output`` prints tables, JSON and progress bars.
Importing this package has no side effects: no reactor, no kazoo, no socket.
"""
