"""The tools: schemas from the argument dataclasses, argument checking, and every tool on a real
(toy-encoded) photo history, chained through named subsets."""

import asyncio

import numpy as np
import pytest

from agentcir.components.llms.scripted_server import ScriptedServer, Step
from agentcir.components.memory.subsets import NamedSubsets
from agentcir.framework.errors import InputError
from agentcir.framework.methods.imageseeker.graph import build_graph
from agentcir.framework.methods.imageseeker.store import PhotoCollection
from agentcir.framework.methods.imageseeker.tools import TOOLS, ToolArgumentError, Toolbox, parse_arguments, tool_schema
from agentcir.framework.methods.imageseeker.web import make_web_search


def test_schemas_are_generated_from_the_dataclasses():
    s = tool_schema("filter_metadata", TOOLS["filter_metadata"])["function"]
    assert s["name"] == "filter_metadata" and s["parameters"]["required"] == ["expression"]
    assert s["parameters"]["properties"]["filter_within"]["type"] == "string"
    assert s["parameters"]["additionalProperties"] is False
    img = tool_schema("image_search", TOOLS["image_search"])["function"]["parameters"]["properties"]
    assert img["photo_ids"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": img["photo_ids"]["description"],
    }
    assert img["top_k"]["type"] == "integer" and "search within" in img["search_within"]["description"]
    assert set(TOOLS) == {
        "image_search",
        "get_metadata",
        "filter_metadata",
        "view_photos",
        "web_search",
        "expand_graph",
        "answer",
    }


@pytest.mark.parametrize(
    "name,args,message",
    [
        ("teleport", {}, "unknown tool 'teleport'; tools: image_search"),
        ("image_search", {"query": "x", "colour": "red"}, "unknown argument(s) 'colour' for image_search"),
        ("image_search", {"top_k": "many"}, "image_search: argument 'top_k' must be an integer, got 'many'"),
        ("image_search", {"top_k": 2.5}, "must be an integer, got 2.5"),
        ("filter_metadata", {}, "filter_metadata: missing required argument 'expression'"),
        ("view_photos", '{"ids": [1, 2', "arguments of view_photos are not valid JSON"),
        ("get_metadata", {"ids": {"a": 1}}, "argument 'ids' must be a list"),
    ],
)
def test_bad_arguments(name, args, message):
    with pytest.raises(ToolArgumentError) as e:
        parse_arguments(name, args)
    assert message in str(e.value)


def test_arguments_are_coerced_when_unambiguous():
    a = parse_arguments("view_photos", '{"ids": "p1", "max": "5"}')
    assert a.ids == ["p1"] and a.max == 5


@pytest.fixture
def toolbox(bench_gallery, toy_encoder):
    gallery, _ = bench_gallery
    coll = PhotoCollection(gallery, "user0")

    async def embed(text):
        return toy_encoder.encode_texts([text])[0]

    async def view(photos):
        return [{"caption": f"a photo {p.id}"} for p in photos]

    graph = build_graph(coll, [[] for _ in coll.photos])
    return Toolbox(coll, NamedSubsets(None), embed_text=embed, view=view, graph=graph, default_top_k=10)


def run(tb, name, **args):
    return asyncio.run(tb.call(name, args))


def test_image_search_saves_subsets_and_chains(toolbox):
    tb = toolbox
    out = run(tb, "image_search", query="a photo of a hat", top_k=12)
    assert out.error is None and out.saved == "image_search_1" and out.result["count"] == 12
    first = tb.subsets.ids("image_search_1")
    scores = [p["score"] for p in out.result["photos"]]
    assert scores == sorted(scores, reverse=True) and len(first) == 12
    out2 = run(
        tb, "image_search", query="a photo of a dress", top_k=5, search_within="image_search_1", save_as="dressy"
    )
    assert set(tb.subsets.ids("dressy")) <= set(first) and out2.result["count"] == 5
    assert tb.subsets.get("dressy").parents == ["image_search_1"]
    ref = first[0]
    out3 = run(tb, "image_search", photo_ids=[ref], top_k=3)  # image-to-image: the query photo is excluded
    assert ref not in tb.subsets.ids(out3.saved) and out3.result["count"] == 3
    bad = run(tb, "image_search", query="x", search_within="nope")
    assert "unknown subset 'nope'; saved subsets: image_search_1 (12), dressy (5)" in bad.error
    assert "top_k must be between 1 and 1000" in run(tb, "image_search", query="x", top_k=0).error
    assert "give a query text, photo_ids, or both" in run(tb, "image_search").error


def test_filter_metadata_and_get_metadata(toolbox):
    tb = toolbox
    cities = {p.address.split(",")[0] for p in tb.c.photos}
    city = sorted(cities)[0]
    out = run(tb, "filter_metadata", expression=f'place ~ "{city}"', save_as="here")
    assert out.error is None and out.result["count"] == sum(p.address.startswith(city) for p in tb.c.photos) > 0
    assert all(ev["place"].startswith(city) for ev in out.result["events"])
    day = out.result["photos"][0]["date"][:10]
    out2 = run(tb, "filter_metadata", expression=f"date = {day}", filter_within="here")
    assert out2.result["count"] >= 1 and all(p["date"].startswith(day) for p in out2.result["photos"])
    err = run(tb, "filter_metadata", expression="date >= ")
    assert err.error.startswith("filter expression error at position 8: expected a value after '>='")
    meta = run(tb, "get_metadata", subset="here", fields=["date", "event", "place"])
    row = meta.result["photos"][0]
    assert set(row) == {"id", "date", "event", "address"} and row["address"].startswith(city)
    assert "unknown field(s) colour" in run(tb, "get_metadata", ids=[row["id"]], fields=["colour"]).error
    assert (
        "unknown photo id(s) for this user: u1p00" in run(tb, "get_metadata", ids=["u1p00"]).error
    )  # another user's photo


def test_view_photos_web_search_and_graph(toolbox):
    tb = toolbox
    ids = tb.c.ids
    out = run(tb, "view_photos", ids=ids, max=50)
    assert out.result["shown"] == 20 and "showing 20 of 30 photos" in out.result["note"]
    assert out.result["photos"][0]["caption"] == f"a photo {ids[0]}" and len(out.images) == 20
    web = run(tb, "web_search", query="Trevi fountain")
    assert web.result == {"results": [], "note": "web search is offline (no backend configured): no results"}
    ev = tb.c.get(ids[0]).event
    exp = run(tb, "expand_graph", ids=[ids[0]], relations=["photoset"], save_as="same_event")
    assert set(tb.subsets.ids("same_event")) == set(tb.c.events[ev]) - {ids[0]}
    assert "unknown relation(s) teleport" in run(tb, "expand_graph", ids=[ids[0]], relations=["teleport"]).error
    assert exp.result["count"] == len(tb.c.events[ev]) - 1


def test_searxng_backend_against_a_local_server():
    with ScriptedServer(prefix="") as srv:
        srv.script(
            "/search",
            Step(json={"results": [{"title": "Trevi Fountain", "url": "https://x", "content": "A fountain in Rome"}]}),
        )
        search = make_web_search("searxng", srv.base_url, max_results=3)
        rows, note = asyncio.run(search("trevi"))
        assert rows == [{"title": "Trevi Fountain", "url": "https://x", "snippet": "A fountain in Rome"}] and note == ""
        assert srv.requests[0].path.startswith("/search?q=trevi&format=json")
        srv.script("/search", Step(status=500, json={}))
        rows, note = asyncio.run(search("trevi"))
        assert rows == [] and note.startswith("web search failed")
    with pytest.raises(InputError, match="web_search must be one of none, searxng"):
        make_web_search("google")
    with pytest.raises(InputError, match="needs web_search_url"):
        make_web_search("searxng", "")


def test_scoring_topk_matches_a_full_sort():
    from agentcir.framework.methods.imageseeker.scoring import cosine_topk

    rng = np.random.default_rng(0)
    emb = rng.standard_normal((50, 8)).astype(np.float32)
    q = rng.standard_normal(8).astype(np.float32)
    mask = rng.random(50) > 0.3
    rows, scores = cosine_topk(q, emb, 7, mask)
    s = emb @ q
    want = [i for i in np.argsort(-s) if mask[i]][:7]
    assert rows.tolist() == want and np.allclose(scores, s[want])
    assert cosine_topk(q, emb, 100, mask)[0].size == mask.sum()
