"""Metadata conditions of a history question, read by rules: dates, places, people, albums, cameras, keywords, ...

:func:`parse_conditions` reads what a question says about the photos' *metadata* and turns each
statement into a :class:`Condition` (a ``filter_metadata`` expression of :mod:`.expr` plus the
words it came from), removing those words from the text; what is left is the question's
visual part (possibly nothing). It reads:

=========== =====================================================================================
dates       years (``in 2022``, ``from 2022``, ``2022 photos``), months (``October 2008``, ``in
            October``), days (``22 October 2008``, ``October 22, 2008``, ``2008-10-22``), ranges
            (``between 2000 and 2005``, ``from March 2008 to May 2008``, ``2000-2005``),
            ``before`` / ``after`` / ``since`` / ``until``, seasons (``summer 2008``, ``in winter``),
            weekdays (``on Saturdays``, ``at weekends``), times of day (``in the morning``, ``at
            night``, ``after 6 pm``), dates relative to the newest photo (``last summer``, ``this
            year``, ``last month``, ``two years ago``, ``in the past 3 years``)
places      cities, regions and countries of the bundled gazetteer (a region or country contains
            its cities), aliases (``NYC``), demonyms (``Italian photos``)
people      names of the collection's tagged people (``Marie Curie``, ``Curie``); ``with people``
albums      ``the nature album``, ``in the folder gps`` (folder names of the collection)
cameras     makes and models of the collection (``Nikon``, ``Canon 40D``, ``iPhone``)
keywords    ``tagged birds``, ``with the keyword "Landscape"``, or a keyword of the collection
            named as the subject (``photos of raptors``)
titles      ``titled "Mongol Els"``, quoted text, a title of the collection
ratings     ``rated 3 or more``, ``5-star``, ``rated photos``
negation    ``not in Rome``, ``except Nikon``, ``without people``, ``other than 2008``
counting    ``how many``, ``number of``, ``count``
=========== =====================================================================================

What looks like a condition but cannot be read (an unknown place after ``in``, a holiday, an
unknown album or camera) is listed in :attr:`Parsed.unparsed`; those words stay in the text,
so the visual search still sees them rather than the condition being dropped silently.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Callable

from .dates import MONTHS, SEASONS, month_period, parse_period, season_period
from .places import Gazetteer, fold

_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a": 1,
    "an": 1,
}
_MONTH_RX = "|".join(sorted(MONTHS, key=len, reverse=True))
_SEASON_RX = "|".join(SEASONS)
WEEKDAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
#: times of day as hour ranges (both ends included; night wraps past midnight)
TIMES_OF_DAY = {
    "morning": (5, 11),
    "afternoon": (12, 16),
    "evening": (17, 20),
    "night": (21, 4),
    "noon": (12, 12),
    "midday": (12, 12),
    "midnight": (0, 0),
}
#: camera makes (an ambiguous everyday word only counts when capitalised)
MAKES = (
    "canon",
    "nikon",
    "sony",
    "fujifilm",
    "fuji",
    "olympus",
    "kodak",
    "panasonic",
    "lumix",
    "pentax",
    "samsung",
    "apple",
    "iphone",
    "casio",
    "ricoh",
    "sanyo",
    "konica",
    "minolta",
    "leica",
    "google",
    "pixel",
    "huawei",
    "xiaomi",
    "nokia",
    "hmd",
    "jolla",
    "polaroid",
    "gopro",
    "dji",
    "hasselblad",
    "sigma",
    "oneplus",
    "motorola",
    "lg",
    "epson",
    "kyocera",
    "sharp",
    "toshiba",
    "hp",
    "benq",
    "vivitar",
    "reconyx",
    "wwl",
    "jvc",
)
_AMBIGUOUS_MAKES = {"apple", "pixel", "google", "sigma", "sharp", "hp", "lg"}
_MAKE_ALIAS = {"fuji": "fujifilm", "lumix": "panasonic"}
_CAMERA_GENERIC = {
    "company",
    "digital",
    "camera",
    "zoom",
    "co",
    "ltd",
    "electric",
    "corporation",
    "optical",
    "inc",
    "the",
    "and",
    "of",
    "computer",
    "eastman",
    "techwin",
    "imaging",
    "mp3",
    "v05",
    "00",
}
_MODEL_WORDS = {
    "coolpix",
    "powershot",
    "ixus",
    "eos",
    "finepix",
    "cybershot",
    "cyber",
    "dimage",
    "caplio",
    "exilim",
    "iphone",
    "galaxy",
    "pixel",
    "alpha",
    "lumix",
    "digimax",
    "hyperfire",
}
#: a place written in lower case is read only when it is a country, a region or a city this large
LOWERCASE_PLACE_POPULATION = 100_000
_TAG_STOP = {
    "place",
    "places",
    "events",
    "event",
    "tag",
    "tags",
    "photo",
    "photos",
    "image",
    "images",
    "picture",
    "xmp",
    "test",
    "file",
    "jpg",
    "jpeg",
    "photoshop",
}

#: place prepositions of other languages ("fotos de Italia", "Bilder aus Deutschland", "photos prises en Italie")
FOREIGN_PREP = r"de|del|della|da|dal|dalla|di|aus|von|en|desde|dans|nach|uit|em|do|na|nella|alla"
NEG = r"(?P<neg>\b(?:not|except(?:\s+for)?|excluding|exclude|without|but\s+not|other\s+than|outside(?:\s+of)?|apart\s+from|never|no)\s+(?:(?:taken|shot|photographed)\s+)?)?"
PREP = r"(?:\b(?:taken|shot|photographed|captured)\s+)?(?:\b(?:in|on|during|from|of|at)\s+(?:the\s+)?)?"
#: a clause after an episode word ("the evening I photographed a hat") makes it an episode, not a time
_CLAUSE_AFTER = re.compile(
    r"^\s+(?:when|where|while|that|which|on\s+which|in\s+which|at\s+which|i|we|you|my|our)\b", re.I
)

# a date value: a day, a month, a season of a year, or a year
_DAY1 = rf"(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RX})\.?,?\s+(\d{{4}})"
_DAY2 = rf"({_MONTH_RX})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})"
_DV = (
    rf"(?:\d{{4}}-\d{{1,2}}-\d{{1,2}}|\d{{4}}-\d{{1,2}}(?!\d)|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTH_RX})\.?,?\s+\d{{4}}"
    rf"|(?:{_MONTH_RX})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}|(?:{_MONTH_RX})\.?\s+(?:of\s+)?\d{{4}}"
    rf"|(?:the\s+)?(?:{_SEASON_RX})\s+(?:of\s+)?\d{{4}}|(?:18|19|20)\d{{2}})"
)


def date_value(text: str) -> tuple[datetime, datetime] | None:
    """The period of one date value (see ``_DV``): ``2008``, ``2008-10``, ``2008-10-22``,
    ``October 2008``, ``22 October 2008``, ``October 22, 2008``, ``summer 2008``."""
    t = " ".join(text.strip().split())
    if re.fullmatch(r"\d{4}(?:-\d{1,2}){0,2}", t):
        return parse_period(t)
    m = re.fullmatch(_DAY1, t, re.I)
    if m:
        return parse_period(f"{m.group(3)}-{MONTHS[m.group(2).lower()]:02d}-{int(m.group(1)):02d}")
    m = re.fullmatch(_DAY2, t, re.I)
    if m:
        return parse_period(f"{m.group(3)}-{MONTHS[m.group(1).lower()]:02d}-{int(m.group(2)):02d}")
    m = re.fullmatch(rf"({_MONTH_RX})\.?\s+(?:of\s+)?(\d{{4}})", t, re.I)
    if m:
        return month_period(int(m.group(2)), MONTHS[m.group(1).lower()])
    m = re.fullmatch(rf"(?:the\s+)?({_SEASON_RX})\s+(?:of\s+)?(\d{{4}})", t, re.I)
    if m:
        return season_period(int(m.group(2)), m.group(1).lower())
    return None


def _fmt(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%d %H:%M" if dt.hour or dt.minute else "%Y-%m-%d")


def period_expression(a: datetime | str, b: datetime | str) -> str:
    """``[a, b)`` as a filter expression."""
    a, b = (_fmt(x) if isinstance(x, datetime) else x for x in (a, b))
    return f"date >= {a} and date < {b}" if " " in a or " " in b else f"(date >= {a} and date < {b})"


def _quote(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class Condition:
    """One metadata condition: ``kind`` (date, time, weekday, place, person, album, camera, keyword,
    text, rating, has), its ``filter_metadata`` expression, the words it was read from, and whether
    the question negates it."""

    kind: str
    expr: str
    text: str
    negated: bool = False
    period: tuple[str, str] | None = None  # for kind=date: the [start, end) it stands for

    def expression(self) -> str:
        return f"not ({self.expr})" if self.negated else self.expr

    def describe(self) -> str:
        return ("not " if self.negated else "") + f"{self.kind} '{self.text}'"

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Facts:
    """What the collection holds, so that names in a question can be recognised: tagged people,
    album (folder) names, cameras, keywords, titles, and the newest photo's time (the reference
    of relative dates)."""

    people: list[str] = field(default_factory=list)
    albums: list[str] = field(default_factory=list)
    cameras: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)
    newest: datetime | None = None

    @classmethod
    def of(cls, photos) -> "Facts":
        people, albums, cameras, tags, titles, whens, file_whens = {}, {}, {}, {}, {}, [], []
        for p in photos:
            for x in p.people:
                people[x] = 1
            for a in p.albums:
                albums[a] = 1
                albums[a.rsplit("/", 1)[-1]] = 1
            if p.camera:
                cameras[p.camera] = 1
            for t in p.tags:
                tags[t] = 1
            if p.title:
                titles[p.title] = 1
            if (
                p.when is not None
            ):  # a file's time is when it was written (a copy, an edit): counted only without others
                (file_whens if p.meta.get("time_source") == "file:mtime" else whens).append(p.when)
        whens = whens or file_whens
        return cls(list(people), list(albums), list(cameras), list(tags), list(titles), max(whens) if whens else None)


@dataclass
class Parsed:
    """:func:`parse_conditions`'s result: the conditions, the text left (the visual part and
    the question's structure), whether it asks for a count, and what it could not read."""

    conditions: list[Condition]
    rest: str
    count: bool = False
    unparsed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _alternation(names) -> str:
    return "|".join(re.escape(n) for n in sorted({n for n in names if n}, key=len, reverse=True))


class _Reader:
    def __init__(self, text: str, gazetteer: Gazetteer, facts: Facts, min_population: int):
        self.t = text
        self.gaz = gazetteer
        self.facts = facts
        self.min_population = min_population
        self.conds: list[Condition] = []
        self.unparsed: list[str] = []
        self.notes: list[str] = []

    def sub(
        self,
        pattern: str,
        make: Callable[[re.Match], list[Condition] | None],
        *,
        flags: int = re.I,
        negatable: bool = True,
        guard_clause: bool = False,
    ) -> None:
        """Replace every match of ``NEG? pattern`` whose ``make`` returns conditions by a space."""
        rx = re.compile((NEG if negatable else "") + pattern, flags)

        def repl(m: re.Match) -> str:
            if guard_clause and _CLAUSE_AFTER.match(m.string[m.end() :]):
                return m.group(0)
            got = make(m)
            if got is None:
                return m.group(0)
            neg = bool(negatable and m.group("neg"))
            for c in got:
                c.negated = c.negated or neg
                c.text = " ".join(m.group(0).split()) if not c.text else c.text
            self.conds.extend(got)
            return " "

        self.t = rx.sub(repl, self.t)

    # -- dates ----------------------------------------------------------------------------------
    def _date(self, kind: str, p: tuple[datetime, datetime] | None, text: str = "") -> list[Condition] | None:
        if p is None:
            return None
        return [Condition(kind, period_expression(*p), text, period=(_fmt(p[0]), _fmt(p[1])))]

    def _relative(self, m: re.Match) -> list[Condition] | None:
        ref, _ = self._reference(m)
        if ref is None:
            return None
        which, unit = m.group("which").lower(), m.group("unit").lower()
        if unit in SEASONS:
            if which == "this":
                p = season_period(ref.year, unit)
            else:  # the most recent season that ended before the newest photo
                p = next(
                    season_period(y, unit)
                    for y in range(ref.year, ref.year - 3, -1)
                    if season_period(y, unit)[1] <= ref
                )
        elif unit == "year":
            y = ref.year if which == "this" else ref.year - 1
            p = (datetime(y, 1, 1), datetime(y + 1, 1, 1))
        elif unit == "month":
            start = datetime(ref.year, ref.month, 1)
            if which != "this":
                start = (start - timedelta(days=1)).replace(day=1)
            p = month_period(start.year, start.month)
        else:  # week
            day = datetime(ref.year, ref.month, ref.day) - timedelta(days=ref.weekday())
            p = (day, day + timedelta(days=7)) if which == "this" else (day - timedelta(days=7), day)
        return self._date("date", p)

    def _reference(self, m: re.Match) -> tuple[datetime | None, int]:
        """The newest photo's time (relative dates count from it; said when there is none) and
        the match's number (``n`` group: digits or a word), 0 without one."""
        if self.facts.newest is None:
            self.unparsed.append(f"'{m.group(0).strip()}': no photo has a date to count from")
        n = m.groupdict().get("n") or "0"
        return self.facts.newest, int(n) if n.isdigit() else _WORDS[n.lower()]

    def _ago(self, m: re.Match) -> list[Condition] | None:
        ref, n = self._reference(m)
        if ref is None:
            return None
        unit = m.group("unit").lower().rstrip("s")
        if unit == "year":
            return self._date("date", (datetime(ref.year - n, 1, 1), datetime(ref.year - n + 1, 1, 1)))
        start = datetime(ref.year, ref.month, 1)
        for _ in range(n):
            start = (start - timedelta(days=1)).replace(day=1)
        return self._date("date", month_period(start.year, start.month))

    def _past(self, m: re.Match) -> list[Condition] | None:
        ref, n = self._reference(m)
        if ref is None:
            return None
        days = {"year": 365.25, "month": 30.44, "week": 7, "day": 1}[m.group("unit").lower().rstrip("s")] * n
        return self._date("date", (ref - timedelta(days=days), ref + timedelta(minutes=1)))

    def _range(self, m: re.Match) -> list[Condition] | None:
        a, b = date_value(m.group("a")), date_value(m.group("b"))
        if a is None or b is None:
            return None
        if b[1] <= a[0]:  # written backwards ("between 2005 and 2001"): the same span
            a, b = b, a
            self.notes.append(f"read '{' '.join(m.group(0).split())}' as the span from {_fmt(a[0])} to {_fmt(b[1])}")
        return self._date("date", (a[0], b[1]))

    def _month_range(self, m: re.Match) -> list[Condition] | None:
        """``between March and May 2019``: the months of one year (a range that wraps, ``from
        November to February 2009``, starts in the year before)."""
        y, a, b = int(m.group("y")), MONTHS[m.group("m1").lower()], MONTHS[m.group("m2").lower()]
        start = datetime(y if a <= b else y - 1, a, 1)
        return self._date("date", (start, month_period(y, b)[1]))

    def _bound(self, m: re.Match) -> list[Condition] | None:
        p = date_value(m.group("d"))
        if p is None:
            return None
        word = " ".join(m.group("op").lower().split())
        a, b = _fmt(p[0]), _fmt(p[1])
        expr = {
            "before": f"date < {a}",
            "prior to": f"date < {a}",
            "until": f"date < {b}",
            "till": f"date < {b}",
            "up to": f"date < {b}",
            "after": f"date >= {b}",
            "since": f"date >= {a}",
            "from": f"date >= {a}",
        }[word]
        return [Condition("date", expr, "")]

    def _hour_bound(self, m: re.Match) -> list[Condition] | None:
        h = int(m.group("h")) % 12 + (12 if m.group("ap").lower().startswith("p") else 0)
        op = m.group("op").lower()
        expr = {
            "before": f"hour < {h}",
            "after": f"hour >= {h}",
            "at": f"hour = {h}",
            "around": f"hour in {max(0, h - 1)}..{min(23, h + 1)}",
        }[op]
        return [Condition("time", expr, "")]

    def dates(self) -> None:
        unit = rf"(?P<unit>{_SEASON_RX}|year|month|week)"
        self.sub(rf"{PREP}\b(?P<which>last|this|past|previous)\s+{unit}\b", self._relative)
        self.sub(
            r"\b(?P<n>\d+|one|two|three|four|five|six|seven|eight|nine|ten|a|an)\s+(?P<unit>years?|months?)\s+ago\b",
            self._ago,
        )
        self.sub(
            r"\b(?:in|over|during|within|from)?\s*the\s+(?:last|past)\s+(?P<n>\d+|two|three|four|five|six|seven|eight|nine|ten)"
            r"\s+(?P<unit>years|months|weeks|days)\b",
            self._past,
        )
        self.sub(
            rf"{PREP}\b(?:between\s+|from\s+)?(?P<m1>{_MONTH_RX})\.?(?:\s*(?:-|–)\s*|\s+(?:and|to|until|till|through|thru)\s+)"
            rf"(?P<m2>{_MONTH_RX})\.?,?\s+(?:of\s+)?(?P<y>(?:18|19|20)\d{{2}})\b",
            self._month_range,
        )
        self.sub(rf"{PREP}\bbetween\s+(?P<a>{_DV})\s+and\s+(?P<b>{_DV})", self._range)
        self.sub(rf"{PREP}\bfrom\s+(?P<a>{_DV})\s+(?:to|until|till|through|thru)\s+(?P<b>{_DV})", self._range)
        self.sub(
            rf"{PREP}\b(?:the\s+)?(?P<c>(?:18|19|20)\d)0s\b",
            lambda m: self._date(
                "date", (datetime(int(m.group("c")) * 10, 1, 1), datetime(int(m.group("c")) * 10 + 10, 1, 1))
            ),
        )
        self.sub(rf"{PREP}\b(?P<a>(?:18|19|20)\d{{2}})\s*(?:-|–|to)\s*(?P<b>(?:18|19|20)\d{{2}})\b", self._range)
        self.sub(
            rf"(?:\b(?:taken|shot|photographed)\s+)?\b(?P<op>before|after|since|until|till|up\s+to|prior\s+to)\s+(?P<d>{_DV})\b",
            self._bound,
        )
        self.sub(rf"{PREP}\b(?P<d>{_DV})\b", lambda m: self._date("date", date_value(m.group("d"))))
        self.sub(
            r"(?:\b(?:taken|shot)\s+)?\b(?P<op>before|after|at|around)\s+(?P<h>\d{1,2})(?::00)?\s*(?P<ap>am|pm|a\.m\.|p\.m\.)",
            self._hour_bound,
        )
        # months and seasons of any year, weekdays, times of day
        month = lambda m: [Condition("date", f"month = {MONTHS[m.group('m').lower()]}", "")]
        self.sub(
            rf"(?:\b(?:taken|shot)\s+)?\b(?:in|during)\s+(?:the\s+month\s+of\s+)?(?P<m>{_MONTH_RX})\b(?!\.?\s*\d)",
            month,
        )
        self.sub(
            rf"{PREP}\b(?P<m>January|February|March|April|June|July|August|September|October|November|December)\b(?!\.?\s*\d)",
            month,
            flags=0,
        )
        self.sub(r"(?:\b(?:taken|shot)\s+)?\b(?:from|of|since|or|and)\s+(?P<m>May)\b(?!\.?\s*\d)", month, flags=0)
        self.sub(
            rf"{PREP}\b(?<!last )(?<!this )(?<!past )(?<!previous )(?P<s>{_SEASON_RX})s?\b(?:\s+(?:photos|pictures|shots))?",
            lambda m: [Condition("date", "month in {}..{}".format(*SEASONS[m.group("s").lower()]), "")],
            guard_clause=True,
        )
        self.sub(
            r"(?:\bon\s+(?:a\s+)?)?\b(?P<d>monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\b",
            lambda m: [Condition("weekday", f"weekday = {m.group('d').lower()}", "")],
        )
        self.sub(
            r"(?:\b(?:on|at|during|over)\s+(?:the\s+|a\s+)?)?\bweekends?\b",
            lambda m: [Condition("weekday", "weekday in [saturday, sunday]", "")],
            guard_clause=True,
        )
        self.sub(
            r"(?:\b(?:on|during)\s+(?:the\s+|a\s+)?)?\b(?:weekdays|workdays|working\s+days)\b",
            lambda m: [Condition("weekday", "weekday in monday..friday", "")],
            guard_clause=True,
        )

        def tod(m: re.Match) -> list[Condition]:
            a, b = TIMES_OF_DAY[m.group("t").lower()]
            expr = f"hour = {a}" if a == b else f"(hour >= {a} or hour <= {b})" if b < a else f"hour in {a}..{b}"
            return [Condition("time", expr, "")]

        self.sub(
            r"(?:\b(?:taken|shot)\s+)?(?:\b(?:in|at|during|from|by)\s+(?:the\s+)?)?\b(?P<t>morning|afternoon|evening|night|noon|midday|midnight)s?\b",
            tod,
            guard_clause=True,
        )

    # -- ratings ----------------------------------------------------------------------------------
    def ratings(self) -> None:
        def rated(m: re.Match) -> list[Condition]:
            n = int(m.group("n")) if m.group("n").isdigit() else _WORDS[m.group("n").lower()]
            pre = (m.group("cmp") or "").lower()
            post = (m.group("more") or "").lower()
            if pre in ("at least",) or post in ("more", "higher", "above", "better"):
                op = ">="
            elif pre in ("above", "over", "more than"):
                op = ">"
            elif pre in ("below", "under", "less than"):
                op = "<"
            elif pre in ("at most",) or post in ("less", "lower", "below", "fewer"):
                op = "<="
            else:
                op = "="
            return [Condition("rating", f"rating {op} {n}", "")]

        num = r"(?P<n>[0-5]|one|two|three|four|five)"
        cmp_ = r"(?:(?P<cmp>at\s+least|above|over|more\s+than|below|under|less\s+than|at\s+most)\s+)?"
        more = r"(?:\s+or\s+(?P<more>more|higher|above|better|less|lower|below|fewer))?"
        self.sub(rf"\b(?:rated|with\s+a\s+rating\s+of|rating\s+of|rating)\s+{cmp_}{num}(?:\s*stars?)?{more}\b", rated)
        self.sub(rf"(?:\bwith\s+)?{cmp_}\b{num}[- ]stars?(?:\s+rating)?{more}\b", rated)
        self.sub(r"\b(?:rated|with\s+a\s+rating|starred)\b", lambda m: [Condition("rating", "rating >= 1", "")])
        self.sub(r"\bunrated\b", lambda m: [Condition("rating", "rating >= 1", "", negated=True)])

    # -- names of the collection --------------------------------------------------------------
    def albums(self) -> None:
        names = _alternation(self.facts.albums)
        cue = r"(?:album|folder|directory)s?"
        if names:
            make = lambda m: [Condition("album", f"album = {_quote(self._canon(m.group('a'), self.facts.albums))}", "")]
            self.sub(
                rf"(?:\b(?:in|from)\s+)?(?:the\s+|my\s+)?\b{cue}\s+(?:called\s+|named\s+)?[\"'“]?(?P<a>{names})[\"'”]?(?![\w/])",
                make,
            )
            self.sub(rf"(?:\b(?:in|from)\s+)?(?:the\s+|my\s+)?[\"'“]?(?<![\w/])(?P<a>{names})[\"'”]?\s+{cue}\b", make)
        for m in re.finditer(
            rf"\b{cue}\s+(?:called\s+|named\s+)?[\"'“]?([\w/-]+)|[\"'“]?([\w/-]+)[\"'”]?\s+{cue}\b", self.t, re.I
        ):
            word = m.group(1) or m.group(2)
            if fold(word) not in ("the", "my", "an", "a", "this", "that", "which", "same", "photos", "whole"):
                self.unparsed.append(f"album '{word}': no album (folder) of that name")

    @staticmethod
    def _canon(found: str, names: list[str]) -> str:
        return next((n for n in names if fold(n) == fold(found)), found)

    def people(self) -> None:
        names = self.facts.people
        if names:
            alt = _alternation(names)
            self.sub(
                rf"(?:\b(?:of|with|showing|featuring|by)\s+)?\b(?P<p>{alt})\b",
                lambda m: [Condition("person", f"person ~ {_quote(self._canon(m.group('p'), names))}", "")],
            )
            parts = {w for n in names for w in n.split() if len(w) >= 3 and w[0].isupper()}
            if parts:
                self.sub(
                    rf"(?:\b(?:of|with|showing|featuring|by)\s+)?\b(?P<p>{_alternation(parts)})\b",
                    lambda m: [Condition("person", f"person ~ {_quote(m.group('p'))}", "")],
                    flags=0,
                )
        self.sub(
            r"(?:\b(?:of|with|showing)\s+)?\b(?:tagged\s+)?(?:people|persons|faces|someone|anyone|somebody)(?:\s+in\s+(?:them|it))?\b",
            lambda m: [Condition("person", "has(people)", "")],
        )

    def cameras(self) -> None:
        cams = self.facts.cameras
        tokens = {w for c in cams for w in fold(c).split()} - _CAMERA_GENERIC
        vocab = tokens | set(MAKES)
        words = list(re.finditer(r"[\w-]+", self.t))
        runs, cur = [], []
        for w in words:
            f = fold(w.group(0))
            ok = f in vocab and (f not in _AMBIGUOUS_MAKES or w.group(0)[0].isupper())
            if ok and cur and w.start() - cur[-1].end() > 1:
                runs.append(cur)
                cur = []
            if ok:
                cur.append(w)
            elif cur:
                runs.append(cur)
                cur = []
        if cur:
            runs.append(cur)
        spans = []
        for run in runs:
            toks = [fold(w.group(0)) for w in run]
            if not any(t in MAKES or t in _MODEL_WORDS or re.search(r"\d", t) for t in toks):
                continue
            if all(re.fullmatch(r"\d+", t) for t in toks):
                continue
            toks = [_MAKE_ALIAS.get(t, t) for t in toks]
            if len(toks) == 1 and toks[0] in MAKES:
                expr = f"camera ~ {_quote(toks[0])}"
            else:
                match = [
                    c
                    for c in cams
                    if set(toks) <= set(fold(c).split()) | {_MAKE_ALIAS.get(t, t) for t in fold(c).split()}
                ]
                if not match:
                    self.unparsed.append(f"camera '{' '.join(w.group(0) for w in run)}': no photo was taken with it")
                    expr = f"camera ~ {_quote(' '.join(toks))}"
                else:
                    expr = "camera in [" + ", ".join(_quote(c) for c in match) + "]"
            spans.append((run[0].start(), run[-1].end(), expr))
        for start, end, expr in reversed(spans):
            pre = self.t[:start]
            lead = re.search(
                r"(?:\b(?:taken|shot|photographed)\s+)?(?:\b(?:with|on|by|using)\s+)?(?:(?:a|an|the|my|our)\s+)?"
                r"(?:(?:camera|phone)\s+)?$",
                pre,
            )
            cut = lead.start() if lead else start
            neg = re.search(
                r"\b(?:not|except(?:\s+for)?|excluding|without|but\s+not|other\s+than|never|no)\s+$", pre[:cut]
            )
            if neg:
                cut = neg.start()
            self.conds.append(Condition("camera", expr, " ".join(self.t[cut:end].split()), negated=bool(neg)))
            self.t = self.t[:cut] + " " + self.t[end:]

    def keywords(self) -> None:
        tags = self.facts.tags
        alt = _alternation(tags)
        if alt:
            self.sub(
                rf"\b(?:tagged|tag|tags|keyword|keywords|labell?ed)\s+(?:with\s+|as\s+)?(?:the\s+)?(?:(?:tag|keyword)\s+)?[\"'“]?(?P<k>{alt})[\"'”]?(?!\w)",
                lambda m: [Condition("keyword", f"tag = {_quote(self._canon(m.group('k'), tags))}", "")],
            )
            self.sub(
                rf"\bwith\s+(?:the\s+)?(?:tag|keyword)\s+[\"'“]?(?P<k>{alt})[\"'”]?(?!\w)",
                lambda m: [Condition("keyword", f"tag = {_quote(self._canon(m.group('k'), tags))}", "")],
            )
        self.sub(
            r"\b(?:tagged|keyword|with\s+the\s+tag|with\s+the\s+keyword)\s+[\"“'](?P<k>[^\"”']+)[\"”']",
            lambda m: [Condition("keyword", f"tag ~ {_quote(m.group('k'))}", "")],
        )
        # "tagged volcano": an explicit keyword that no photo has is still a keyword condition (it keeps
        # no photo, and the answer says so) rather than a guess by the eyes
        stop = (
            r"(?:from|in|on|at|during|taken|shot|with|without|and|or|but|not|between|before|after|since|until|by|of|near"
            r"|that|which|where|when|people|persons|faces|someone|anyone|photos?|pictures?|images?)\b"
        )
        self.sub(
            rf"\b(?:tagged|labell?ed|(?:with\s+)?(?:the\s+)?(?:tag|keyword))\s+(?:with\s+|as\s+)?(?:the\s+)?(?!{stop})"
            rf"(?P<k>[^\W\d_][\w'-]*(?:\s+(?!{stop})[^\W\d_][\w'-]*){{0,2}})",
            lambda m: self._unknown_keyword(m.group("k")),
        )

    def _unknown_keyword(self, word: str) -> list[Condition]:
        self.notes.append(f"'{word}' is read as a keyword; no photo of this collection has it")
        return [Condition("keyword", f"tag = {_quote(word)}", "")]

    def titles(self) -> None:
        self.sub(
            r"(?:\b(?:with\s+)?(?:the\s+)?(?:titled|entitled|title|called|named|captioned|described\s+as|description)\s+)[\"“'](?P<x>[^\"”']+)[\"”']",
            lambda m: [Condition("text", f"text ~ {_quote(m.group('x'))}", "")],
        )
        titles = [t for t in self.facts.titles if len(t) >= 4]
        if titles:
            self.sub(
                rf"(?:\b(?:titled|entitled|called|named)\s+)?[\"“']?\b(?P<x>{_alternation(titles)})\b[\"”']?",
                lambda m: [Condition("text", f"text ~ {_quote(self._canon(m.group('x'), titles))}", "")],
            )
        self.sub(
            r"(?:\b(?:titled|entitled|called|named)\s+)?[\"“](?P<x>[^\"”]+)[\"”]",
            lambda m: [Condition("text", f"(text ~ {_quote(m.group('x'))} or tag ~ {_quote(m.group('x'))})", "")],
        )

    # -- places -----------------------------------------------------------------------------------
    def places(self) -> None:
        found = self.gaz.find_places(self.t, min_population=self.min_population)
        # written in lower case after a place preposition: countries, regions and cities of 100,000+ people
        for m in re.finditer(
            r"\b(?:in|at|from|near|around)\s+(?:the\s+)?([a-z][a-z'-]+(?:\s+[a-z][a-z'-]+){0,2})", self.t
        ):
            words = m.group(1).split()
            for j in range(len(words), 0, -1):
                cand = " ".join(words[:j])
                if cand not in found and self.gaz.find_places(
                    cand.title(), min_population=LOWERCASE_PLACE_POPULATION
                ) == [cand.title()]:
                    found.append(cand)
                    break
        positive: list[tuple[str, str]] = []
        for p in found:
            m = re.search(
                NEG
                + r"(?:\b(?:taken|shot|photographed)\s+)?(?:\b(?:in|at|from|to|near|around|of|"
                + FOREIGN_PREP
                + r")\s+(?:the\s+)?)?\b"
                + re.escape(p)
                + r"\b",
                self.t,
                re.I,
            )
            if not m:
                continue
            words = " ".join(m.group(0).split())
            if m.group("neg"):
                self.conds.append(Condition("place", f"place ~ {_quote(p)}", words, negated=True))
            else:
                positive.append((p, words))
            self.t = self.t[: m.start()] + " " + self.t[m.end() :]
        for m in list(re.finditer(NEG + r"\b(?P<d>[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)\b", self.t)):
            place = self.gaz.demonym(m.group("d"))
            if place:
                if m.group("neg"):
                    self.conds.append(Condition("place", f"place ~ {_quote(place)}", m.group(0).strip(), negated=True))
                else:
                    positive.append((place, m.group(0).strip()))
                self.t = self.t.replace(m.group(0), " ", 1)
        if positive:
            ors = " or ".join(f"place ~ {_quote(p)}" for p, _ in positive)
            self.conds.append(
                Condition("place", f"({ors})" if len(positive) > 1 else ors, ", ".join(w for _, w in positive))
            )
        for m in re.finditer(r"\b(?:in|at|from|near|around)\s+(?:the\s+)?([A-Z][\w'-]+(?:\s+[A-Z][\w'-]+)*)", self.t):
            if _HOLIDAY.fullmatch(m.group(1)):
                continue
            self.unparsed.append(
                f"place '{m.group(1)}': not in the gazetteer (cities of {self.min_population:,}+ people, "
                "regions, countries)"
            )

    def unmarked_keywords(self) -> None:
        tags = [t for t in self.facts.tags if len(t) >= 4 and fold(t) not in _TAG_STOP]
        if tags:

            def make(m: re.Match) -> list[Condition]:
                tag = self._canon(m.group("k"), tags)
                self.notes.append(f"read '{m.group('k')}' as the keyword '{tag}' of tagged photos")
                return [Condition("keyword", f"tag = {_quote(tag)}", "")]

            self.sub(rf"\b(?P<k>{_alternation(tags)})\b", make)

    def leftovers(self) -> None:
        for m in re.finditer(_HOLIDAY.pattern, self.t, re.I):
            self.unparsed.append(f"date '{m.group(0)}': not a date this planner reads")
        for m in re.finditer(r"\b(?:rated|rating|stars?)\b", self.t, re.I):
            self.unparsed.append(f"rating '{m.group(0)}': no rating read")


_HOLIDAY = re.compile(
    r"\b(?:christmas|easter|thanksgiving|halloween|new\s+year'?s?(?:\s+eve)?|birthday|yesterday|today|"
    r"tomorrow|recently|lately|ago|last\s+\w+|next\s+\w+|earlier|later)\b",
    re.I,
)


#: an elided article or preposition before a capitalised name ("photos d'Italie", "foto dall'Italia") is split off
_ELIDED = {"d": "de", "l": "la", "dall": "dalla", "dell": "della", "nell": "nella", "all": "alla"}
_ELISION = re.compile(r"\b(d|l|dall|dell|nell|all)['’](?=[A-ZÀ-Þ])", re.I)


def parse_conditions(
    text: str, gazetteer: Gazetteer, facts: Facts | None = None, *, min_population: int = 15000
) -> Parsed:
    """The metadata conditions of ``text`` (see the module docstring)."""
    text = _ELISION.sub(lambda m: _ELIDED[m.group(1).lower()] + " ", " ".join(str(text).split()))
    r = _Reader(text, gazetteer, facts or Facts(), min_population)
    count = False
    m = re.search(r"\b(?:how\s+many|number\s+of|count(?:\s+the)?|total\s+of)\b", r.t, re.I)
    if m:
        count = True
        r.t = r.t[: m.start()] + " " + r.t[m.end() :]
    r.titles()
    r.keywords()
    r.dates()
    r.ratings()
    r.albums()
    r.people()
    r.cameras()
    r.places()
    r.unmarked_keywords()
    r.leftovers()
    rest = " ".join(r.t.split())
    return Parsed(r.conds, rest, count, list(dict.fromkeys(r.unparsed)), r.notes)
