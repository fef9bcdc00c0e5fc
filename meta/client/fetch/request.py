"""A fetch request: one partition's state in the fetch loop (``FetchRequest``), and its settings.

``FetchRequest`` is one owned partition's fetch state: the stored offset (committed), the
manual-mode read position ``tmp_offset``, the retry count, the current fetch size and delay,
and the partition's ``PartitionControl``. It is mutated only by the fetch thread holding it
(or by the owner while the manager is stopped). ``FetchSettings`` is what the fetch loop
needs of a consumer's config. Re-exported by ``meta.client.fetch.manager``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from meta.client.cluster import BrokerAddress, Partition
from meta.client.fetch.received import PartitionControl


@dataclass(frozen=True)
class FetchSettings:
    """What the fetch loop needs from ``ConsumerConfig`` (see there for the meanings)."""

    group: str
    fetch_timeout_s: float
    max_delay_fetch_ms: int
    long_poll_ms: int
    offset_reset: str
    fetch_threads: int
    max_fetch_retries: int = 5


@dataclass
class FetchRequest:
    """One owned partition's fetch state (mutated only by the thread that holds it)."""

    topic: str
    partition: Partition
    address: BrokerAddress | None
    offset: int
    msg_id: int = -1
    modified: bool = False
    max_size: int = 1024 * 1024
    delay_ms: int = 0
    retries: int = 0
    tmp_offset: int = -1
    control: PartitionControl = field(default_factory=PartitionControl, repr=False)
    initial_max_size: int = 0  # the subscription's size; 0: max_size at creation

    def __post_init__(self) -> None:
        if not self.initial_max_size:
            self.initial_max_size = self.max_size

    @property
    def key(self) -> tuple[str, str]:
        return self.topic, str(self.partition)

    @property
    def next_offset(self) -> int:
        """Where the next fetch reads: ``tmp_offset`` in manual mode, else ``offset``."""
        return self.tmp_offset if self.tmp_offset >= 0 else self.offset
