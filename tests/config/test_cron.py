"""Quartz ``deleteWhen`` expressions: fire times, translation to croniter, refusals.

Pure: the fields are read in UTC. The last two tests load a ``server.ini`` to check that a bad
``deleteWhen`` stops configuration loading with the file, section, key and value named.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from meta.config import load_config
from meta.config.cron import CronError, QuartzCron, to_croniter
from meta.errors import ConfigError
from tests.config.test_loading import write_ini

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
EVERY_SECOND = "*/1 * * * * ?"


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def fires(expression: str, after: str, count: int = 3) -> list[str]:
    cron = QuartzCron(expression, UTC)
    at = utc(after)
    found = []
    for _ in range(count):
        at = cron.next_fire_s(at)
        found.append(datetime.fromtimestamp(at, UTC).strftime("%a %Y-%m-%d %H:%M:%S"))
    return found


def test_the_shipped_expression_fires_at_six_and_eighteen_every_day():
    assert fires("0 0 6,18 * * ?", "2024-01-01T07:00:00") == [
        "Mon 2024-01-01 18:00:00",
        "Tue 2024-01-02 06:00:00",
        "Tue 2024-01-02 18:00:00",
    ]


def test_every_second_fires_on_the_next_whole_second():
    cron = QuartzCron(EVERY_SECOND, UTC)
    assert cron.next_fire_s(T0) == T0 + 1
    assert cron.next_fire_s(T0 + 0.25) == T0 + 1


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        # Ranges, steps and day-of-week names; Friday evening skips to Monday.
        (
            "0 0/15 9-17 ? * MON-FRI",
            "2024-01-05T17:40:00",
            ["Fri 2024-01-05 17:45:00", "Mon 2024-01-08 09:00:00", "Mon 2024-01-08 09:15:00"],
        ),
        # Quartz numbers days from SUN=1 to SAT=7.
        ("0 0 12 ? * 1", "2024-01-01T00:00:00", ["Sun 2024-01-07 12:00:00"]),
        ("0 0 12 ? * 7", "2024-01-01T00:00:00", ["Sat 2024-01-06 12:00:00"]),
        ("0 0 12 ? * mon", "2024-01-02T00:00:00", ["Mon 2024-01-08 12:00:00"]),
        # Lists of seconds, and an equal range that is one value (croniter: the whole cycle).
        ("15,45 * * * * ?", "2024-01-01T00:00:00", ["Mon 2024-01-01 00:00:15"] * 1),
        ("0 5-5 * * * ?", "2024-01-01T00:10:00", ["Mon 2024-01-01 01:05:00"]),
        # "/20" is "0/20"; "1/10" in day-of-month starts at day 1.
        ("0 /20 * * * ?", "2024-01-01T00:00:00", ["Mon 2024-01-01 00:20:00"]),
        (
            "0 0 12 1/10 * ?",
            "2024-01-01T13:00:00",
            ["Thu 2024-01-11 12:00:00", "Sun 2024-01-21 12:00:00", "Wed 2024-01-31 12:00:00"],
        ),
        # Ranges that wrap around the end of the field, as Quartz allows.
        (
            "0 0 22-2 * * ?",
            "2024-01-01T00:30:00",
            ["Mon 2024-01-01 01:00:00", "Mon 2024-01-01 02:00:00", "Mon 2024-01-01 22:00:00"],
        ),
        (
            "0 0 0 ? * FRI-MON",
            "2024-01-02T00:00:00",
            ["Fri 2024-01-05 00:00:00", "Sat 2024-01-06 00:00:00", "Sun 2024-01-07 00:00:00"],
        ),
        # Month names, the optional year field, and a year step.
        ("0 30 10 ? JAN,JUL SUN 2030", "2024-01-01T00:00:00", ["Sun 2030-01-06 10:30:00"]),
        (
            "0 0 0 1 1 ? 2030/5",
            "2024-01-01T00:00:00",
            ["Tue 2030-01-01 00:00:00", "Mon 2035-01-01 00:00:00", "Sun 2040-01-01 00:00:00"],
        ),
        # L, nW, nL and n#k.
        (
            "0 0 12 L * ?",
            "2024-01-01T00:00:00",
            ["Wed 2024-01-31 12:00:00", "Thu 2024-02-29 12:00:00", "Sun 2024-03-31 12:00:00"],
        ),
        ("0 0 12 15W * ?", "2024-06-01T00:00:00", ["Fri 2024-06-14 12:00:00"]),
        (
            "0 0 12 ? * 6L",
            "2024-01-01T00:00:00",
            ["Fri 2024-01-26 12:00:00", "Fri 2024-02-23 12:00:00", "Fri 2024-03-29 12:00:00"],
        ),
        ("0 0 12 ? * FRI#3", "2024-01-01T00:00:00", ["Fri 2024-01-19 12:00:00"]),
    ],
)
def test_quartz_forms_fire_at_the_quartz_times(expression, after, expected):
    assert fires(expression, after, len(expected)) == expected


def test_an_expression_that_never_fires_has_no_next_time():
    assert QuartzCron("0 0 0 30 2 ?", UTC).next_fire_s(T0) is None


def test_the_translation_puts_seconds_after_day_of_week():
    assert to_croniter("0 0 6,18 * * ?") == "0 6,18 * * * 0"


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("0 0 6,18 * *", "needs 6 or 7 fields"),
        ("0 0 6 * * ? 2030 x", "needs 6 or 7 fields"),
        ("0 0 6,18 * * *", "exactly one of day-of-month and day-of-week must be '?'"),
        ("0 0 6,18 ? * ?", "exactly one of day-of-month and day-of-week must be '?'"),
        ("0 0 25 * * ?", "hour value '25' is not a number 0-23"),
        ("60 0 6 * * ?", "second value '60' is not a number 0-59"),
        ("0 0 6 * FOO ?", "month value 'FOO' is not a number 1-12 or a name"),
        ("0 0 6 ? * 8", "day-of-week value '8' is not a number 1-7"),
        ("? 0 6 * * ?", "'?' is only allowed in day-of-month or day-of-week"),
        ("0 */0 6 * * ?", "minute step '0'"),
        ("0 0 6 LW * ?", "not supported"),
        ("0 0 6 L-3 * ?", "not supported"),
        ("0 0 6 1,L * ?", "cannot be combined with a list"),
        ("0 0 6 ? * 5#6", "nth '6'"),
        ("0 0 6 * * ? 1960", "year value '1960'"),
        ("0 0 6-", "needs 6 or 7 fields"),
        ("0 0 6 * 1- ?", "month value ''"),
    ],
)
def test_malformed_expressions_are_refused_naming_the_expression(expression, reason):
    with pytest.raises(CronError) as info:
        QuartzCron(expression)
    assert reason in str(info.value)
    assert repr(expression.strip()) in str(info.value)


def test_a_bad_delete_when_stops_config_loading_naming_file_section_key_and_value(tmp_path):
    path = write_ini(tmp_path, system=("deleteWhen=0 0 25 * * ?",))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert "server.ini: [system] deleteWhen='0 0 25 * * ?'" in text
    assert "hour value '25' is not a number 0-23" in text


def test_a_bad_topic_delete_when_names_the_topic_section(tmp_path):
    path = write_ini(tmp_path, topics="[topic=test]\ndeleteWhen=0 0 6 * * *\n")
    with pytest.raises(ConfigError, match=r"\[topic=test\] deleteWhen='0 0 6 \* \* \*'"):
        load_config(path)
