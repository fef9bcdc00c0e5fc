"""A put reply as a ``SendResult``: the producer's reply converter.

200 is a success carrying the partition, offset and message id of the reply (also set on the
message); 403 is ``SendResult.failure("403")``; any other code is a failure with the reply
text. ``Partition`` values are cached (at most ``PARTITIONS_CACHED_MAX``) so the throughput
path builds none per reply.

Thread-safety: converters run on a connection's reader thread; the cache is a dict whose
single-key reads and writes are atomic, and a lost race only builds one more ``Partition``.
"""

from __future__ import annotations

from meta.client.cluster import Partition
from meta.client.message import Message, SendResult
from meta.client.net.pipeline import ResultConverter
from meta.errors import ClientError
from meta.protocol.commands import Data, Result
from meta.protocol.put_reply import decode_put_reply

PARTITIONS_CACHED_MAX = 4096
"""How many ``Partition`` values the reply path keeps, to build none per reply."""
_partitions: dict[tuple[int, int], Partition] = {}


class SendResultConverter(ResultConverter):
    """Turns a put reply into a ``SendResult`` (runs on the connection's reader thread).

    Sets the message's ``id``, ``partition`` and ``offset`` before the future completes.
    """

    __slots__ = ("message", "broker_id")

    def __init__(self, message: Message, broker_id: int) -> None:
        self.message = message
        self.broker_id = broker_id

    def __call__(self, reply: Result | Data) -> SendResult:
        if not isinstance(reply, Result):
            raise ClientError(f"unexpected value frame in reply to a put of {self.message.topic}")
        return self.from_result(reply.code, reply.body)

    def from_result(self, code: int, body: bytes) -> SendResult:
        if code != 200:
            if code == 403:
                return SendResult.failure("403")
            return SendResult.failure(body.decode("utf-8", "replace"))
        try:
            msg_id, partition_number, offset = decode_put_reply(body)
        except ValueError:
            raise ClientError(f"malformed put reply {body!r} for {self.message.topic}") from None
        key = (self.broker_id, partition_number)
        partition = _partitions.get(key)
        if partition is None:
            partition = Partition(self.broker_id, partition_number)
            if len(_partitions) < PARTITIONS_CACHED_MAX:
                _partitions[key] = partition
        message = self.message
        message.id = msg_id
        message.partition = partition
        message.offset = offset
        return SendResult(True, partition, offset, None, msg_id)
