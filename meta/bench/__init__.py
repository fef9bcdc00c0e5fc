"""Benchmarks of metaq-py, run by ``tools/bench`` and as ``python -m meta.bench.<name>``.

They ship with the package because ``tools/bench --broker HOST:PORT`` measures an operator's
own broker. Importing this package imports none of its modules.

* ``load``: single-connection load generators over raw sockets (sync, pipelined, consume,
  latency) and the fdatasync loop they run in turns with;
* ``open_loop``: put latency at a fixed rate, each put sent on schedule (open loop);
* ``broker``: ``BenchBroker``, a real broker process, always stopped afterwards;
* ``consumer``: the client library's fetch loop, for throughput and end-to-end latency;
* ``tx``: local transactions of 10 messages, in turns with pipelined puts;
* ``group``: a consumer group with its own ZooKeeper: group throughput and rebalance time;
* ``fsync_floor``: the synchronous producer against minimal fdatasync-per-reply servers;
* ``spark``: the Spark reader against the raw consume rate;
* ``crc``: the CRC-32 of zlib, zlib-ng and isal per record and in bulk (``meta.protocol.crc``'s
  choice);
* ``slave``: an async slave's replay rate and replication lag;
* ``slave_lag``: the probes ``slave`` uses for lag: the slave's end, read over ``offset``,
  and a paced producer.
"""
