"""``agentcir mcp`` over stdio, driven by the MCP SDK's own client (the server a subprocess it
launches): the tools and their schemas, each tool on a small gallery, the path and size rules,
view photo's image content, an index update that adds a photo. One server for the module: the
session runs once and each test checks one part of it."""

from __future__ import annotations

import asyncio
import base64
import io
import shutil

import pytest

from .conftest import DEMO, ROOT, server_command, text_of

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def session(gallery):
    from mcp import Client, StdioServerParameters

    photos, _, _, spare = gallery
    refs = photos.parent / "refs"  # a folder served with --root: its photos may be references
    refs.mkdir(exist_ok=True)
    shutil.copy(sorted(DEMO.iterdir())[20], refs / "elsewhere.jpg")
    exe, args, env = server_command(gallery, "--root", str(refs), "method=image_text_sum")
    first = sorted(DEMO.iterdir())[0]
    out = {}

    async def script():
        async with Client(StdioServerParameters(command=exe, args=args, env=env, cwd=str(ROOT))) as c:
            out["tools"] = {t.name: t for t in (await c.list_tools()).tools}
            calls = {
                "text": ("text_search", {"text": "a red dress", "k": 3}),
                "composed": ("composed_search", {"reference_id": first.stem, "text": "in blue", "k": 3}),
                "like_path": ("composed_search", {"reference_path": str(photos / first.name), "k": 2}),
                "outside": ("composed_search", {"reference_path": str(spare), "text": "in red"}),
                "root_ref": (
                    "composed_search",
                    {"reference_path": str(refs / "elsewhere.jpg"), "text": "in red", "k": 2},
                ),
                "escape": ("view_photo", {"path": str(photos / ".." / "gallery" / "items.jsonl")}),
                "two_refs": (
                    "composed_search",
                    {"reference_id": first.stem, "reference_path": str(photos / first.name)},
                ),
                "big_k": ("text_search", {"text": "a shoe", "k": 100_000}),
                "long_text": ("text_search", {"text": "red " * 1000}),
                "filter": ("filter_photos", {"expression": 'album = "Trip 2019"'}),
                "bad_filter": ("filter_photos", {"expression": "date in 2019 and and"}),
                "meta": ("photo_metadata", {"ids": ["Trip 2019/rome1"], "fields": ["date", "album"]}),
                "ask": ("ask_history", {"question": "photos from 2019"}),
                "view": ("view_photo", {"photo_id": first.stem, "size": 128}),
                "unknown": ("view_photo", {"photo_id": "no/such/photo"}),
            }
            for key, (tool, arguments) in calls.items():
                out[key] = await c.call_tool(tool, arguments)
            shutil.copy(spare, photos / "new_arrival.jpg")  # a photo lands in the folder
            out["update"] = await c.call_tool("update_index", {})
            out["view_new"] = await c.call_tool("view_photo", {"photo_id": "new_arrival"})
            out["filter_new"] = await c.call_tool("filter_photos", {"expression": 'id = "new_arrival"'})

    asyncio.run(script())
    out["first"] = first.stem
    return out


def test_every_tool_is_listed_with_typed_schemas(session):
    from agentcir.framework.methods.imageseeker.tools import FilterMetadataArgs
    from agentcir.mcp_server import TOOL_NAMES

    tools = session["tools"]
    assert set(tools) == set(TOOL_NAMES)
    text = tools["text_search"].input_schema
    assert text["required"] == ["text"]
    assert text["properties"]["text"]["maxLength"] == 2000 and text["properties"]["k"]["maximum"] == 100
    composed = tools["composed_search"].input_schema["properties"]
    assert {"text", "reference_id", "reference_path", "reference_image", "k"} <= set(composed)
    hit = tools["text_search"].output_schema["$defs"]["Hit"]["properties"]
    assert {"rank", "id", "score", "path", "row", "meta", "verified"} <= set(hit)
    # the metadata filter shares ImageSeeker's filter_metadata language and its documentation
    doc = next(f.metadata["doc"] for f in FilterMetadataArgs.__dataclass_fields__.values() if f.name == "expression")
    assert tools["filter_photos"].input_schema["properties"]["expression"]["description"] == doc
    assert tools["view_photo"].input_schema["properties"]["size"]["enum"] == [128, 256, 512]
    assert tools["text_search"].annotations.read_only_hint is True
    assert tools["update_index"].annotations.read_only_hint is False


def test_text_search_ranks_the_gallery(session):
    r = session["text"]
    assert not r.is_error, text_of(r)
    s = r.structured_content
    assert s["mode"] == "text" and [h["rank"] for h in s["hits"]] == [1, 2, 3]
    assert text_of(r).startswith('<untrusted_data source="tool:text_search">')  # photo metadata is marked as data


def test_composed_search_with_a_gallery_reference(session):
    r = session["composed"]
    assert not r.is_error, text_of(r)
    s = r.structured_content
    assert s["mode"] == "composed" and s["method"] == "image_text_sum" and len(s["hits"]) == 3
    assert session["first"] not in [h["id"] for h in s["hits"]]  # never the reference itself


def test_a_reference_path_and_no_text_is_more_like_this(session):
    r = session["like_path"]
    assert not r.is_error, text_of(r)
    assert r.structured_content["mode"] == "image" and len(r.structured_content["hits"]) == 2


def test_a_photo_in_a_folder_served_with_root_is_a_reference(session):
    r = session["root_ref"]
    assert not r.is_error, text_of(r)
    assert r.structured_content["mode"] == "composed" and len(r.structured_content["hits"]) == 2


@pytest.mark.parametrize("key", ["outside", "escape"])
def test_a_path_outside_the_photo_folders_is_refused(session, key):
    r = session[key]
    assert r.is_error and "outside the photo folders served here" in text_of(r)


@pytest.mark.parametrize(
    "key,words",
    [
        ("big_k", "less than or equal to 100"),
        ("long_text", "at most 2000 characters"),
        ("two_refs", "exactly one reference"),
        ("unknown", "no photo with id 'no/such/photo'"),
        ("bad_filter", "expression"),
    ],
)
def test_bad_input_is_a_clear_error(session, key, words):
    r = session[key]
    assert r.is_error and words in text_of(r), text_of(r)


def test_metadata_filter_and_metadata(session):
    f = session["filter"].structured_content
    assert f["count"] == 2 and [p["id"] for p in f["photos"]] == ["Trip 2019/rome1", "Trip 2019/rome2"]
    m = session["meta"].structured_content
    assert m["photos"] == [{"id": "Trip 2019/rome1", "date": "2019-05-03 10:00:00", "album": "Trip 2019"}]


def test_a_history_question_answers_a_set(session):
    r = session["ask"]
    assert not r.is_error, text_of(r)
    s = r.structured_content
    assert sorted(h["id"] for h in s["photos"]) == ["Trip 2019/rome1", "Trip 2019/rome2"]
    assert s["steps"] and all(h["score"] is None for h in s["photos"])


def test_view_photo_returns_image_content(session):
    from PIL import Image

    r = session["view"]
    assert not r.is_error
    image = next(c for c in r.content if c.type == "image")
    assert image.mime_type == "image/jpeg"
    with Image.open(io.BytesIO(base64.b64decode(image.data))) as im:
        assert im.format == "JPEG" and max(im.size) <= 128
    assert r.structured_content["id"] == session["first"]


def test_index_update_adds_the_new_photo(session):
    r = session["update"]
    assert not r.is_error, text_of(r)
    assert "1 new" in r.structured_content["change"] and r.structured_content["indexed"] == 12
    assert not session["view_new"].is_error, text_of(session["view_new"])
    assert session["filter_new"].structured_content["count"] == 1
