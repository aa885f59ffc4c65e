"""The offline planner: question decomposition, and the plan solving every built question when its
eyes are perfect (an oracle verifier reading the true labels: this tests the plan, not the encoder)."""

import asyncio
import csv

import pytest

from agentcir.components.memory.subsets import NamedSubsets
from agentcir.framework.datasets.history_builder import _noun
from agentcir.framework.methods.imageseeker.places import load_gazetteer
from agentcir.framework.methods.imageseeker.planner import OfflinePlanner, PlanConfig, decompose
from agentcir.framework.methods.imageseeker.store import PhotoCollection
from agentcir.framework.methods.imageseeker.tools import Toolbox

from .conftest import read_jsonl


@pytest.mark.parametrize(
    "query,target,clue,places,periods,multi",
    [
        ("the Pants photos from the day I photographed a Hat in Rome", "Pants", "Hat", ["Rome"], [], False),
        ("photos of Shoes from the trips where I also photographed a Dress", "Shoes", "Dress", [], [], True),
        ("all jacket pictures from every day on which I photographed a t-shirt", "jacket", "t-shirt", [], [], True),
        ("Hat pictures taken on the day I took a photo of a shirt in NYC", "Hat", "shirt", ["NYC"], [], False),
        (
            "the fireworks from our New Year's Eve party in NYC in December 2023",
            "fireworks from New Year's Eve",
            "",
            ["NYC"],
            [("2023-12-01", "2024-01-01")],
            False,
        ),
        (
            "pictures of the dog at the beach in summer 2022",
            "dog at beach",
            "",
            [],
            [("2022-06-01", "2022-09-01")],
            False,
        ),
        ("photos of my dress on June 14, 2023 in Paris", "dress", "", ["Paris"], [("2023-06-14", "2023-06-15")], False),
        ("the hat photos from 2021-05 in Tokyo", "hat", "", ["Tokyo"], [("2021-05-01", "2021-06-01")], False),
    ],
)
def test_decomposition(query, target, clue, places, periods, multi):
    d = decompose(query, load_gazetteer())
    assert (d.target, d.clue, d.places, [tuple(p) for p in d.periods], d.multi) == (
        target,
        clue,
        places,
        periods,
        multi,
    )
    assert d.breakdown[-1].startswith("verify that they show")


def test_filter_expression_of_a_decomposition():
    d = decompose("the dog in Rome or Florence in 2023", load_gazetteer())
    assert (
        d.filter_expression() == '(place ~ "Rome" or place ~ "Florence") and (date >= 2023-01-01 and date < 2024-01-01)'
    )


def test_the_plan_solves_every_built_question_with_perfect_eyes(
    history_bench, labelled_set, bench_gallery, toy_encoder
):
    gallery, _ = bench_gallery
    with open(labelled_set / "photos.csv") as f:
        label = {r["image"]: _noun(r["label"]) for r in csv.DictReader(f)}

    async def oracle(photos, phrase, views, contrast):
        return [label[p.id] == phrase.lower() for p in photos]

    async def embed(text):
        return toy_encoder.encode_texts([text])[0]

    queries = read_jsonl(history_bench / "queries.jsonl")
    assert {q["event_type"] for q in queries} == {"intra-event", "inter-event"}
    for q in queries:
        coll = PhotoCollection(gallery, q["user_id"])
        tb = Toolbox(coll, NamedSubsets(None), embed_text=embed)
        d = decompose(q["query"], coll.gazetteer)
        res = asyncio.run(OfflinePlanner(tb, oracle, PlanConfig(keep_top=0)).run(d))
        assert sorted(res.ids) == sorted(q["answer"]), (q["query"], res.reasoning)
        names = [o.name for o in tb.log]
        assert names[0] == (
            "filter_metadata" if d.places else "image_search"
        )  # metadata first when the question has it
        assert "view_photos" in names and names[-1] == "answer"
        assert [s.name for s in tb.subsets.lineage(res.subset)][-3:] == [
            "episode_photos",
            "target_candidates",
            "answer",
        ]
