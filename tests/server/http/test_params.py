"""The URL grammar of the HTTP protocol (spec §2, H2, H3): pure, no I/O."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest

from meta.protocol.commands import Get, Offset
from meta.server.http.params import (
    BadParameter,
    PutParameters,
    get_command,
    offset_command,
    parse_query,
    put_parameters,
    route,
)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (b"/get", "get"),
        (b"/get/0", "get"),
        (b"/put/7/anything/else", "put"),
        (b"/offset/0", "offset"),
        (b"/ping", None),
        (b"/getx/0", None),
        (b"/", None),
        (b"", None),
        (b"get/0", None),
    ],
)
def test_route_takes_the_exact_first_segment(path, expected):
    assert route(path) == expected


def test_the_first_value_of_a_repeated_parameter_counts():
    assert parse_query(b"/get/0?topic=a&topic=b&x=") == {"topic": "a", "x": ""}


@pytest.mark.parametrize(
    "query",
    ["a=1&b=2", "a&b=&=c", "a==b&a=2", "&&a=1&", "a=1;b=2", "t=\u00e9t\u00e9&p=0", "", "x"],
)
def test_a_query_without_escapes_parses_as_parse_qsl_parses_it(query):
    expected: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        expected.setdefault(key, value)
    assert parse_query(b"/get/0?" + query.encode()) == expected


def test_a_query_that_is_not_utf8_is_refused():
    with pytest.raises(BadParameter, match="UTF-8"):
        parse_query(b"/get/0?topic=%ff")


def test_a_get_without_group_uses_the_dash_group_and_no_wait():
    params = parse_query(b"?topic=t&partition=1&offset=20&maxsize=100")
    assert get_command(params) == Get("t", "-", 1, 20, 100, 0, None)


def test_a_get_with_maxwait_asks_for_long_polling():
    params = parse_query(b"?topic=t&partition=1&offset=20&maxsize=100&maxwait=250&group=g")
    assert get_command(params) == Get("t", "g", 1, 20, 100, 0, 250)


def test_an_offset_query_becomes_the_offset_command():
    params = parse_query(b"?topic=t&partition=0&offset=100")
    assert offset_command(params) == Offset("t", "-", 0, 100, 0)


def test_a_put_without_checksum_has_none_and_minus_one_means_none():
    params = parse_query(b"?topic=t&partition=-1&flag=0&length=5")
    assert put_parameters(params) == PutParameters("t", -1, 0, 5, None)
    params = parse_query(b"?topic=t&partition=0&flag=0&length=5&checksum=-1")
    assert put_parameters(params).checksum is None


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (b"?partition=0&offset=0&maxsize=1", "missing parameter topic"),
        (b"?topic=t&offset=0&maxsize=1", "missing parameter partition"),
        (b"?topic=t&partition=0&offset=x&maxsize=1", "parameter offset is not a number"),
        (b"?topic=t&partition=0&offset=0&maxsize=0", "parameter maxsize is out of range"),
        (b"?topic=t&partition=0&offset=0&maxsize=99999999999", "maxsize is out of range"),
        (b"?topic=..&partition=0&offset=0&maxsize=1", "parameter topic"),
        (b"?topic=t&partition=0&offset=0&maxsize=1&group=a%20b", "parameter group"),
        (b"?topic=t&partition=0&offset=0&maxsize=1&maxwait=-1", "parameter maxwait"),
    ],
)
def test_a_bad_get_parameter_is_named(query, message):
    with pytest.raises(BadParameter, match=message):
        get_command(parse_query(query))
