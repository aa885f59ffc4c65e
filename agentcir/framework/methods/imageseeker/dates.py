"""Dates: photo timestamps (EXIF, XMP, DISBench) and the date periods of filters and questions.

A *period* is a half-open ``[start, end)`` pair of datetimes. ``2023`` is the year,
``2023-06`` the month, ``2023-06-14`` the day, ``2023-06-14 10:30`` that minute;
:func:`parse_period` reads those forms and :func:`period_range` a ``a..b`` range of them
(both ends included: ``2023-06..2023-08`` is June to August).
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta

MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
MONTHS["sept"] = 9
SEASONS = {"spring": (3, 5), "summer": (6, 8), "autumn": (9, 11), "fall": (9, 11), "winter": (12, 2)}

_TS = re.compile(
    r"^\s*(\d{4})[-:/.](\d{1,2})[-:/.](\d{1,2})(?:[T\s]+(\d{1,2}):(\d{2})(?::(\d{2})(?:[.,]\d+)?)?)?"
    r"\s*(?:Z|[+-]\d{2}:?\d{2})?\s*$"
)
_PERIOD = re.compile(r"^\s*(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[T\s](\d{1,2}):(\d{2}))?)?)?\s*$")


def parse_timestamp(text: object) -> datetime | None:
    """A photo timestamp (``2010:04:10 13:52:57``, ``2009-11-28T13:42:39.017+02:00``,
    ``2010-04-10 13:52:57``, ``2010-04-10``) as a naive local datetime (time zone dropped,
    as cameras record local time); ``None`` for blanks, zeros and impossible dates."""
    if text is None:
        return None
    if isinstance(text, datetime):
        return text
    m = _TS.match(str(text).strip().rstrip("\x00"))
    if not m:
        return None
    y, mo, d, h, mi, s = (int(g) if g else 0 for g in m.groups())
    if y < 1800:
        return None
    try:
        return datetime(y, mo, d, h, mi, s)
    except ValueError:
        return None


def format_timestamp(dt: datetime | None) -> str | None:
    """DISBench's ``taken_time`` form: ``YYYY-MM-DD HH:MM:SS``."""
    return dt.strftime("%Y-%m-%d %H:%M:%S") if dt else None


def _add_months(dt: datetime, n: int) -> datetime:
    m = dt.month - 1 + n
    return dt.replace(year=dt.year + m // 12, month=m % 12 + 1, day=1)


def parse_period(text: str) -> tuple[datetime, datetime] | None:
    """``[start, end)`` of ``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD`` or ``YYYY-MM-DD HH:MM``; ``None``
    when ``text`` is not one of these or names an impossible date."""
    m = _PERIOD.match(str(text))
    if not m:
        return None
    y, mo, d, h, mi = m.groups()
    try:
        if mo is None:
            start = datetime(int(y), 1, 1)
            return start, start.replace(year=start.year + 1)
        if d is None:
            start = datetime(int(y), int(mo), 1)
            return start, _add_months(start, 1)
        if h is None:
            start = datetime(int(y), int(mo), int(d))
            return start, start + timedelta(days=1)
        start = datetime(int(y), int(mo), int(d), int(h), int(mi))
        return start, start + timedelta(minutes=1)
    except ValueError:
        return None


def period_range(a: str, b: str) -> tuple[datetime, datetime] | None:
    """``a..b``: from the start of period ``a`` to the end of period ``b`` (``None`` if either
    does not parse or the range is empty)."""
    pa, pb = parse_period(a), parse_period(b)
    if pa is None or pb is None or pb[1] <= pa[0]:
        return None
    return pa[0], pb[1]


def month_period(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1)
    return start, _add_months(start, 1)


def season_period(year: int, season: str) -> tuple[datetime, datetime]:
    """Meteorological seasons; ``winter 2023`` is December 2023 to February 2024."""
    first, last = SEASONS[season]
    start = datetime(year, first, 1)
    months = (last - first) % 12 + 1
    return start, _add_months(start, months)
