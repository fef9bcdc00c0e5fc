"""Fixtures of the broker tests: every test closes the descriptors it opens
(``tests.descriptors``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.descriptors import guard_descriptors


@pytest.fixture(autouse=True)
def descriptors_closed() -> Iterator[None]:
    """Fail a test that leaves a descriptor open (``tests.descriptors``)."""
    yield from guard_descriptors()
