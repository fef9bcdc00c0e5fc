"""Synchronous replication: a samsa master and its gregor slave (Java's two sync plug-ins).

A samsa master answers a put with 200 only once the record is stored on the master and on its
one gregor slave, each under its own flush settings; it pushes each record to the slave with
the ``sync`` command over a connection it opens itself. A gregor slave takes ``sync`` from its
master, serves gets and offsets, refuses plain puts with 403 and registers nothing in
ZooKeeper. Compare the async slave (``meta.slave``), which pulls from its master as a consumer.

The broker holds its role in ``Broker.sync`` (None on a plain broker); the role answers
``stats sync``. Configuration: ``meta.config.SamsaConfig`` and ``meta.config.GregorConfig``.
"""
