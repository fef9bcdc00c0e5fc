"""The encoder of the Metamorphosis text protocol, re-exported by ``codec``.

``encode(command)`` returns the exact bytes a Java peer sends; ``encode_result`` and
``encode_value_header`` are the broker's hot paths. Pure functions, thread-safe.
"""

from __future__ import annotations

from meta.protocol.commands import (
    Command,
    Data,
    Get,
    Offset,
    Put,
    Quit,
    Result,
    Stats,
    Sync,
    Transaction,
    Version,
)


def encode_result(code: int, body: bytes, opaque: int) -> bytes:
    """``result <code> <len> <opaque>\\r\\n<body>`` (hot path for put replies)."""
    return b"result %d %d %d\r\n%s" % (code, len(body), opaque, body)


def encode_value_header(length: int, opaque: int) -> bytes:
    """The header of a value frame; the caller streams ``length`` body bytes after it."""
    return b"value %d %d\r\n" % (length, opaque)


def _encode_put(command: Put) -> bytes:
    fields = [command.topic, command.partition, len(command.data), command.flag]
    if command.checksum is not None:
        fields.append(command.checksum)
    if command.tx_key is not None:
        fields.append(command.tx_key)
    fields.append(command.opaque)
    return ("put " + " ".join(map(str, fields)) + "\r\n").encode() + command.data


def _encode_sync(command: Sync) -> bytes:
    fields = [command.topic, command.partition, len(command.data), command.flag, command.msg_id]
    if command.checksum is not None:
        fields.append(command.checksum)
    fields.append(command.opaque)
    return ("sync " + " ".join(map(str, fields)) + "\r\n").encode() + command.data


def _encode_get(command: Get) -> bytes:
    text = (
        f"get {command.topic} {command.group} {command.partition} {command.offset} "
        f"{command.max_size} {command.opaque}"
    )
    if command.max_wait_ms is not None:
        text += f" {command.max_wait_ms}"
    return (text + "\r\n").encode()


def _encode_transaction(command: Transaction) -> bytes:
    fields = [command.tx_key, command.session_id, command.type]
    qualifier = command.unique_qualifier or None
    # A qualifier that looks numeric would be read back as a timeout, so the timeout is
    # then written even when it is 0 ("none").
    if command.timeout or (qualifier is not None and qualifier.isascii() and qualifier.isdigit()):
        fields.append(str(command.timeout))
    if qualifier is not None:
        fields.append(qualifier)
    fields.append(str(command.opaque))
    return ("transaction " + " ".join(fields) + "\r\n").encode()


def encode(command: Command) -> bytes:
    """Encode a command or frame exactly as a Java peer would send it."""
    match command:
        case Put():
            return _encode_put(command)
        case Result(code, body, opaque):
            return encode_result(code, body, opaque)
        case Data(data, opaque):
            return encode_value_header(len(data), opaque) + data
        case Get():
            return _encode_get(command)
        case Offset(topic, group, partition, offset, opaque):
            return f"offset {topic} {group} {partition} {offset} {opaque}\r\n".encode()
        case Version(opaque):
            return f"version {opaque}\r\n".encode()
        case Stats(item, opaque):
            return f"stats {item} {opaque}\r\n".encode()
        case Quit():
            return b"quit\r\n"
        case Transaction():
            return _encode_transaction(command)
        case Sync():
            return _encode_sync(command)
    raise TypeError(f"cannot encode {command!r}")
