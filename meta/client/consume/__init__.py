"""Consumers: subscriptions, delivery to listeners, offsets kept locally, and pulls.

``consumer`` (``MessageConsumer`` and ``ConsumerConfig``), ``delivery`` (what happens to each
message around the listener), ``direct`` (direct mode, without ZooKeeper), ``broadcast``
(a per-host group with local offsets), ``local_offsets`` (that offsets file), ``recover``
(messages kept locally for another try) and ``pull`` (``get`` and ``TopicBrowser``).
Import the modules themselves; this package re-exports nothing.
"""
