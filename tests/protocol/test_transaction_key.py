import pytest
from hypothesis import given
from hypothesis import strategies as st

from meta.errors import LocalProtocolError
from meta.protocol.transaction_key import (
    CANONICAL_LOCAL_KEY,
    CANONICAL_LOCAL_KEY_BYTES,
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


local_keys = st.one_of(
    st.from_regex(r"TX:[a-z:]{0,4}:[+-]?0{0,2}[0-9]{1,11}:{0,2}", fullmatch=True),
    st.builds(lambda s, n: f"TX:{s}:{n}", st.text(max_size=6), st.integers(-(2**33), 2**33)),
)


@given(local_keys)
def test_a_key_the_canonical_pattern_takes_parses_to_itself(key):
    """The decoder and the handlers skip parsing keys of ``CANONICAL_LOCAL_KEY``: each such
    key must be valid and already written as Java writes it back."""
    if CANONICAL_LOCAL_KEY.fullmatch(key) is not None:
        assert parse_transaction_key(key).key() == key
        assert CANONICAL_LOCAL_KEY_BYTES.fullmatch(key.encode()) is not None


@pytest.mark.parametrize("key", ["TX:s:1", "TX::0", "TX:s1:-2147483", "TX:a b:999999999"])
def test_the_canonical_pattern_takes_the_common_local_keys(key):
    assert CANONICAL_LOCAL_KEY.fullmatch(key) is not None


@pytest.mark.parametrize("key", ["TX:s:01", "TX:s:-0", "TX:s:+1", "TX:s:1:", "TX:s:1234567890"])
def test_the_canonical_pattern_leaves_other_spellings_to_the_parser(key):
    assert CANONICAL_LOCAL_KEY.fullmatch(key) is None
