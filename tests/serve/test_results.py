"""What a result set becomes in the web app: near-duplicate groups, CSV / JSON / zip exports,
album folders, the full photo; errors in plain words; a looped method's rounds in the trace."""

from __future__ import annotations

import csv
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from .conftest import DEMO, make_client


@pytest.fixture
def client(searcher, ask_factory, tmp_path):
    return make_client(searcher, ask_factory, tmp_path)


def _rows(searcher, *ids):
    return [searcher.gallery.index_of(i) for i in ids]


def _all_hits(client):
    r = client.post("/api/search", data={"text": "a t-shirt", "k": "1000", "dup_threshold": "0"})
    assert r.status_code == 200, r.text
    return r.json()["hits"]


# -- near-duplicate groups ---------------------------------------------------------------------
def test_search_groups_copies_of_one_picture(client, searcher, gallery):
    _, _, _, facts = gallery
    body = client.post("/api/search", data={"text": "a t-shirt", "k": "1000"}).json()  # the server's default, 0.97
    ids = [h["id"] for h in body["hits"]]
    groups = [sorted(ids[i] for i in g) for g in body["groups"]]
    assert sorted([facts["products"][0], facts["tiff"]]) in groups  # a JPEG and its TIFF: one picture
    if "heic" in facts:
        assert sorted([facts["products"][1], facts["heic"]]) in groups  # ... and its HEIC
    assert sum(len(g) for g in body["groups"]) == len(ids) and sorted(i for g in body["groups"] for i in g) == list(
        range(len(ids))
    )
    assert all(g == sorted(g) for g in body["groups"])  # each led by its best-ranked hit
    # the EXIF photos (random pixels) are close in embedding space but not copies: the hash keeps them apart
    assert all(len(g) <= 2 for g in groups) and len(groups) >= len(ids) - 2
    off = client.post("/api/search", data={"text": "a t-shirt", "k": "1000", "dup_threshold": "0"}).json()
    assert off["groups"] == [[i] for i in range(len(off["hits"]))]
    r = client.post("/api/search", data={"text": "a t-shirt", "dup_threshold": "0.2"})
    assert r.status_code == 422 and "dup_threshold: 0.2" in r.json()["detail"]


def test_groups_threshold_and_hash_are_tunable(client, searcher, gallery):
    _, _, _, facts = gallery
    hits = _all_hits(client)
    rows = [h["row"] for h in hits]
    ids = [h["id"] for h in hits]

    def grouped(**kw):
        r = client.post("/api/groups", json={"rows": rows, **kw})
        assert r.status_code == 200, r.text
        return [sorted(ids[i] for i in g) for g in r.json()["groups"] if len(g) > 1]

    assert sorted([facts["products"][0], facts["tiff"]]) in grouped(threshold=0.97)
    strict = grouped(threshold=0.9995)  # a lossless copy (cosine 1.0) only: the lossy HEIC (0.999) stays apart
    assert strict == [sorted([facts["products"][0], facts["tiff"]])]
    # without the hash check the random-pixel EXIF photos (cosine 0.98-0.99) merge into one "picture"
    loose = grouped(threshold=0.97, hash_distance=-1)
    assert any(sum(i.startswith("albums/") for i in g) >= 3 for g in loose)
    assert not any(sum(i.startswith("albums/") for i in g) >= 2 for g in grouped(threshold=0.97))
    assert grouped(threshold=0) == []
    r = client.post("/api/groups", json={"rows": rows, "threshold": 0.3})
    assert r.status_code == 422 and "dup_threshold: 0.3" in r.json()["detail"]
    r = client.post("/api/groups", json={"rows": [99999]})
    assert r.status_code == 404 and "no gallery row 99999" in r.json()["detail"]


def test_group_rows_leaders_never_chain():
    from agentcir.serve.groups import dhash, group_rows, hamming

    a = np.array([1.0, 0.0])
    b = np.array([np.cos(0.2), np.sin(0.2)])  # close to a
    c = np.array([np.cos(0.4), np.sin(0.4)])  # close to b, not to a
    out = group_rows([10, 11, 12], np.stack([a, b, c]), threshold=float(np.cos(0.25)), hash_of=None)
    assert out == [[0, 1], [2]]
    im = Image.open(DEMO / sorted(os.listdir(DEMO))[0])
    small = im.resize((im.width // 3, im.height // 3))
    assert hamming(dhash(im), dhash(small)) <= 4
    assert hamming(dhash(im), dhash(Image.open(DEMO / sorted(os.listdir(DEMO))[7]))) > 10


# -- export ---------------------------------------------------------------------------------
def test_export_csv_json_zip(client, searcher, gallery):
    folder, _, _, _ = gallery
    rome = _rows(searcher, "albums/Trip 2019/rome1", "albums/Trip 2019/rome2")
    other = _rows(searcher, "10048")
    shown = [
        {"row": rome[0], "rank": 1, "score": 0.5, "verified": True, "group": 0},
        {"row": other[0], "rank": 2, "score": 0.25, "group": 1},
        {"row": rome[1], "rank": 3, "score": None, "group": 2},
    ]
    r = client.post("/api/export", json={"format": "csv", "hits": shown})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert 'filename="agentcir-results.csv"' in r.headers["content-disposition"]
    table = list(csv.DictReader(io.StringIO(r.text)))
    assert [t["id"] for t in table] == ["albums/Trip 2019/rome1", "10048", "albums/Trip 2019/rome2"]
    assert table[0]["path"] == str((folder / "albums" / "Trip 2019" / "rome1.jpg").resolve())
    assert table[0]["city"] == "Rome" and table[0]["capturedevice"] == "NIKON D750" and table[0]["verified"] == "1"
    assert table[0]["taken_time"].startswith("2019-05-03") and table[1]["city"] == "" and table[2]["score"] == ""
    assert float(table[1]["score"]) == 0.25 and table[1]["rank"] == "2"

    r = client.post("/api/export", json={"format": "json", "hits": shown, "query": {"text": "in Rome"}})
    doc = r.json()
    assert doc["query"] == {"text": "in Rome"} and doc["missing"] == [] and len(doc["hits"]) == 3
    assert doc["hits"][0]["meta"]["city"] == "Rome" and doc["hits"][0]["path"].endswith("rome1.jpg")
    assert doc["hits"][2]["score"] is None and doc["hits"][1]["group"] == 1

    r = client.post("/api/export", json={"format": "zip", "hits": shown})
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    z = zipfile.ZipFile(io.BytesIO(r.content))
    names = z.namelist()
    assert names == [
        "photos/0001-rome1.jpg",
        "photos/0002-10048.jpg",
        "photos/0003-rome2.jpg",
        "results.csv",
        "results.json",
    ]
    assert z.read("photos/0002-10048.jpg") == (folder / "10048.jpg").read_bytes()  # the original, unchanged
    assert "albums/Trip 2019/rome2" in z.read("results.csv").decode()
    assert json.loads(z.read("results.json"))["hits"][0]["id"] == "albums/Trip 2019/rome1"


def test_export_limits_and_bad_rows(searcher, ask_factory, gallery, tmp_path):
    c = make_client(searcher, ask_factory, tmp_path, export_max_mb=0.001)
    row = _rows(searcher, "10048")[0]
    r = c.post("/api/export", json={"format": "zip", "hits": [{"row": row}]})
    assert r.status_code == 413 and "more than the export limit" in r.json()["detail"]
    assert c.post("/api/export", json={"format": "csv", "hits": [{"row": row}]}).status_code == 200  # tables are small
    r = c.post("/api/export", json={"format": "csv", "hits": [{"row": 99999}]})
    assert r.status_code == 404 and "no gallery row 99999" in r.json()["detail"]
    r = c.post("/api/export", json={"format": "pdf", "hits": [{"row": row}]})
    assert r.status_code == 422 and "format" in r.json()["detail"]
    assert c.post("/api/export", json={"format": "csv", "hits": []}).status_code == 422


def test_export_and_full_photo_refuse_files_outside_the_gallery(searcher, ask_factory, gallery, tmp_path):
    c = make_client(searcher, ask_factory, tmp_path)
    row = _rows(searcher, "10070")[0]
    target = Path(searcher.gallery.paths[row])
    saved = target.read_bytes()
    outside = tmp_path / "secret.jpg"
    outside.write_bytes((DEMO / sorted(os.listdir(DEMO))[5]).read_bytes())
    assert c.get(f"/view/{row}").status_code == 200
    try:  # the gallery file is replaced by a link pointing out of the folder
        target.unlink()
        target.symlink_to(outside)
        for path in (f"/image/{row}", f"/image/{row}?download=true", f"/view/{row}"):
            r = c.get(path)
            assert r.status_code == 404 and "outside the gallery folder" in r.json()["detail"], path
        r = c.post("/api/export", json={"format": "zip", "hits": [{"row": row}]})
        assert r.status_code == 404  # nothing readable to zip
        other = _rows(searcher, "10048")[0]
        r = c.post("/api/export", json={"format": "zip", "hits": [{"row": row}, {"row": other}]})
        z = zipfile.ZipFile(io.BytesIO(r.content))
        assert [n for n in z.namelist() if n.startswith("photos/")] == ["photos/0002-10048.jpg"]
        assert outside.read_bytes() not in [z.read(n) for n in z.namelist()]
        missing = json.loads(z.read("results.json"))["missing"]
        assert [m["id"] for m in missing] == ["10070"] and "outside the gallery folder" in missing[0]["why"]
    finally:
        target.unlink()
        target.write_bytes(saved)
    assert c.get("/view/-1").status_code == 404 and c.get("/view/99999").status_code == 404


def test_full_photo_route(client, searcher, gallery):
    folder, _, _, facts = gallery
    row = _rows(searcher, "10048")[0]
    r = client.get(f"/view/{row}")
    assert r.status_code == 200 and r.content == (folder / "10048.jpg").read_bytes()  # a JPEG as stored
    r = client.get(f"/image/{row}?download=true")
    assert r.status_code == 200 and r.headers["content-disposition"].startswith("attachment")
    assert "10048.jpg" in r.headers["content-disposition"] and r.content == (folder / "10048.jpg").read_bytes()
    tif = _rows(searcher, facts["tiff"])[0]  # a format browsers cannot show: a large JPEG of it
    r = client.get(f"/view/{tif}")
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    im = Image.open(io.BytesIO(r.content))
    assert im.format == "JPEG" and im.size == Image.open(folder / "tiff_copy.tif").size  # not downscaled below 2048


# -- album folders ----------------------------------------------------------------------------
def test_copy_into_an_album_folder(searcher, ask_factory, gallery, tmp_path):
    folder, _, _, _ = gallery
    off = make_client(searcher, ask_factory, tmp_path / "a")
    row = _rows(searcher, "10048")[0]
    r = off.post("/api/album", json={"name": "x", "hits": [{"row": row}]})
    assert r.status_code == 404 and "--album-root" in r.json()["detail"]
    root = tmp_path / "albums"
    c = make_client(searcher, ask_factory, tmp_path / "b", album_root=str(root))
    assert c.get("/api/info").json()["album"] is True
    rows = _rows(searcher, "10048", "albums/Trip 2019/rome1")
    r = c.post("/api/album", json={"name": "Summer picks", "hits": [{"row": x} for x in rows]})
    assert r.status_code == 200, r.text
    assert sorted(r.json()["copied"]) == ["10048.jpg", "rome1.jpg"]
    assert (root / "Summer picks" / "10048.jpg").read_bytes() == (folder / "10048.jpg").read_bytes()
    again = c.post("/api/album", json={"name": "Summer picks", "hits": [{"row": x} for x in rows]}).json()
    assert again["copied"] == [] and sorted(again["already_there"]) == ["10048.jpg", "rome1.jpg"]
    for bad in ("../escape", ".hidden", "a/b", ""):
        r = c.post("/api/album", json={"name": bad, "hits": [{"row": row}]})
        assert r.status_code == 422, bad
    assert not (tmp_path / "escape").exists()


# -- errors in plain words ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data,words",
    [
        (b"not an image at all", "it is not in an image format agentcir knows"),
        (None, "the file is damaged or cut short"),
    ],
)
def test_bad_uploads_are_said_in_plain_words(client, data, words):
    if data is None:  # a JPEG cut in half
        buf = io.BytesIO()
        Image.fromarray((np.random.default_rng(0).random((256, 256, 3)) * 255).astype("uint8")).save(buf, "JPEG")
        data = buf.getvalue()[: len(buf.getvalue()) // 2]
    r = client.post("/api/search", files={"image": ("holiday.jpg", data, "image/jpeg")}, data={"text": "in red"})
    assert r.status_code == 400
    detail = r.json()["detail"]
    assert detail.startswith("This file is not an image agentcir can read ('holiday.jpg': ") and words in detail
    for jargon in ("Error", "Exception", "BytesIO", "0x", "rerun", "Traceback"):
        assert jargon not in detail, detail


def test_plain_strips_class_names_reprs_and_command_advice():
    from agentcir.framework.plain import plain

    raw = (
        "stage 'create': 1 of 1 queries failed (first: query query: ImageDecodeError: image 'x.jpg': file not found); "
        "the others' work is saved, rerun the same command to retry the failed ones"
    )
    assert plain(raw) == "the search stopped at its 'create' step: image 'x.jpg': file not found"
    assert (
        plain("UnidentifiedImageError: cannot identify image file <_io.BytesIO object at 0x7f3a2c>")
        == "not in an image format agentcir knows"
    )
    assert (
        plain("verifier 'contrast': the instruction must be a non-empty text")
        == "verifier 'contrast': the instruction must be a non-empty text"
    )  # a plain message stays as it is


def test_an_unexpected_error_is_a_sentence(searcher, ask_factory, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from agentcir.serve import ServeConfig, create_app
    from agentcir.serve.routes import results

    app = create_app(searcher, uploads=tmp_path / "up", thumbs=tmp_path / "th", config=ServeConfig(warm_up=False))
    monkeypatch.setattr(results.X, "to_csv", lambda records: 1 / 0)
    c = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)
    r = c.post("/api/export", json={"format": "csv", "hits": [{"row": 0}]})
    assert r.status_code == 500 and r.json()["detail"].startswith("Something went wrong on the server")
    assert "ZeroDivision" not in r.text


# -- a looped method's trace --------------------------------------------------------------------------
AUTOCIR_TRACE = {
    "plan": {
        "reference_caption": "a white t-shirt",
        "reply": "Edited Description: a red t-shirt",
        "description": "a red t-shirt",
        "active": True,
    },
    "round1": {
        "round": 1,
        "asked": True,
        "checked_ids": ["a", "b", "c"],
        "verdict": "Step 1: ...\nSuggestions: make it red",
        "stopped": False,
        "suggestions": "make it red",
        "reply": "...",
        "description": "a bright red t-shirt",
        "active": True,
    },
    "round2": {
        "round": 2,
        "asked": True,
        "checked_ids": ["a", "b", "c"],
        "verdict": "Good retrieval",
        "stopped": True,
        "suggestions": "Good retrieval",
        "description": "a bright red t-shirt",
        "active": False,
    },
    "search": {"method": "autocir"},
}
IMAGESCOPE_TRACE = {
    "reason": {"reference_caption": "x", "step1": [["Modification", "make it red"]], "step2": ["A red t-shirt.", "b"]},
    "propositions": {"questions": [{"question": "The item is red.", "raw": "True", "answer": True}]},
    "rerank": {"candidates": ["a", "b"], "values": [1, 0], "answers": [[True], [False]]},
    "verify": {"verdicts": [False, True], "accepted": 1},
    "search": {"method": "imagescope"},
}


def test_loop_steps_read_rounds_suggestions_and_verdicts():
    from agentcir.framework.loops import format_loop, loop_steps

    a = loop_steps(AUTOCIR_TRACE)
    assert [s["round"] for s in a] == [None, 1, 2] and [s["stage"] for s in a] == ["plan", "round1", "round2"]
    assert (
        a[1]["suggestions"] == "make it red" and a[1]["checked"] == 3 and a[1]["description"] == "a bright red t-shirt"
    )
    assert a[2]["stopped"] is True and a[2]["suggestions"] is None and a[2]["verdict"] == "Good retrieval"
    text = format_loop(a, "autocir")
    assert "round 1" in text and "suggestions: “make it red”" in text and "stopped: good retrieval" in text
    s = loop_steps(IMAGESCOPE_TRACE)
    assert [x["stage"] for x in s] == ["reason", "propositions", "rerank", "verify"]
    assert s[0]["description"] == "A red t-shirt." and s[1]["questions"] == ["The item is red."]
    assert s[2]["satisfied"] == [1, 0] and s[3]["verdicts"] == [False, True] and s[3]["accepted_rank"] == 2
    assert "best candidate satisfies 1 of 1 statements" in format_loop(s) and "accepted rank 2" in format_loop(s)
    # WISER: suggestions, verdicts and stops per retrieval path
    w = loop_steps(
        {
            "round0": {"round": 0, "description": "a red shirt", "active": {"t2i": True, "i2i": True}},
            "round1": {
                "round": 1,
                "suggestions": {"t2i": "make it darker", "i2i": "Good retrieval"},
                "verdict": {"t2i": "No, too light", "i2i": "Yes"},
                "stopped": {"t2i": False, "i2i": True},
            },
        }
    )
    assert w[1]["stopped"] is False and w[1]["suggestions"] == "t2i: make it darker"
    assert w[1]["verdict"] == "t2i: No, too light; i2i: Yes"
    # a one-shot method has no loop
    assert loop_steps({"perceive": {"target_caption": "x"}, "verify": {"verdicts": [True], "accepted": 0}}) == []


def test_api_and_cli_show_the_loop_of_autocir(gallery, tmp_path, capsys, monkeypatch):
    from fastapi.testclient import TestClient

    from agentcir.cli import main
    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher
    from agentcir.serve import ServeConfig, create_app

    folder, gdir, root, facts = gallery
    s = Searcher(compose([f"run.root={root}", "run.progress=false", "method=autocir"]), gdir)
    c = TestClient(
        create_app(
            s, uploads=tmp_path / "up", thumbs=tmp_path / "th", config=ServeConfig(warm_up=False, prepare=False)
        ),
        base_url="http://127.0.0.1",
    )
    row = s.gallery.index_of(facts["products"][2])
    r = c.post("/api/search", data={"reference_row": str(row), "text": "in red", "k": "5"})
    assert r.status_code == 200, r.text
    loop = r.json()["trace"]["search"]["loop"]
    assert r.json()["trace"]["search"]["mode"] == "composed"
    assert [x["stage"] for x in loop] == ["plan", "round1"] and loop[1]["round"] == 1
    assert loop[1]["verdict"] and (loop[1]["suggestions"] or loop[1]["stopped"]) and loop[0]["description"]
    # the CLI prints the same steps, read from the search's trace
    from agentcir.framework.search import SearchResult

    done = SearchResult([], {**AUTOCIR_TRACE, "search": {**r.json()["trace"]["search"], "note": ""}})
    monkeypatch.setattr(Searcher, "search", lambda self, **kw: done)
    assert main(["search", "--gallery", str(gdir), "--text", "in red", "-k", "3", f"run.root={root}", "-q"]) == 0
    err = capsys.readouterr().err
    assert "the loop of autocir (3 steps):" in err and "round 1" in err and "suggestions: “make it red”" in err
    assert "round 2" in err and "stopped: good retrieval" in err
