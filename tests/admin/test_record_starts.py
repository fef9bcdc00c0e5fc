"""The record starts named around an offset that is not one (``meta.admin.record_starts``)."""

from __future__ import annotations

from meta.admin.record_starts import nearest_starts, nearest_starts_text


def test_the_starts_on_either_side_are_found():
    assert nearest_starts([0, 43, 92, 135], 50) == (43, 92)


def test_only_the_starts_up_to_the_first_after_are_read():
    def starts():
        yield from (0, 43, 92)
        raise AssertionError("read past the first start after the offset")

    assert nearest_starts(starts(), 10) == (0, 43)


def test_an_offset_past_the_last_start_has_none_after_it():
    assert nearest_starts([0, 43], 50) == (43, None)
    assert nearest_starts([], 5) == (None, None)


def test_the_text_names_each_side_there_is():
    assert nearest_starts_text(43, 92) == (
        "the nearest records start at 43 (before it) and 92 (after it)"
    )
    assert nearest_starts_text(43, None) == (
        "the nearest record starts at 43, before it (none after it)"
    )
    assert nearest_starts_text(None, 0) == "the nearest record starts at 0, after it"
