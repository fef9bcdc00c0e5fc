"""The client's connections to brokers: blocking and pipelined, and the pool that shares them.

``connection`` (one request at a time, for admin tools and Spark executors), ``pipeline``
(many requests in flight, replies matched by opaque), ``futures`` (the pipelined requests'
futures) and ``pool`` (one pipelined connection per broker, shared by a factory's users).
Nothing here knows topics, groups or ZooKeeper. Import the modules themselves; this package
re-exports nothing.
"""
