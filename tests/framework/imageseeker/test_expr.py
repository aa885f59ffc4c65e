"""The filter_metadata language: a real parser (never eval), typed checks, errors at a position."""

import pytest

from agentcir.framework.methods.imageseeker.expr import ExpressionError, compile_expression, parse, tokenize
from agentcir.framework.methods.imageseeker.store import photo_from_meta

NYC = photo_from_meta(
    "a",
    0,
    "a.jpg",
    {
        "taken_time": "2023-06-14 10:00:00",
        "address": "New York City, New York, United States",
        "album": "trips/nyc",
        "people": ["Marie Curie"],
        "tags": ["skyline"],
        "latitude": 40.71,
        "longitude": -74.0,
        "capturedevice": "Apple iPhone 7",
        "rating": 4,
    },
)
ROME = photo_from_meta(
    "b", 1, "b.jpg", {"taken_time": "2022-12-01 21:00:00", "address": "Rome, Italy", "title": "Trevi at night"}
)
UNDATED = photo_from_meta("c", 2, "c.jpg", {})


@pytest.mark.parametrize(
    "expr,expected",
    [
        ("date in 2023-06..2023-08", [True, False, False]),
        ("date = 2023", [True, False, False]),
        ("date >= 2023-06-14 and date < 2023-06-15", [True, False, False]),
        ("date <= 2023-06-14", [True, True, False]),  # <= a day: until the end of that day
        ("date > 2022-12", [True, False, False]),  # > a month: after its end
        ("date in [2022-12-01, 2023-01-01]", [False, True, False]),
        ('place ~ "NYC"', [True, False, False]),
        ("place = Roma or month = june", [True, True, False]),
        ('match_address("New York")', [True, False, False]),
        ('album = nyc and not person ~ "pierre"', [True, False, False]),
        ('album ~ "trips"', [True, False, False]),
        ("month in [jun, jul]", [True, False, False]),
        ("month in nov..feb", [False, True, False]),  # wraps around the year end
        ("weekday = wednesday and hour < 12", [True, False, False]),
        ("near(40.7, -74.0, 5) || has(people)", [True, False, False]),
        ("!(year = 2023) && has(date)", [False, True, False]),
        ("id in [a, c]", [True, False, True]),
        ('text ~ "trevi" or tag = skyline', [True, True, False]),
        ("camera ~ iphone and rating >= 4", [True, False, False]),
        ("lat > 40 and lon not in [12.5]", [True, False, False]),
    ],
)
def test_expressions(expr, expected):
    f = compile_expression(expr)
    assert [f(p) for p in (NYC, ROME, UNDATED)] == expected


def test_same_day_as_looks_the_photo_up():
    f = compile_expression('same_day_as("a")', lookup={"a": NYC}.get)
    assert f(NYC) and not f(ROME)
    with pytest.raises(ExpressionError, match="no photo 'zz'"):
        compile_expression('same_day_as("zz")', lookup={"a": NYC}.get)


@pytest.mark.parametrize(
    "expr,pos,message",
    [
        ("date >=", 7, "expected a value after '>=', found the end"),
        ("date >= 2023-13", 8, "'2023-13' is not a date"),
        ("colour = red", 0, "unknown field 'colour'; fields: address"),
        ('place < "Rome"', 0, "field 'place' is text: use =, !=, ~, !~ or in, not '<'"),
        ("(date = 2023", 12, "expected ')', found the end"),
        ("date in 2024..2023", 14, "the range 2024..2023 is empty"),
        ('place ~ "Rome', 8, "unterminated string"),
        ("near(1, 2)", 0, "near() takes 3 argument(s), got 2"),
        ("date = 2023 place = x", 12, "expected 'and', 'or' or the end, found 'place'"),
        ("album ~ nature and", 18, "expected a field name, a call or '(', found the end"),
        ("month = smarch", 8, "'smarch' is not a number for field 'month' (or a month name)"),
        ("date ~ 2023", 0, "field 'date' takes =, !=, <, <=, >, >= or in, not '~'"),
        ("eval('1')", 0, "unknown function 'eval'"),
        ("__import__ = os", 0, "unknown field '__import__'"),
        ("", 0, "the expression is empty"),
        ("year @ 3", 5, "unexpected character '@'"),
    ],
)
def test_errors_point_at_the_position(expr, pos, message):
    with pytest.raises(ExpressionError) as e:
        compile_expression(expr)
    assert e.value.pos == pos and message in str(e.value)
    lines = str(e.value).splitlines()
    assert lines[0].startswith(f"filter expression error at position {pos}:")
    assert lines[1] == f"  {expr}" and lines[2] == " " * (2 + pos) + "^"  # the caret under the position


def test_tokens_and_tree():
    kinds = [t.kind for t in tokenize('date in 2023-06..2023-08 and place ~ "Rome"')]
    assert kinds == ["WORD", "IN", "DATE", "RANGE", "DATE", "AND", "WORD", "OP", "STRING", "END"]
    tree = parse("year = 1 or month = 2 and not day = 3")
    assert tree.op == "or" and tree.parts[1].op == "and"  # and binds tighter than or
