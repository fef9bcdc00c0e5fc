"""``check_new_topic``: exact sections are never counted, wildcard topics are, up to maxTopics."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from meta.errors import StoreError
from meta.server.topic_limits import check_new_topic


def config(topics_max: int):
    sections = (
        SimpleNamespace(name="fixed", is_pattern=False),
        SimpleNamespace(name="wild-*", is_pattern=True),
    )
    return SimpleNamespace(topics=sections, topics_max=topics_max)


def logs(*topics: str) -> list:
    return [SimpleNamespace(topic=topic) for topic in topics]


def test_a_new_wildcard_topic_beyond_the_maximum_is_refused():
    with pytest.raises(StoreError, match=r"cannot create topic wild-3: .* \(maxTopics=2\)"):
        check_new_topic(config(2), logs("wild-1", "wild-2", "fixed", "wild-1"), "wild-3")


def test_exact_sections_neither_count_nor_are_refused():
    check_new_topic(config(1), logs("fixed", "wild-1"), "fixed")
    check_new_topic(config(2), logs("fixed", "wild-1"), "wild-2")


def test_a_new_partition_of_a_counted_topic_is_not_refused():
    check_new_topic(config(1), logs("wild-1"), "wild-1")


def test_zero_allows_only_exact_sections():
    with pytest.raises(StoreError):
        check_new_topic(config(0), [], "wild-1")
