"""Metadata conditions read from questions (dates, places, people, albums, cameras, keywords, titles,
ratings, negation, counting) and the offline plan over them: every matching photo when nothing visual
is asked, a calibrated visual check otherwise, each filter's count in the trace."""

import asyncio
from datetime import datetime
from types import SimpleNamespace

import numpy as np
import pytest

from agentcir.components.memory.subsets import NamedSubsets
from agentcir.framework.methods.imageseeker.conditions import Facts, parse_conditions
from agentcir.framework.methods.imageseeker.places import load_gazetteer, place_match
from agentcir.framework.methods.imageseeker.planner import OfflinePlanner, PlanConfig, decompose
from agentcir.framework.methods.imageseeker.store import PhotoCollection
from agentcir.framework.methods.imageseeker.tools import Toolbox

FACTS = Facts(
    people=["Marie Curie", "Pierre Curie"],
    albums=["trips/nature", "nature", "gps"],
    cameras=["NIKON D70", "NIKON D70s", "Canon EOS 40D", "Apple iPhone 7"],
    tags=["birds", "Landscape"],
    titles=["Mongol Els"],
    newest=datetime(2024, 3, 10, 12, 0),
)


def exprs(q: str) -> list[str]:
    return [c.expression() for c in parse_conditions(q, load_gazetteer(), FACTS).conditions]


@pytest.mark.parametrize(
    "query,expected",
    [
        ("photos from 2022", ["(date >= 2022-01-01 and date < 2023-01-01)"]),
        ("2022 photos", ["(date >= 2022-01-01 and date < 2023-01-01)"]),
        ("photos from 22 October 2008", ["(date >= 2008-10-22 and date < 2008-10-23)"]),
        ("photos taken on October 22nd, 2008", ["(date >= 2008-10-22 and date < 2008-10-23)"]),
        ("photos between 2000 and 2002", ["(date >= 2000-01-01 and date < 2003-01-01)"]),
        ("photos from March 2008 to May 2008", ["(date >= 2008-03-01 and date < 2008-06-01)"]),
        ("photos before 2000", ["date < 2000-01-01"]),
        ("photos after June 2020", ["date >= 2020-07-01"]),
        ("photos in winter", ["month in 12..2"]),
        ("photos taken in May", ["month = 5"]),
        ("photos on Saturdays", ["weekday = saturday"]),
        ("photos at the weekend", ["weekday in [saturday, sunday]"]),
        ("photos at night", ["(hour >= 21 or hour <= 4)"]),
        ("photos taken after 6 pm", ["hour >= 18"]),
        ("photos from last summer", ["(date >= 2023-06-01 and date < 2023-09-01)"]),  # newest photo: March 2024
        ("photos from last year", ["(date >= 2023-01-01 and date < 2024-01-01)"]),
        ("photos from two years ago", ["(date >= 2022-01-01 and date < 2023-01-01)"]),
        ("photos from Tuscany", ['place ~ "Tuscany"']),
        ("Italian photos", ['place ~ "Italy"']),
        ("photos from italy", ['place ~ "italy"']),  # lower case: countries, regions, cities of 100,000+
        ("photos from the beach", []),
        ("photos from Rome or Florence", ['(place ~ "Rome" or place ~ "Florence")']),
        ("photos not in Rome", ['not (place ~ "Rome")']),
        ("photos of Marie Curie", ['person ~ "Marie Curie"']),
        ("photos of Pierre", ['person ~ "Pierre"']),
        ("photos without people", ["not (has(people))"]),
        ("photos in the nature album", ['album = "nature"']),
        ("Nikon photos", ['camera ~ "nikon"']),
        ("photos taken with the Nikon D70", ['camera in ["NIKON D70"]']),
        ("photos not taken with a Canon", ['not (camera ~ "canon")']),
        ("iPhone photos", ['camera ~ "iphone"']),
        ("photos tagged birds", ['tag = "birds"']),
        ('the photo titled "Mongol Els"', ['text ~ "Mongol Els"']),
        ("photos rated 3 or more", ["rating >= 3"]),
        ("5-star photos", ["rating = 5"]),
    ],
)
def test_conditions(query, expected):
    assert exprs(query) == expected


def test_combination_negation_and_counting():
    p = parse_conditions("how many Nikon photos from Italy in 2008 not taken on a Sunday?", load_gazetteer(), FACTS)
    assert p.count
    assert sorted(c.expression() for c in p.conditions) == sorted(
        ['camera ~ "nikon"', 'place ~ "Italy"', "(date >= 2008-01-01 and date < 2009-01-01)", "not (weekday = sunday)"]
    )


def test_what_cannot_be_read_is_said_and_left_to_the_visual_search():
    d = decompose("photos of a lighthouse from Narnia at Christmas", load_gazetteer(), facts=FACTS)
    assert any("Narnia" in u for u in d.unparsed) and any("Christmas" in u for u in d.unparsed)
    assert "Narnia" in d.target and "lighthouse" in d.target and not d.conditions
    d = decompose("photos in the holiday album", load_gazetteer(), facts=FACTS)
    assert any("album 'holiday'" in u for u in d.unparsed)


def test_episode_words_stay_episodes():
    """ "the evening I photographed a hat" is an episode, not a time of day."""
    d = decompose("the shoes photos from the evening I photographed a hat in Rome", load_gazetteer(), facts=FACTS)
    assert (d.target, d.clue, d.places) == ("shoes", "hat", ["Rome"])
    assert [c.kind for c in d.conditions] == ["place"]


def test_regions_contain_their_cities():
    gaz = load_gazetteer()
    assert place_match("Arezzo, Italy", "Tuscany", gaz) and not place_match("Rome, Italy", "Tuscany", gaz)
    assert place_match(["Grand Junction, Colorado, United States"], "Colorado", gaz)
    assert gaz.demonym("German") == "Germany"


# -- the plan over a small collection -------------------------------------------------------------
def collection() -> PhotoCollection:
    metas = [
        {
            "taken_time": "2008-10-22 16:00:00",
            "address": "Arezzo, Italy",
            "city": "Arezzo",
            "country": "Italy",
            "capturedevice": "NIKON COOLPIX P6000",
        },
        {
            "taken_time": "2008-10-22 17:00:00",
            "address": "Arezzo, Italy",
            "city": "Arezzo",
            "country": "Italy",
            "capturedevice": "NIKON COOLPIX P6000",
        },
        {
            "taken_time": "2005-12-14 14:00:00",
            "address": "Florence, Italy",
            "city": "Florence",
            "country": "Italy",
            "capturedevice": "NIKON D70s",
        },
        {"taken_time": "2012-08-05 11:00:00", "capturedevice": "SONY DSLR-A550", "album": "nature"},
        {"album": "faces", "people": ["Marie Curie"]},
    ]
    emb = np.eye(5, 8, dtype=np.float32)
    g = SimpleNamespace(
        items=[SimpleNamespace(meta=m) for m in metas],
        ids=[f"p{i}" for i in range(5)],
        paths=[f"/x/p{i}.jpg" for i in range(5)],
        image_emb=emb,
        root="test",
    )
    return PhotoCollection(g)


def run(q: str, scores: dict[str, float] | None = None, verified: set[str] = frozenset(), **cfg):
    coll = collection()

    async def embed(text):
        return np.ones(8, np.float32) / np.sqrt(8)

    async def verify(photos, phrase, views, contrast):
        return [p.id in verified for p in photos]

    async def scorer(phrase):
        return scores

    tb = Toolbox(coll, NamedSubsets(None), embed_text=embed)
    planner = OfflinePlanner(tb, verify, PlanConfig(visual_z=1.5, **cfg), scorer=scorer if scores else None)
    return asyncio.run(planner.run(decompose(q, coll.gazetteer, facts=Facts.of(coll.photos)))), tb


def test_metadata_only_questions_answer_every_matching_photo():
    res, tb = run("photos from Tuscany")
    assert sorted(res.ids) == ["p0", "p1", "p2"] and res.visual is None
    assert res.filters == [
        {
            "condition": "place 'from Tuscany'",
            "kind": "place",
            "negated": False,
            "expression": 'place ~ "Tuscany"',
            "of": 5,
            "kept": 3,
        }
    ]
    assert "image_search" not in [o.name for o in tb.log]
    res, _ = run("how many Nikon photos from Italy not in Florence")
    assert sorted(res.ids) == ["p0", "p1"] and res.reasoning.startswith("2 photo(s)")
    assert [(f["kind"], f["of"], f["kept"]) for f in res.filters] == [
        ("place", 5, 3),
        ("place", 3, 2),
        ("camera", 2, 2),
    ]
    res, _ = run("photos of Marie Curie")
    assert res.ids == ["p4"]
    res, _ = run("photos from Spain")
    assert res.ids == [] and res.no_match == "no photo matches: place 'from Spain' kept none of the 5 photo(s)"
    res, _ = run(
        "Canon photos from Florence"
    )  # the condition that emptied the set is named, after those that kept some
    assert (
        res.ids == []
        and "camera 'Canon' kept none of the 1 photo(s) that matched the conditions before it" in res.no_match
    )


def test_visual_check_runs_over_the_filtered_photos_with_a_calibrated_threshold():
    # p1's similarity to the phrase is far above the collection's mean: it passes without the vocabulary check
    scores = {"p0": 0.10, "p1": 0.90, "p2": 0.12, "p3": 0.11, "p4": 0.09}
    res, tb = run("photos of a tower in Italy", scores=scores)
    assert res.ids == ["p1"] and res.visual["calibrated_above"] == 1 and res.visual["candidates"] == 3
    search = next(o for o in tb.log if o.name == "image_search")
    assert search.arguments["search_within"] == "filter_1_place"
    # calibrated (the default): the ranking cut at the threshold, whatever the vocabulary check says
    res, _ = run("photos of a tower in Italy", scores=scores, verified={"p2"})
    assert res.ids == ["p1"] and res.visual["pass"] == "calibrated"
    # checked: the vocabulary check also lets photos through; with neither, the best candidate is named as a fallback
    res, _ = run("photos of a tower in Italy", scores=scores, verified={"p2"}, visual_pass="checked")
    assert sorted(res.ids) == ["p1", "p2"] and res.visual["pass"] == "checked"
    res, _ = run("photos of a tower in Italy", scores={k: 0.1 for k in scores} | {"p4": 0.2})
    assert len(res.ids) == 1 and "no photo passed the visual check" in res.reasoning
    # min_answer=0: no photo, and the answer says which check kept none
    res, _ = run("photos of a tower in Italy", scores={k: 0.1 for k in scores} | {"p4": 0.2}, min_answer=0)
    assert res.ids == [] and res.no_match.startswith(
        "no photo matches: none of the 3 candidate(s) within those photos passed the visual check of 'tower'"
    )


def test_odd_inputs():
    gaz = load_gazetteer()
    p = parse_conditions("photos from last summer", gaz, Facts())  # no dated photo to count from
    assert not p.conditions and "no photo has a date to count from" in p.unparsed[0]
    p = parse_conditions("photos between 2005 and 2001", gaz, FACTS)
    assert [c.expression() for c in p.conditions] == ["(date >= 2001-01-01 and date < 2006-01-01)"] and p.notes
    p = parse_conditions("", gaz, FACTS)
    assert not p.conditions and p.rest == ""
    d = decompose("photos", gaz, facts=FACTS)
    assert d.target == "" and not d.conditions and d.breakdown == ["answer with every photo kept"]


@pytest.mark.parametrize(
    "query,expected",
    [
        (
            "photos from 2008 or 2009",
            "((date >= 2008-01-01 and date < 2009-01-01) or (date >= 2009-01-01 and date < 2010-01-01))",
        ),
        ("photos on Saturdays or Sundays", "(weekday = saturday or weekday = sunday)"),
        ("photos from May or June", "(month = 6 or month = 5)"),
        ("photos before 2000 or after 2020", "(date < 2000-01-01 or date >= 2021-01-01)"),
        ("photos after 2000 and before 2005", "date >= 2001-01-01 and date < 2005-01-01"),  # a span, not alternatives
        ("photos from 2008 in October", "(date >= 2008-01-01 and date < 2009-01-01) and month = 10"),
    ],
)
def test_alternatives_of_one_shape_are_either(query, expected):
    d = decompose(query, load_gazetteer(), facts=FACTS)
    assert d.filter_expression() == expected and d.target == ""
