"""The HTTP client: produce and consume over a broker's HTTP protocol.

The shape of Java's ``SimpleHttpProducer`` / ``SimpleHttpConsumer``, with the TCP client's
types and errors:

* ``session.HttpSession``: one keep-alive connection (the stdlib's ``http.client``) to one
  broker's HTTP port, reopened when the broker closed it while idle;
* ``producer.HttpProducer``: ``send_message`` returns the TCP producer's ``SendResult``;
* ``consumer.HttpConsumer``: reads a partition's messages, decoded with the shared codec and
  CRC checked, following a 301 as the TCP consumer does (its ``offset_reset`` policy).

No ZooKeeper: the caller names the broker's HTTP address (usually a load balancer that
routes on ``/<brokerId>``). Thread-safety: one object per thread.
"""

from meta.client.http.consumer import HttpConsumer
from meta.client.http.producer import HttpProducer
from meta.client.http.session import HttpSession

__all__ = ["HttpConsumer", "HttpProducer", "HttpSession"]
