import pytest

from meta.errors import LocalProtocolError
from meta.protocol.transaction_key import (
    LocalTransactionId,
    XATransactionId,
    parse_transaction_key,
)


def test_null_key_is_none():
    assert parse_transaction_key("null") is None


def test_local_key_parses_session_and_number():
    assert parse_transaction_key("TX:10.0.0.1-1700000000000-1:7") == LocalTransactionId(
        "10.0.0.1-1700000000000-1", 7
    )


def test_local_key_number_is_a_32_bit_int_as_in_java():
    with pytest.raises(LocalProtocolError):
        parse_transaction_key("TX:s:2147483648")


def test_local_key_with_a_colon_in_the_session_is_refused():
    with pytest.raises(LocalProtocolError):
        parse_transaction_key("TX:a:b:1")


def test_xa_key_parses_and_writes_hex_back_in_lower_case():
    xid = parse_transaction_key("XID:1:0A0b:ff:XAMessageProducer-host")
    assert xid == XATransactionId(1, b"\x0a\x0b", b"\xff", "XAMessageProducer-host")
    assert xid.key() == "XID:1:0a0b:ff:XAMessageProducer-host"


def test_xa_key_ignores_an_odd_trailing_hex_digit():
    assert parse_transaction_key("XID:1:abc::q").global_transaction_id == b"\xab"


def test_xa_key_keeps_empty_parts_and_needs_exactly_five():
    assert parse_transaction_key("XID:0:::").branch_qualifier == b""
    with pytest.raises(LocalProtocolError):
        parse_transaction_key("XID:0:aa:bb:q:extra")


@pytest.mark.parametrize("key", ["", "tx:a:1", "XID:x:aa:bb:q", "XID:1:zz:bb:q", "other"])
def test_malformed_keys_are_protocol_errors(key):
    with pytest.raises(LocalProtocolError):
        parse_transaction_key(key)
