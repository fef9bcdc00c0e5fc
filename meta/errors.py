"""Typed errors for metaq-py, rooted in ``MetaError``, and the wire result-code registry.

Every error the broker can answer on the wire carries a ``code`` (the HTTP-style status of the
``result`` frame). ``error_for_code`` maps a received code back to a class, so clients raise the
same types the broker used. Decode errors are ``LocalProtocolError`` where they are detected and
``RemoteProtocolError`` when a peer reports one. Thread-safe: definitions only.
"""

from __future__ import annotations

_CODE_TO_ERROR: dict[int, type[MetaError]] = {}


class MetaError(Exception):
    """Root of every error raised by metaq-py."""

    code: int = 500


def _wire_error(code: int):
    """Register the decorated class as the error type for result code ``code``."""

    def register(cls: type[MetaError]) -> type[MetaError]:
        cls.code = code
        _CODE_TO_ERROR[code] = cls
        return cls

    return register


def error_for_code(code: int) -> type[MetaError]:
    """Return the error class registered for a result code (``MetaError`` if none)."""
    return _CODE_TO_ERROR.get(code, MetaError)


class ConfigError(MetaError):
    """A configuration file is missing, unreadable or invalid. The text names file/section/key."""


class LocalProtocolError(MetaError):
    """Bytes from the peer do not form a valid command; the connection must be closed.

    ``code_hint`` is the status a reply would carry if the protocol allowed one.
    """

    def __init__(self, message: str, code_hint: int = 400) -> None:
        super().__init__(message)
        self.code_hint = code_hint


class RemoteProtocolError(MetaError):
    """The peer reported that our bytes did not form a valid command."""


class InvalidRecordError(MetaError):
    """A stored or received message record is malformed (bad length or checksum)."""


@_wire_error(400)
class BadRequestError(MetaError):
    """The request is well-formed but its values are not acceptable (400)."""


@_wire_error(301)
class MovedError(MetaError):
    """The requested offset is out of range; the body names the offset to use (301)."""


@_wire_error(403)
class ForbiddenError(MetaError):
    """The partition is closed or the broker does not take writes (403)."""


@_wire_error(404)
class NotFoundError(MetaError):
    """No such partition, or no message at that offset yet (404)."""


@_wire_error(500)
class InternalServerError(MetaError):
    """The broker failed the request (500)."""


@_wire_error(503)
class ServiceUnavailableError(MetaError):
    """The broker has no handler for the command (503)."""


class StoreError(InternalServerError):
    """A storage operation failed (I/O error, failed fsync, corrupt segment layout)."""


class PartitionFailedError(StoreError):
    """The partition stopped taking writes after an I/O failure; an operator must act."""


class DescriptorShortageError(StoreError):
    """The process had no file descriptor to spare (EMFILE, ENFILE) to open a store file.

    Transient: the append was not stored, and the partition takes appends again once
    descriptors are free.
    """


class InvalidTopicError(InternalServerError):
    """A topic name is not allowed (compatibility.md) or not accepted by the configuration.

    Java answers a refused topic on put with 500, so this keeps that code.
    """


class ClientError(MetaError):
    """A client-side failure (raised by ``meta.client``, never sent on the wire)."""


class OperationTimeoutError(ClientError):
    """A request got no reply within its timeout."""


class NoPartitionError(ClientError):
    """No partition is available for a topic (not published, or no broker serves it).

    A producer raises one of its three subclasses, each naming its cause and the fix.
    """


class NoBrokerError(ClientError):
    """The chosen partition's broker has no reachable master right now."""


class TopicNotPublishedError(NoPartitionError):
    """The producer never called ``publish(topic)``, so it has no partition list for it."""


class TopicNotServedError(NoPartitionError):
    """ZooKeeper has no partition of the topic: no running broker is configured for it."""


class BrokersUnavailableError(NoPartitionError, NoBrokerError):
    """The topic's brokers are down or not registered yet (ZooKeeper has no master for them).

    Also a ``NoBrokerError``: a partition whose broker has no master URI raised that before.
    """


class SendFailedError(ClientError):
    """The broker refused or failed a put (``SendResult.raise_for_status``).

    Attributes:
        result: the failed ``SendResult``; its ``error_message`` is the broker's reply text.
    """

    def __init__(self, message: str, result: object) -> None:
        super().__init__(message)
        self.result = result


class MessageTooLargeError(ClientError):
    """A message is larger than the producer's ``max_message_bytes``; nothing was sent.

    Raised by the client before any I/O (the broker answers an oversized put with a 500,
    which the producer reports as a failed ``SendResult``), so it is a ``ClientError``.
    """


class InvalidGroupError(ClientError):
    """A consumer group name breaks the Java rule."""


class ClientClosedError(ClientError):
    """The producer, consumer or session factory was shut down."""


class JobEndedError(ClientError):
    """A transactional Spark write task found its batch job already committed or aborted
    (a straggler attempt): it rolled back its own branches instead of handing them over."""


class XAError(MetaError):
    """An XA failure with its standard JTA error code (``meta.protocol.xa``).

    The broker sends it as ``result 500`` with the body ``XAException:code=N,msg=...``; the
    client raises it again with the same ``error_code``.
    """

    def __init__(self, error_code: int, message: str | None = None) -> None:
        super().__init__(f"XA error {error_code}: {message}")
        self.error_code = error_code
        self.message = message


class TransactionError(MetaError):
    """A transaction failed for a reason that is not an XA error code (local transactions)."""


def describe_error(error: object) -> str:
    """``Type: message`` of an exception (or of a Twisted ``Failure``'s ``value``), or the type
    name alone when the message is empty: a log line never ends in an empty reason."""
    error = getattr(error, "value", error)
    text = str(error).strip()
    name = type(error).__name__
    return f"{name}: {text}" if text else name
