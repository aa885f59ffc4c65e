"""The metadata filter language of ``filter_metadata``: a tokenizer and a recursive-descent parser.

Never ``eval``: an expression is tokenized, parsed into a small tree, checked (fields,
operators and values) and compiled into a predicate over photos. Errors name the position::

    filter expression error at position 8: expected a value after '>=', found the end
      date >=
              ^

Grammar (keywords are case-insensitive; ``&&``, ``||`` and ``!`` are accepted too)::

    expression := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | primary
    primary    := "(" expression ")" | call | comparison
    call       := NAME "(" [value ("," value)*] ")"
    comparison := FIELD op operand
    op         := "=" | "==" | "!=" | "<" | "<=" | ">" | ">=" | "~" | "!~" | "in" | "not in"
    operand    := value | value ".." value | "[" value ("," value)* "]"
    value      := "quoted string" | 'quoted string' | NUMBER | DATE | WORD

Fields:

================================= ===========================================================
``date`` (``time``, ``taken_time``) periods: ``date = 2023-06`` (in June 2023), ``date >= 2023-06-14``,
                                  ``date < 2024``, ``date in 2023-06..2023-08`` (June to August),
                                  ``date in [2023-06-01, 2023-07-04]`` (either day)
``year`` ``month`` ``day``        numbers; months and weekdays also by name
``hour`` ``weekday``              (``month in [jun, jul]``, ``weekday = saturday``)
``place`` (``address``, ``city``, place names with alias normalisation (``place ~ "NYC"``
``country``, ``region``)          matches New York City); ``=`` and ``~`` both match places
``album`` ``event`` ``photoset``  ``=`` the album's full path or its last folder, ``~`` contains
``person`` (``people``)           ``=`` any named person, ``~`` contains (folded)
``tag`` (``tags``)                the same over keywords
``camera`` (``capturedevice``)    ``=`` / ``~``
``text`` (``title``,              ``~`` contains
``description``)
``id``                            ``=`` / ``in [..]``
``lat`` ``lon`` ``rating``        numbers
================================= ===========================================================

Calls: ``match_address("Rome")`` (= ``place ~ "Rome"``), ``near(41.9, 12.5, 20)`` (within 20 km),
``has(people)`` (the field is present), ``same_day_as("photo_id")``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable

from ...errors import InputError
from .dates import MONTHS, parse_period, period_range
from .places import fold, place_match

if TYPE_CHECKING:  # pragma: no cover
    from .store import Photo


class ExpressionError(InputError):
    """A filter expression that does not parse or check; the message points at the position."""

    def __init__(self, text: str, pos: int, message: str):
        self.text, self.pos, self.reason = text, pos, message
        super().__init__(f"filter expression error at position {pos}: {message}\n  {text}\n  {' ' * pos}^")


# -- tokens --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    kind: str  # STRING NUMBER DATE WORD OP RANGE LPAREN RPAREN LBRACK RBRACK COMMA AND OR NOT IN END
    text: str
    pos: int

    def show(self) -> str:
        return "the end" if self.kind == "END" else f"'{self.text}'"


_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<date>\d{4}-\d{1,2}(?:-\d{1,2}(?:[T\ ]\d{1,2}:\d{2})?)?)
  | (?P<number>-?\d+(?:\.\d+)?(?!\.\d))
  | (?P<range>\.\.)
  | (?P<op>==|!=|<=|>=|!~|&&|\|\||[=<>~!])
  | (?P<lparen>\() | (?P<rparen>\)) | (?P<lbrack>\[) | (?P<rbrack>\]) | (?P<comma>,)
  | (?P<word>[A-Za-z_][\w-]*)
""",
    re.VERBOSE,
)
_KEYWORDS = {"and": "AND", "or": "OR", "not": "NOT", "in": "IN"}


def tokenize(text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            ch = text[pos]
            if ch in "\"'":
                raise ExpressionError(text, pos, f"unterminated string: no closing {ch} after this quote")
            raise ExpressionError(text, pos, f"unexpected character {ch!r}")
        kind = m.lastgroup
        tok = m.group(0)
        if kind == "string":
            out.append(Token("STRING", re.sub(r"\\(.)", r"\1", tok[1:-1]), pos))
        elif kind == "word":
            out.append(Token(_KEYWORDS.get(tok.lower(), "WORD"), tok, pos))
        elif kind == "op":
            mapped = {"&&": "AND", "||": "OR", "!": "NOT"}.get(tok)
            out.append(Token(mapped or "OP", tok, pos))
        elif kind != "ws":
            out.append(Token(kind.upper(), tok, pos))
        pos = m.end()
    out.append(Token("END", "", len(text)))
    return out


# -- the tree ------------------------------------------------------------------------------------
@dataclass
class Value:
    kind: str  # STRING NUMBER DATE WORD
    text: str
    pos: int


@dataclass
class Cmp:
    field: str
    op: str
    operand: Any  # Value | ("range", Value, Value) | ("list", [Value])
    pos: int


@dataclass
class Call:
    name: str
    args: list[Value]
    pos: int


@dataclass
class BoolOp:
    op: str  # and | or
    parts: list[Any]


@dataclass
class Not:
    part: Any


FIELDS = {
    "date": "date",
    "time": "date",
    "taken_time": "date",
    "datetime": "date",
    "year": "year",
    "month": "month",
    "day": "day",
    "hour": "hour",
    "weekday": "weekday",
    "place": "place",
    "address": "place",
    "city": "place",
    "country": "place",
    "region": "place",
    "location": "place",
    "album": "album",
    "event": "event",
    "photoset": "event",
    "person": "person",
    "people": "person",
    "tag": "tag",
    "tags": "tag",
    "camera": "camera",
    "capturedevice": "camera",
    "device": "camera",
    "text": "text",
    "title": "text",
    "description": "text",
    "id": "id",
    "photo_id": "id",
    "lat": "lat",
    "latitude": "lat",
    "lon": "lon",
    "longitude": "lon",
    "rating": "rating",
}
CALLS = {"match_address": 1, "near": 3, "has": 1, "same_day_as": 1}
WEEKDAYS = {d: i for i, d in enumerate(["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"])}
WEEKDAYS.update({d[:3]: i for d, i in list(WEEKDAYS.items())})


class Parser:
    """Recursive descent over :func:`tokenize`'s tokens."""

    def __init__(self, text: str):
        self.text = text
        self.toks = tokenize(text)
        self.i = 0

    def peek(self) -> Token:
        return self.toks[self.i]

    def take(self) -> Token:
        t = self.toks[self.i]
        self.i += 1
        return t

    def fail(self, tok: Token, msg: str) -> ExpressionError:
        return ExpressionError(self.text, tok.pos, msg)

    def expect(self, kind: str, what: str) -> Token:
        t = self.peek()
        if t.kind != kind:
            raise self.fail(t, f"expected {what}, found {t.show()}")
        return self.take()

    def parse(self) -> Any:
        if self.peek().kind == "END":
            raise self.fail(self.peek(), "the expression is empty")
        node = self.parse_or()
        if self.peek().kind != "END":
            t = self.peek()
            raise self.fail(t, f"expected 'and', 'or' or the end, found {t.show()}")
        return node

    def parse_or(self) -> Any:
        parts = [self.parse_and()]
        while self.peek().kind == "OR":
            self.take()
            parts.append(self.parse_and())
        return parts[0] if len(parts) == 1 else BoolOp("or", parts)

    def parse_and(self) -> Any:
        parts = [self.parse_not()]
        while self.peek().kind == "AND":
            self.take()
            parts.append(self.parse_not())
        return parts[0] if len(parts) == 1 else BoolOp("and", parts)

    def parse_not(self) -> Any:
        if self.peek().kind == "NOT":
            self.take()
            return Not(self.parse_not())
        return self.parse_primary()

    def parse_primary(self) -> Any:
        t = self.peek()
        if t.kind == "LPAREN":
            self.take()
            node = self.parse_or()
            self.expect("RPAREN", "')'")
            return node
        if t.kind != "WORD":
            raise self.fail(t, f"expected a field name, a call or '(', found {t.show()}")
        name = self.take()
        if self.peek().kind == "LPAREN":
            return self.parse_call(name)
        key = name.text.lower()
        if key not in FIELDS:
            raise self.fail(name, f"unknown field '{name.text}'; fields: {', '.join(sorted(set(FIELDS)))}")
        op = self.peek()
        if op.kind == "IN":
            self.take()
            return Cmp(FIELDS[key], "in", self.parse_operand(op, allow_set=True), name.pos)
        if op.kind == "NOT" and self.toks[self.i + 1].kind == "IN":
            self.take(), self.take()
            return Not(Cmp(FIELDS[key], "in", self.parse_operand(op, allow_set=True), name.pos))
        if op.kind != "OP" or op.text in ("!",):
            raise self.fail(
                op, f"expected an operator (=, !=, <, <=, >, >=, ~, !~, in) after '{name.text}', found {op.show()}"
            )
        self.take()
        operand = self.parse_operand(op, allow_set=False)
        return Cmp(FIELDS[key], "=" if op.text == "==" else op.text, operand, name.pos)

    def parse_value(self, after: Token) -> Value:
        t = self.peek()
        if t.kind not in ("STRING", "NUMBER", "DATE", "WORD"):
            raise self.fail(t, f"expected a value after {after.show()}, found {t.show()}")
        self.take()
        return Value(t.kind, t.text, t.pos)

    def parse_operand(self, op: Token, allow_set: bool) -> Any:
        if allow_set and self.peek().kind == "LBRACK":
            open_ = self.take()
            items = [self.parse_value(open_)]
            while self.peek().kind == "COMMA":
                items.append(self.parse_value(self.take()))
            self.expect("RBRACK", "',' or ']'")
            return ("list", items)
        first = self.parse_value(op)
        if self.peek().kind == "RANGE":
            dots = self.take()
            return ("range", first, self.parse_value(dots))
        if allow_set:
            return ("list", [first])
        return first

    def parse_call(self, name: Token) -> Call:
        key = name.text.lower()
        if key not in CALLS:
            raise self.fail(name, f"unknown function '{name.text}'; functions: {', '.join(sorted(CALLS))}")
        open_ = self.take()
        args: list[Value] = []
        if self.peek().kind != "RPAREN":
            args.append(self.parse_value(open_))
            while self.peek().kind == "COMMA":
                args.append(self.parse_value(self.take()))
        self.expect("RPAREN", "',' or ')'")
        if len(args) != CALLS[key]:
            raise self.fail(name, f"{key}() takes {CALLS[key]} argument(s), got {len(args)}")
        return Call(key, args, name.pos)


def parse(text: str) -> Any:
    """The tree of a filter expression (raises :class:`ExpressionError`)."""
    if not isinstance(text, str):
        raise InputError(f"a filter expression must be a string, got {type(text).__name__}")
    return Parser(text).parse()


# -- compiling -----------------------------------------------------------------------------------
Pred = Callable[["Photo"], bool]


class Compiler:
    def __init__(self, text: str, *, gazetteer=None, lookup: Callable[[str], "Photo | None"] | None = None):
        self.text = text
        self.gazetteer = gazetteer
        self.lookup = lookup

    def fail(self, pos: int, msg: str) -> ExpressionError:
        return ExpressionError(self.text, pos, msg)

    def compile(self, node: Any) -> Pred:
        if isinstance(node, BoolOp):
            parts = [self.compile(p) for p in node.parts]
            return (
                (lambda ph: all(p(ph) for p in parts)) if node.op == "and" else (lambda ph: any(p(ph) for p in parts))
            )
        if isinstance(node, Not):
            inner = self.compile(node.part)
            return lambda ph: not inner(ph)
        if isinstance(node, Call):
            return self.call(node)
        return self.cmp(node)

    # values
    def period(self, v: Value) -> tuple[datetime, datetime]:
        p = parse_period(v.text)
        if p is None:
            raise self.fail(v.pos, f"'{v.text}' is not a date (use YYYY, YYYY-MM, YYYY-MM-DD or YYYY-MM-DD HH:MM)")
        return p

    def number(self, v: Value, field: str) -> float:
        low = v.text.lower()
        if field == "month" and low in MONTHS:
            return float(MONTHS[low])
        if field == "weekday" and low in WEEKDAYS:
            return float(WEEKDAYS[low])
        try:
            return float(v.text)
        except ValueError:
            extra = " (or a month name)" if field == "month" else " (or a weekday name)" if field == "weekday" else ""
            raise self.fail(v.pos, f"'{v.text}' is not a number for field '{field}'{extra}") from None

    def cmp(self, c: Cmp) -> Pred:
        f, op, operand = c.field, c.op, c.operand
        if f == "date":
            return self.date_cmp(c)
        if f in ("year", "month", "day", "hour", "weekday", "lat", "lon", "rating"):
            return self.num_cmp(c)
        if op in ("<", "<=", ">", ">="):
            raise self.fail(c.pos, f"field '{f}' is text: use =, !=, ~, !~ or in, not '{op}'")
        if isinstance(operand, tuple) and operand[0] == "range":
            raise self.fail(c.pos, f"a range (a..b) needs a date or number field, not '{f}'")
        values = [v.text for v in (operand[1] if isinstance(operand, tuple) else [operand])]
        test = self.text_test(f, "~" if op in ("~", "!~") else "=")
        if op in ("=", "~", "in"):
            return lambda ph: any(test(ph, v) for v in values)
        return lambda ph: not any(test(ph, v) for v in values)

    def text_test(self, f: str, mode: str) -> Callable[["Photo", str], bool]:
        gaz = self.gazetteer
        if f == "place":
            return lambda ph, v: bool(ph.address_parts) and place_match(ph.address_parts, v, gaz)
        if f == "album":
            if mode == "~":
                return lambda ph, v: any(fold(v) in fold(a) for a in ph.albums)
            return lambda ph, v: any(fold(v) in (fold(a), fold(a.rsplit("/", 1)[-1])) for a in ph.albums)
        if f == "event":
            return (
                (lambda ph, v: fold(v) in fold(ph.event or ""))
                if mode == "~"
                else (lambda ph, v: (ph.event or "") == v)
            )
        if f == "id":
            return lambda ph, v: ph.id == v
        seq = {
            "person": lambda ph: ph.people,
            "tag": lambda ph: ph.tags,
            "camera": lambda ph: [ph.camera] if ph.camera else [],
            "text": lambda ph: [ph.title or "", ph.description or ""],
        }[f]
        if mode == "~" or f == "text":
            return lambda ph, v: any(fold(v) in fold(x) for x in seq(ph))
        return lambda ph, v: any(fold(v) == fold(x) for x in seq(ph))

    def date_cmp(self, c: Cmp) -> Pred:
        op, operand = c.op, c.operand
        if op in ("~", "!~"):
            raise self.fail(c.pos, "field 'date' takes =, !=, <, <=, >, >= or in, not '~'")
        if isinstance(operand, tuple) and operand[0] == "range":
            a, b = operand[1], operand[2]
            self.period(a), self.period(b)
            span = period_range(a.text, b.text)
            if span is None:
                raise self.fail(b.pos, f"the range {a.text}..{b.text} is empty (the end is before the start)")
            spans = [span]
        elif isinstance(operand, tuple):
            spans = [self.period(v) for v in operand[1]]
        else:
            spans = [self.period(operand)]
        if op in ("=", "in"):
            return lambda ph: ph.when is not None and any(s <= ph.when < e for s, e in spans)
        if op == "!=":
            return lambda ph: ph.when is not None and not any(s <= ph.when < e for s, e in spans)
        s, e = spans[0]
        return {
            "<": lambda ph: ph.when is not None and ph.when < s,
            "<=": lambda ph: ph.when is not None and ph.when < e,
            ">": lambda ph: ph.when is not None and ph.when >= e,
            ">=": lambda ph: ph.when is not None and ph.when >= s,
        }[op]

    def num_cmp(self, c: Cmp) -> Pred:
        f, op, operand = c.field, c.op, c.operand
        if op in ("~", "!~"):
            raise self.fail(c.pos, f"field '{f}' is a number: use =, !=, <, <=, >, >= or in, not '~'")
        get = {
            "year": lambda ph: ph.when and ph.when.year,
            "month": lambda ph: ph.when and ph.when.month,
            "day": lambda ph: ph.when and ph.when.day,
            "hour": lambda ph: ph.when and ph.when.hour,
            "weekday": lambda ph: ph.when and ph.when.weekday(),
            "lat": lambda ph: ph.lat,
            "lon": lambda ph: ph.lon,
            "rating": lambda ph: ph.rating,
        }[f]

        def val(ph):
            v = get(ph)
            return None if v is None or v is False else float(v)

        if isinstance(operand, tuple) and operand[0] == "range":
            lo, hi = self.number(operand[1], f), self.number(operand[2], f)
            if f in ("month", "weekday") and hi < lo:  # wraps around: nov..feb
                return lambda ph: (v := val(ph)) is not None and (v >= lo or v <= hi)
            return lambda ph: (v := val(ph)) is not None and lo <= v <= hi
        if isinstance(operand, tuple):
            nums = {self.number(v, f) for v in operand[1]}
            return lambda ph: val(ph) in nums
        x = self.number(operand, f)
        ops = {
            "=": lambda v: v == x,
            "!=": lambda v: v != x,
            "<": lambda v: v < x,
            "<=": lambda v: v <= x,
            ">": lambda v: v > x,
            ">=": lambda v: v >= x,
        }
        test = ops[op]
        return lambda ph: (v := val(ph)) is not None and test(v)

    def call(self, c: Call) -> Pred:
        if c.name == "match_address":
            gaz = self.gazetteer
            want = c.args[0].text
            return lambda ph: bool(ph.address_parts) and place_match(ph.address_parts, want, gaz)
        if c.name == "has":
            key = c.args[0].text.lower()
            if key not in FIELDS:
                raise self.fail(c.args[0].pos, f"unknown field '{c.args[0].text}' in has()")
            f = FIELDS[key]
            present = {
                "date": lambda ph: ph.when is not None,
                "place": lambda ph: bool(ph.address_parts),
                "album": lambda ph: bool(ph.albums),
                "person": lambda ph: bool(ph.people),
                "tag": lambda ph: bool(ph.tags),
                "camera": lambda ph: bool(ph.camera),
                "lat": lambda ph: ph.lat is not None,
                "lon": lambda ph: ph.lon is not None,
                "event": lambda ph: bool(ph.event),
                "text": lambda ph: bool(ph.title or ph.description),
                "rating": lambda ph: ph.rating is not None,
            }
            return present.get(f, lambda ph: ph.when is not None)
        if c.name == "near":
            lat, lon, km = (self.number(v, "near") for v in c.args)
            return lambda ph: ph.lat is not None and ph.lon is not None and haversine_km(lat, lon, ph.lat, ph.lon) <= km
        # same_day_as
        ref = self.lookup(c.args[0].text) if self.lookup else None
        if ref is None:
            raise self.fail(c.args[0].pos, f"same_day_as(): no photo '{c.args[0].text}' in this collection")
        if ref.when is None:
            raise self.fail(c.args[0].pos, f"same_day_as(): photo '{c.args[0].text}' has no date")
        day = ref.when.date()
        return lambda ph: ph.when is not None and ph.when.date() == day


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * 6371.0088 * math.asin(min(1.0, math.sqrt(a)))


def compile_expression(text: str, *, gazetteer=None, lookup: Callable[[str], "Photo | None"] | None = None) -> Pred:
    """Parse, check and compile ``text`` into a predicate over :class:`~.store.Photo`."""
    return Compiler(text, gazetteer=gazetteer, lookup=lookup).compile(parse(text))
