"""Quartz cron expressions (``deleteWhen``): validation and the next fire time.

``QuartzCron`` translates a Quartz expression (``sec min hour day-of-month month day-of-week
[year]``) into a croniter expression; ``next_fire_s`` is the next fire time. Quartz and
croniter differ: croniter puts seconds after day-of-week, numbers the days of the week 0-6
from Sunday (Quartz: 1-7 from ``SUN``), does not check Quartz's rule that exactly one day
field is ``?``, reads an equal range such as ``5-5`` as the whole cycle, and spells "last
Friday" ``L5`` (Quartz ``6L``). So every plain field is expanded here into the explicit list
of its values and only the date arithmetic is croniter's. Quartz's ``LW`` and ``L-n`` have no
croniter form and are refused.

The configuration checks every ``deleteWhen`` with it at load time; the store's retention
schedule (``meta.store.manager``) asks it for fire times. Pure and thread-safe.
"""

from __future__ import annotations

from datetime import datetime, tzinfo

from croniter import CroniterError, croniter

CRON_CHARS_MAX = 256  # a longer deleteWhen is refused before it is parsed

# (name, lowest, highest) of the Quartz fields, in Quartz order.
_FIELDS = (
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 1, 7),
    ("year", 1970, 2099),
)
_DAY_OF_MONTH = 3
_MONTH = 4
_DAY_OF_WEEK = 5
_MONTH_NAMES = "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split()
_DAY_NAMES = "SUN MON TUE WED THU FRI SAT".split()
_NAMES = {
    _MONTH: {name: number for number, name in enumerate(_MONTH_NAMES, 1)},
    _DAY_OF_WEEK: {name: number for number, name in enumerate(_DAY_NAMES, 1)},
}


class CronError(ValueError):
    """A ``deleteWhen`` that is not a Quartz cron expression this broker can run.

    Attributes:
        expression: the text as given.
        reason: what is wrong, without the expression (the config error adds its own context).
    """

    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(f"invalid Quartz cron expression {expression!r}: {reason}")
        self.expression = expression
        self.reason = reason


class QuartzCron:
    """A validated Quartz cron expression and its croniter translation.

    Args:
        expression: e.g. ``0 0 6,18 * * ?`` (06:00:00 and 18:00:00 every day).
        tz: the time zone the fields are read in; None is the local time zone, as Quartz
            uses the JVM's default zone.

    Raises:
        CronError: malformed, or a Quartz feature croniter cannot express (``LW``, ``L-n``).
    """

    def __init__(self, expression: str, tz: tzinfo | None = None) -> None:
        self.expression = expression.strip()
        self.croniter_expression = to_croniter(self.expression)
        self._tz = tz

    def next_fire_s(self, after_s: float) -> float | None:
        """The first fire time strictly after ``after_s`` (epoch seconds); None if none is left."""
        start = datetime.fromtimestamp(after_s, self._tz)
        try:
            fire = croniter(self.croniter_expression, start).get_next(datetime)
        except CroniterError:  # CroniterBadDateError: e.g. 30 February, or only past years
            return None
        return fire.timestamp()

    def __repr__(self) -> str:
        return f"QuartzCron({self.expression!r})"


def to_croniter(expression: str) -> str:
    """Translate a Quartz expression into croniter's ``min hour dom month dow sec [year]``.

    Raises:
        CronError: the expression is malformed.
    """
    text = expression.strip()
    if len(text) > CRON_CHARS_MAX:
        raise CronError(text[:40] + "...", f"longer than {CRON_CHARS_MAX} characters")
    fields = text.upper().split()
    if len(fields) not in (6, 7):
        raise CronError(
            text,
            "a Quartz cron expression needs 6 or 7 fields "
            f"(sec min hour day-of-month month day-of-week [year]), got {len(fields)}",
        )
    converted = [_convert_field(text, index, field) for index, field in enumerate(fields)]
    if (fields[_DAY_OF_MONTH] == "?") == (fields[_DAY_OF_WEEK] == "?"):
        raise CronError(text, "exactly one of day-of-month and day-of-week must be '?'")
    second, minute, hour, day_of_month, month, day_of_week, *year = converted
    result = " ".join([minute, hour, day_of_month, month, day_of_week, second, *year])
    try:
        croniter(result)
    except CroniterError as error:  # a combination croniter refuses
        raise CronError(text, str(error)) from None
    return result


def _convert_field(text: str, index: int, field: str) -> str:
    """One Quartz field as croniter text: ``*``, a sorted list, or a day special."""
    name, low, high = _FIELDS[index]
    if field == "?":
        if index not in (_DAY_OF_MONTH, _DAY_OF_WEEK):
            raise CronError(text, f"'?' is only allowed in day-of-month or day-of-week, not {name}")
        return "*"
    if _is_special(index, field):
        return _convert_special(text, index, field)
    values: set[int] = set()
    for item in field.split(","):
        values.update(_expand_item(text, index, item))
    if values == set(range(low, high + 1)):
        return "*"
    if index == _DAY_OF_WEEK:
        values = {value - 1 for value in values}  # Quartz SUN=1..SAT=7; croniter SUN=0..SAT=6
    return ",".join(str(value) for value in sorted(values))


def _expand_item(text: str, index: int, item: str) -> list[int]:
    """Expand ``*``, ``N``, ``A-B`` (wrapping when A > B, as Quartz) with an optional ``/step``."""
    name, low, high = _FIELDS[index]
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        step = _number(text, index, step_text, 1, high - low + 1, "step")
    if base == "*" or (slash and base == ""):  # Quartz reads "/5" as "0/5"
        first, last = low, high
    elif "-" in base:
        first_text, _, last_text = base.partition("-")
        first, last = _value(text, index, first_text), _value(text, index, last_text)
    else:
        first = _value(text, index, base)
        last = high if slash else first  # "5/15": from 5 to the end of the field
    if first <= last:
        return list(range(first, last + 1, step))
    wrapped = [*range(first, high + 1), *range(low, last + 1)]
    return wrapped[::step]


def _value(text: str, index: int, token: str) -> int:
    """A number of the field, or a month / day-of-week name."""
    name, low, high = _FIELDS[index]
    names = _NAMES.get(index, {})
    if token in names:
        return names[token]
    return _number(text, index, token, low, high, "value")


def _number(text: str, index: int, token: str, low: int, high: int, what: str) -> int:
    name = _FIELDS[index][0]
    if not (token.isascii() and token.isdigit()) or not low <= int(token) <= high:
        hint = " or a name" if index in _NAMES and what == "value" else ""
        raise CronError(text, f"{name} {what} {token!r} is not a number {low}-{high}{hint}")
    return int(token)


def _is_special(index: int, field: str) -> bool:
    """Whether a day field uses ``L``, ``W`` or ``#`` (``WED`` and ``JUL`` are names)."""
    if index == _DAY_OF_MONTH:
        return "L" in field or "W" in field
    return index == _DAY_OF_WEEK and ("L" in field or "#" in field)


def _convert_special(text: str, index: int, field: str) -> str:
    """``L`` and ``nW`` (day-of-month); ``L``, ``nL`` and ``n#k`` (day-of-week)."""
    name = _FIELDS[index][0]
    if "," in field:
        raise CronError(text, f"'L', 'W' and '#' cannot be combined with a list in {name}")
    if index == _DAY_OF_MONTH:
        if field == "L":
            return "l"
        if field.endswith("W") and field != "LW":
            return f"{_number(text, index, field[:-1], 1, 31, 'value')}w"
        raise CronError(text, f"day-of-month {field!r} is not supported (use L or nW)")
    if index == _DAY_OF_WEEK:
        if field == "L":
            return "6"  # Quartz: a bare L in day-of-week is the last day of the week, SAT
        if field.endswith("L"):
            return f"l{_value(text, index, field[:-1]) - 1}"
        day, hash_mark, nth = field.partition("#")
        if hash_mark:
            return f"{_value(text, index, day) - 1}#{_number(text, index, nth, 1, 5, 'nth')}"
    raise CronError(text, f"day-of-week {field!r} is not supported (use L, nL or n#k)")
