"""Producers: sending messages to the partitions a selector chooses.

``producer`` (``MessageProducer``, and its local transactions), ``selectors`` (partition
choice), ``ordered`` (per-key order with a local backlog), ``async_producer`` (one-way with a
window), ``xa`` (a producer taking part in XA transactions) and ``log_handler`` (logging
records sent as messages). Import the modules themselves; this package re-exports nothing.
"""
