"""Calendar days in retrieve filters: "yesterday", "on Monday", "last week", "on 3 May" (issue 27).

A day is written in a retrieve as ``data.day`` (the query language writes
it from the words) in one of these forms:

* ``today``, ``yesterday``, ``day before yesterday``;
* a weekday, ``monday`` ... ``sunday``: the latest such day before today
  ("on Monday" said on a Monday means a week ago; "today" means today);
* ``last week`` (the calendar week before this one, Monday to Sunday) and
  ``this week`` (this week's Monday to the end of today);
* ``YYYY-MM-DD``, one date;
* ``--MM-DD`` (ISO 8601's date without a year): that day of this year if it
  is not after today, else of last year ("on 3 May" said in January means
  last May; a 29 February the latest one).

Any of them may follow ``since``, ``after``, ``before`` or ``until``: from
the start of that day (or week) on, from its end on, up to its start, up
to its end ("since yesterday", "before last week"; outside review of issue
27: "before yesterday" read as yesterday, "since yesterday" searched the
word "since").

The spec is resolved at query time, not when the sentence is read: readings
are cached (parser.py), and "yesterday" read on Monday must not still mean
Sunday on Wednesday. It is resolved against the daemon's clock, in UTC
unless the retrieve gives ``timezone`` (``data.timezone`` or
``metadata.timezone``: an offset such as ``+02:00`` or an IANA name such as
``Europe/Paris``), into [since, until) like any other time filter.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

__all__ = ["WEEKDAYS", "check_day", "day_bounds", "parse_zone"]

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_RELATIVE = ("today", "yesterday", "day before yesterday", "last week", "this week", *WEEKDAYS)
# How a day bounds the search: since its start, after its end, before its start, until its end.
RELATIONS = ("since", "after", "before", "until")
# ASCII digits only: \d also takes Arabic-Indic and fullwidth ones (outside review).
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
_YEARLESS = re.compile(r"--([0-9]{2})-([0-9]{2})")
_OFFSET = re.compile(r"([+-])([0-9]{2}):?([0-9]{2})")
# A leap year, to check a date without a year (29 February is a day).
_ANY_YEAR = 2000


def check_day(spec: str) -> str:
    """``spec`` in its canonical form (lower case, single spaces); ValueError says why it is no day."""
    text = " ".join(spec.lower().split())
    relation, _, rest = text.partition(" ")
    if relation in RELATIONS and rest:
        return f"{relation} {_check_one(rest, spec)}"
    return _check_one(text, spec)


def _check_one(text: str, spec: str) -> str:
    if text in _RELATIVE:
        return text
    if m := _DATE.fullmatch(text):
        _date(int(m[1]), int(m[2]), int(m[3]))
        return text
    if m := _YEARLESS.fullmatch(text):
        try:
            date(_ANY_YEAR, int(m[1]), int(m[2]))
        except ValueError:
            raise ValueError(
                f"day {int(m[2])} of month {int(m[1])} is not a day of the calendar"
            ) from None
        return text
    raise ValueError(
        "a day is today, yesterday, day before yesterday, a weekday (monday ... sunday), "
        "last week, this week, YYYY-MM-DD or --MM-DD, after since, after, before or until "
        f"if wanted; got {spec[:40]!r}"
    )


def _date(year: int, month: int, day: int) -> date:
    try:
        return date(year, month, day)
    except ValueError:
        raise ValueError(f"{year:04d}-{month:02d}-{day:02d} is not a day of the calendar") from None


@cache
def _ZONE_NAMES() -> dict[str, str]:  # noqa: N802 (a constant, read once when first needed)
    """Every zone name the machine knows, by its lower case: "europe/paris" is Europe/Paris.

    Read once (scanning the zone database takes ~10 ms); from the system's
    database or, where it has none, the tzdata package (a dependency).
    """
    return {name.lower(): name for name in available_timezones()}


def parse_zone(name: str) -> tzinfo:
    """``UTC``/``Z``, an offset (``+02:00``, ``-0530``) or an IANA name in any case; ValueError otherwise."""
    text = name.strip()
    if text.upper() in ("Z", "UTC", "GMT"):
        return UTC
    if m := _OFFSET.fullmatch(text):
        hours, minutes = int(m[2]), int(m[3])
        if hours > 23 or minutes > 59:
            raise ValueError(f"{text!r} is not a UTC offset (at most +23:59)")
        sign = 1 if m[1] == "+" else -1
        return timezone(sign * timedelta(hours=hours, minutes=minutes))
    try:
        return ZoneInfo(_ZONE_NAMES().get(text.lower(), text))
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{text[:40]!r} is neither a UTC offset like +02:00 nor a time zone name "
            "this machine knows (like Europe/Paris)"
        ) from None


def day_bounds(spec: str, now: float, zone: tzinfo = UTC) -> tuple[float | None, float | None]:
    """The [since, until) of the day ``spec`` (canonical, see ``check_day``), as POSIX seconds.

    ``now`` is the daemon's clock; ``zone`` says where its days begin. None
    is an open end ("since yesterday" has no until).

    Raises:
        ValueError: the day does not exist in ``zone`` (a day a zone skipped
            when it moved across the date line).
    """
    relation, _, rest = spec.partition(" ")
    if relation not in RELATIONS:
        relation, rest = "", spec
    first, end = _bounds(rest, now, zone)
    if end <= first:
        raise ValueError(f"{rest} was skipped by the time zone {zone}: it has no hours")
    if relation == "since":
        return first, None
    if relation == "after":
        return end, None
    if relation == "before":
        return None, first
    if relation == "until":
        return None, end
    return first, end


def _bounds(spec: str, now: float, zone: tzinfo) -> tuple[float, float]:
    today = datetime.fromtimestamp(now, zone).date()
    monday = today - timedelta(days=today.weekday())
    if spec == "today":
        first, end = today, today + timedelta(days=1)
    elif spec == "yesterday":
        first, end = today - timedelta(days=1), today
    elif spec == "day before yesterday":
        first, end = today - timedelta(days=2), today - timedelta(days=1)
    elif spec == "last week":
        first, end = monday - timedelta(days=7), monday
    elif spec == "this week":
        first, end = monday, today + timedelta(days=1)
    elif spec in WEEKDAYS:
        back = (today.weekday() - WEEKDAYS.index(spec) - 1) % 7 + 1
        first = today - timedelta(days=back)
        end = first + timedelta(days=1)
    elif m := _DATE.fullmatch(spec):
        first = _date(int(m[1]), int(m[2]), int(m[3]))
        return _midnight(first, zone), _next_midnight(first, zone)
    elif m := _YEARLESS.fullmatch(spec):
        first = _latest(today, int(m[1]), int(m[2]))
        return _midnight(first, zone), _next_midnight(first, zone)
    else:
        raise ValueError(f"not a day: {spec!r}")
    return _midnight(first, zone), _midnight(end, zone)


def _next_midnight(day: date, zone: tzinfo) -> float:
    """The midnight that ends ``day``; 9999-12-31 has no next date, so its end is 24 hours on."""
    if day == date.max:  # date.max + 1 day overflowed (outside review: INTERNAL)
        return _midnight(day, zone) + 86400.0
    return _midnight(day + timedelta(days=1), zone)


def _latest(today: date, month: int, day: int) -> date:
    """The latest ``month``-``day`` on or before ``today`` (29 February: of the latest leap year)."""
    year = today.year
    while True:
        try:
            found = date(year, month, day)
        except ValueError:  # 29 February of a common year
            year -= 1
            continue
        if found <= today:
            return found
        year -= 1


def _midnight(day: date, zone: tzinfo) -> float:
    # fold=0: where a zone's clocks go back at midnight, the day starts at the first of the two.
    return datetime(day.year, day.month, day.day, tzinfo=zone).timestamp()
