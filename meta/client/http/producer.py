"""``HttpProducer``: send messages over a broker's HTTP protocol (Java's SimpleHttpProducer).

A message is checked as the TCP producer checks it (``check_message``), encoded with the
shared payload codec (attribute, flag) and sent as ``POST /put/<brokerId>`` with its
checksum, so the broker refuses a body damaged on the way. The answer becomes the TCP
producer's ``SendResult``: 200 is a success with the message id, partition and offset (also
set on the message); 403 is ``SendResult(False, None, -1, "403")``; any other status is a
failure carrying the broker's text.

Not thread-safe: one producer per thread.
"""

from __future__ import annotations

from meta.client.cluster import Partition
from meta.client.http.session import HttpSession
from meta.client.message import Message, SendResult, check_message
from meta.errors import ClientError
from meta.protocol.message import checksum
from meta.protocol.put_reply import decode_put_reply


class HttpProducer:
    """Sends messages to one broker over HTTP.

    Args:
        session: the connection to the broker's HTTP port (see ``HttpSession``).
    """

    def __init__(self, session: HttpSession) -> None:
        self.session = session

    def send_message(self, message: Message, partition: int = -1) -> SendResult:
        """Send ``message`` to ``partition`` (-1: the broker picks one at random).

        Raises:
            ClientError: the message is not sendable, the connection failed, or the
                broker's 200 answer is malformed.
            OperationTimeoutError: no answer in time.
        """
        check_message(message)
        payload, flag = message.payload_and_flag()
        params = {
            "topic": message.topic,
            "partition": partition,
            "flag": flag,
            "length": len(payload),
            "checksum": checksum(payload),
        }
        reply = self.session.request("POST", "put", params, payload)
        if reply.status == 403:
            return SendResult.failure("403")
        if reply.status != 200:
            return SendResult.failure(reply.body.decode("utf-8", "replace"))
        try:
            msg_id, partition_number, offset = decode_put_reply(reply.body)
        except ValueError:
            raise ClientError(f"malformed put reply {reply.body!r} for {message.topic}") from None
        message.id = msg_id
        message.partition = Partition(self.session.broker_id, partition_number)
        message.offset = offset
        return SendResult(True, message.partition, offset, None, msg_id)

    def close(self) -> None:
        self.session.close()
