"""`agentcir serve`'s JSON API and files (FastAPI test client over a real small gallery)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from PIL import Image

from .conftest import DEMO, XSS_NAME, make_client


@pytest.fixture
def client(searcher, ask_factory, tmp_path):
    return make_client(searcher, ask_factory, tmp_path)


def _row(searcher, item_id: str) -> int:
    return searcher.gallery.index_of(item_id)


def test_page_static_files_and_offline_docs(client):
    page = client.get("/")
    assert page.status_code == 200 and '<script src="/static/app.js"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"] and "<script>" not in page.text
    assert "textContent" in client.get("/static/app.js").text and "innerHTML" not in client.get("/static/app.js").text
    assert client.get("/static/app.css").status_code == 200
    docs = client.get("/docs")
    assert (
        docs.status_code == 200 and "/docs-assets/swagger-ui-bundle.js" in docs.text and "cdn" not in docs.text.lower()
    )
    js = client.get("/docs-assets/swagger-ui-bundle.js")
    assert js.status_code == 200 and len(js.content) > 100_000  # the real Swagger UI, served locally
    spec = client.get("/openapi.json").json()
    assert {"/api/search", "/api/ask", "/api/info", "/api/progress", "/thumb/{row}", "/image/{row}"} <= set(
        spec["paths"]
    )
    hit = spec["components"]["schemas"]["Hit"]["properties"]
    assert set(hit) == {"rank", "id", "score", "path", "row", "meta", "verified"}
    assert spec["paths"]["/api/search"]["post"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SearchResponse"
    }


def test_info(client, searcher):
    info = client.get("/api/info").json()
    assert info["size"] == len(searcher.gallery) and info["method"] == "octopus" and info["needs_reference"]
    assert info["questions"] and info["with_metadata"] == 6 and not info["auth"]


def test_upload_search_then_refine_with_a_result(client, searcher, gallery, tmp_path):
    folder, _, _, facts = gallery
    ref_id = facts["products"][0]
    data = (folder / f"{ref_id}.jpg").read_bytes()
    r = client.post("/api/search", files={"image": ("mine.jpg", data, "image/jpeg")}, data={"text": "in red", "k": "8"})
    assert r.status_code == 200, r.text
    body = r.json()
    ids = [h["id"] for h in body["hits"]]
    assert len(ids) == 8 and ref_id not in ids  # the reference itself (uploaded, same bytes) never comes back
    # ... nor its lossless TIFF copy (the same picture in another file)
    assert (
        set(body["trace"]["search"]["excluded"]) == {ref_id, facts["tiff"]}
        and body["trace"]["search"]["mode"] == "composed"
    )
    assert all(h["score"] is not None and abs(h["score"]) < 2 for h in body["hits"])  # raw scores, never +100
    assert sum(h["verified"] for h in body["hits"]) <= 1
    assert body["trace"]["perceive"]["reference_caption"] and body["trace"]["create"]["proxies"]
    ref = body["trace"]["search"]["reference"]
    assert ref["path"] == "mine.jpg" and str(tmp_path) not in json.dumps(body["trace"]["search"]["reference"])
    thumb = client.get(f"/upload/{ref['upload']}/thumb")  # the uploaded reference is shown
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    assert len(list((tmp_path / "up").iterdir())) == 1
    # the refine loop: a result becomes the next reference
    nxt = body["hits"][2]
    r2 = client.post("/api/search", data={"reference_row": str(nxt["row"]), "text": "in blue", "k": "8"})
    assert r2.status_code == 200, r2.text
    b2 = r2.json()
    assert (
        nxt["id"] not in [h["id"] for h in b2["hits"]] and b2["trace"]["search"]["reference"]["gallery_id"] == nxt["id"]
    )
    assert [h["rank"] for h in b2["hits"]] == list(range(1, 9))


def test_verified_hit_shows_its_raw_score(searcher, gallery):
    folder, _, _, facts = gallery
    res = searcher.search(image=folder / f"{facts['products'][3]}.jpg", text="in red", k=10)
    ver = res.trace["search"]["verification"]
    assert ver and ver == [v for v in ver]  # in rank order
    accepted = [v for v in ver if v["accepted"]]
    verified = [h for h in res.hits if h.verified]
    assert len(verified) == len(accepted) <= 1
    if verified:
        assert verified[0].id == accepted[0]["id"] and verified[0].rank == 1 and abs(verified[0].score) < 2


def test_text_only_search_works_with_a_composed_method(client, searcher):
    r = client.post("/api/search", data={"text": "a red t-shirt", "k": "5"})
    assert r.status_code == 200, r.text
    s = r.json()["trace"]["search"]
    assert s["mode"] == "text" and s["method"] == "text_only" and "no reference image" in s["note"]
    assert len(r.json()["hits"]) == 5


def test_cli_search_json_has_the_api_shape(gallery, capsys):
    from agentcir.cli import main

    folder, gdir, root, facts = gallery
    assert (
        main(["search", "--gallery", str(gdir), "--text", "a blue shirt", "-k", "4", "--json", f"run.root={root}"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"hits", "trace"} and len(out["hits"]) == 4
    assert set(out["hits"][0]) == {"rank", "id", "score", "path", "row", "meta", "verified"}
    assert out["trace"]["search"]["mode"] == "text"
    # a set-answering method: the hits are exactly its answer set, no invented scores
    assert (
        main(
            [
                "search",
                "--gallery",
                str(gdir),
                "--text",
                "photos from Rome",
                "--json",
                f"run.root={root}",
                "method=imageseeker",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert [h["id"] for h in out["hits"]] == out["trace"]["seek"]["ids"] and out["hits"]
    assert all(h["score"] is None for h in out["hits"]) and out["trace"]["search"]["mode"] == "answer"
    assert {h["id"] for h in out["hits"]} == {"albums/Trip 2019/rome1", "albums/Trip 2019/rome2"}  # every GPS match
    assert out["hits"][0]["meta"]["city"] == "Rome"
    # the table mode prints verified marks and "-" for set answers
    assert (
        main(
            [
                "search",
                "--gallery",
                str(gdir),
                "--text",
                "photos from Rome",
                f"run.root={root}",
                "method=imageseeker",
                "-q",
            ]
        )
        == 0
    )
    assert "albums/Trip 2019/rome" in capsys.readouterr().out


def test_history_question(client):
    r = client.post("/api/ask", data={"question": "photos from Rome"})
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["hits"] and [h["id"] for h in b["hits"]] == b["trace"]["seek"]["ids"]
    assert all(h["score"] is None for h in b["hits"]) and b["trace"]["seek"]["steps"]
    assert b["hits"][0]["meta"]["capturedevice"] == "NIKON D750"
    assert client.post("/api/ask", data={"question": "   "}).status_code == 400


def test_bad_inputs_are_4xx_with_a_detail(client, searcher):
    def bad(r, status, words):
        assert r.status_code == status, r.text
        assert words in r.json()["detail"], r.json()

    bad(client.post("/api/search", data={"text": "  "}), 400, "a search needs a reference image, a text, or both")
    bad(
        client.post("/api/search", files={"image": ("notes.png", b"not an image", "image/png")}, data={"text": "x"}),
        400,
        "This file is not an image agentcir can read ('notes.png': it is not in an image format agentcir knows",
    )
    bad(client.post("/api/search", data={"reference_row": "99999", "text": "x"}), 404, "no gallery row 99999")
    bad(client.post("/api/search", data={"text": "x", "k": "0"}), 422, "k:")
    png = io.BytesIO()
    Image.new("RGB", (8, 8)).save(png, "PNG")
    bad(
        client.post(
            "/api/search",
            files={"image": ("a.png", png.getvalue(), "image/png")},
            data={"reference_row": "0", "text": "x"},
        ),
        400,
        "not both",
    )
    bad(client.get("/thumb/0?size=999"), 422, "size: must be one of")
    bad(client.get("/thumb/-1"), 404, "no gallery row -1")
    assert client.get("/upload/..%2F..%2Fetc%2Fpasswd/thumb").status_code == 404
    bad(client.get("/upload/..passwd/thumb"), 404, "no stored upload")


def test_uploads_are_checked_before_they_are_stored(searcher, ask_factory, tmp_path):
    c = make_client(searcher, ask_factory, tmp_path, max_upload_mb=1, max_pixels=4_000_000)
    big = os.urandom(3 * 2**20)
    r = c.post("/api/search", files={"image": ("big.jpg", big, "image/jpeg")}, data={"text": "x"})
    assert r.status_code == 413 and "limit of 1 MB" in r.json()["detail"]
    png = io.BytesIO()  # 36 megapixels in a few kB: refused from its header, before decoding
    Image.new("L", (6000, 6000)).save(png, "PNG")
    assert len(png.getvalue()) < 2**20
    r = c.post("/api/search", files={"image": ("huge.png", png.getvalue(), "image/png")}, data={"text": "x"})
    assert r.status_code == 413 and "36.0 megapixels" in r.json()["detail"]

    def chunks():  # no Content-Length: counted as it streams, refused at the limit
        yield b'--b\r\nContent-Disposition: form-data; name="image"; filename="s.jpg"\r\n\r\n'
        for _ in range(64):
            yield os.urandom(64 * 1024)

    r = c.post("/api/search", content=chunks(), headers={"content-type": "multipart/form-data; boundary=b"})
    assert r.status_code == 413 and "limit of 1 MB" in r.json()["detail"]
    r = c.post("/api/search", files={"image": ("bad.jpg", b"\xff\xd8\xff garbage", "image/jpeg")}, data={"text": "x"})
    assert r.status_code == 400
    assert not (tmp_path / "up").exists() or not any((tmp_path / "up").iterdir())  # nothing rejected was stored


def test_stored_uploads_and_thumbnails_are_bounded(searcher, ask_factory, tmp_path):
    c = make_client(searcher, ask_factory, tmp_path, uploads_files=2, thumbs_mb=0.02)
    for i in range(4):
        png = io.BytesIO()
        Image.new("RGB", (16, 16), (i * 40, 0, 0)).save(png, "PNG")
        assert (
            c.post(
                "/api/search", files={"image": (f"{i}.png", png.getvalue(), "image/png")}, data={"text": "x", "k": "2"}
            ).status_code
            == 200
        )
    assert len(list((tmp_path / "up").iterdir())) == 2
    for row in range(12):
        assert c.get(f"/thumb/{row}?size=512").status_code == 200
    thumbs = [f for d in (tmp_path / "thumbs").iterdir() for f in d.iterdir()]
    assert sum(f.stat().st_size for f in thumbs) <= 0.02 * 2**20 + 40_000 and len(thumbs) < 12


def test_thumbnails_of_every_format(client, searcher, gallery):
    _, _, _, facts = gallery
    for key in ("tiff", "heic"):
        if key not in facts:
            continue
        row = _row(searcher, facts[key])
        r = client.get(f"/thumb/{row}?size=128")
        assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg", key
        im = Image.open(io.BytesIO(r.content))
        assert im.format == "JPEG" and max(im.size) <= 128
    row = _row(searcher, "albums/Home/winter")
    assert client.get(f"/thumb/{row}").content == client.get(f"/thumb/{row}").content  # cached on disk


def test_files_only_from_inside_the_gallery_folder(searcher, ask_factory, gallery, tmp_path):
    from agentcir.framework.gallery import Gallery

    folder, gdir, _, _ = gallery
    c = make_client(searcher, ask_factory, tmp_path)
    g = searcher.gallery
    row = _row(searcher, XSS_NAME)
    assert c.get(f"/image/{row}").status_code == 200
    outside = tmp_path / "secret.jpg"
    outside.write_bytes((DEMO / os.listdir(DEMO)[5]).read_bytes())
    target = Path(g.paths[row])
    saved = target.read_bytes()
    try:  # the gallery file is replaced by a link pointing out of the folder
        target.unlink()
        target.symlink_to(outside)
        assert c.get(f"/image/{row}").status_code == 404
        assert c.get(f"/thumb/{row}").status_code == 404
    finally:
        target.unlink()
        target.write_bytes(saved)
    assert Gallery.open(gdir).info["source"] == str(folder.resolve())


def test_bearer_token_on_every_route(searcher, ask_factory, tmp_path):
    c = make_client(searcher, ask_factory, tmp_path, token="s3cret")
    for path in ("/", "/static/app.js", "/api/info", "/openapi.json", "/docs", "/thumb/0", "/image/0", "/api/progress"):
        assert c.get(path).status_code == 401, path
    assert c.post("/api/search", data={"text": "x"}).status_code == 401
    assert c.get("/api/info", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/api/info", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    spec = c.get("/openapi.json", headers={"Authorization": "Bearer s3cret"}).json()
    assert (
        spec["security"] == [{"bearer": []}] and spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    )
    page = c.get("/?token=s3cret")  # the page opened once with the token sets a cookie, then drops it from the URL
    assert page.status_code == 200 and page.history[0].status_code == 303
    assert "agentcir_token" in page.history[0].headers["set-cookie"] and str(page.url) == "http://127.0.0.1/"
    assert c.get("/static/app.js").status_code == 200 and c.get("/thumb/0").status_code == 200


def test_progress_reports_stages_and_caption_counts(gallery, tmp_path):
    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher

    _, gdir, _, _ = gallery
    import shutil

    g2 = tmp_path / "g"
    shutil.copytree(gdir, g2)
    shutil.rmtree(g2 / "captions", ignore_errors=True)
    seen = []
    s = Searcher(compose([f"run.root={tmp_path}", "run.progress=false"]), g2)
    assert not s.prepared
    s.prepare(lambda stage, done, total: seen.append((stage, done, total)))
    n = len(s.gallery)
    assert s.prepared and ("gallery_captions", n, n) in seen
    seen.clear()
    s.search(text="in red", image=Path(s.gallery.paths[0]), k=3, progress=lambda *a: seen.append(a))
    assert [a[0] for a in seen if a[1:] == (0, 0)] == ["gallery_captions", "perceive", "create", "retrieve", "verify"]


def test_serve_command_warns_on_a_public_bind_without_token(gallery, monkeypatch, capsys):
    import uvicorn

    from agentcir.cli import main

    _, gdir, root, _ = gallery
    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append(kw))
    monkeypatch.delenv("AGENTCIR_TOKEN", raising=False)
    assert main(["serve", "--gallery", str(gdir), "--host", "0.0.0.0", f"run.root={root}"]) == 0
    assert "without a token" in capsys.readouterr().err and calls[-1]["host"] == "0.0.0.0"
    assert main(["serve", "--gallery", str(gdir), f"run.root={root}", "--token", "t"]) == 0
    assert "without a token" not in capsys.readouterr().err and calls[-1]["host"] == "127.0.0.1"


def test_warm_up_runs_a_composed_and_a_text_search(searcher):
    took = searcher.warm_up()
    assert took > 0 and searcher.prepared


def test_gallery_preparation_is_shown_once_with_counts(gallery, tmp_path):
    import shutil
    import time

    from fastapi.testclient import TestClient

    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher
    from agentcir.serve import ServeConfig, create_app

    _, gdir, _, _ = gallery
    g2 = tmp_path / "g"
    shutil.copytree(gdir, g2)
    shutil.rmtree(g2 / "captions", ignore_errors=True)
    s = Searcher(compose([f"run.root={tmp_path}", "run.progress=false"]), g2)
    c = TestClient(
        create_app(s, uploads=tmp_path / "up", thumbs=tmp_path / "t", config=ServeConfig(warm_up=False)),
        base_url="http://localhost",
    )
    deadline = time.time() + 120
    while not c.get("/api/progress").json()["prepared"] and time.time() < deadline:
        time.sleep(0.1)
    p = c.get("/api/progress").json()
    assert p["prepared"] and not p["preparing"] and not p["error"]
    assert p["stages"] == ["gallery_captions"] and p["done"] == p["total"] == len(s.gallery)
    r = c.post("/api/search", data={"reference_row": "0", "text": "in red", "k": "3"})
    assert r.status_code == 200 and r.json()["trace"]["search"]["stages"]["gallery_captions"]["calls"] == 0  # not again


def test_bounded_dir_evicts_the_least_recently_used(tmp_path):
    from agentcir.serve.files import BoundedDir

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "old.jpg").write_bytes(b"x" * 10)  # there before: found by the first put's listing
    d = BoundedDir(tmp_path / "d", max_bytes=35, max_files=3)
    d.put("a.jpg", b"a" * 10)
    d.put("b.jpg", b"b" * 10)
    assert d.get("a.jpg") is not None  # used: b is now the least recently used of the new ones
    d.put("c.jpg", b"c" * 10)  # 4 files, 40 bytes: old goes
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["a.jpg", "b.jpg", "c.jpg"]
    d.put("b.jpg", b"B" * 20)  # replaced: 40 bytes again, the least recently used (a) goes
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["b.jpg", "c.jpg"]
    d.put("big.jpg", b"z" * 50)  # alone over the byte budget: kept, every other file goes
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["big.jpg"]


def test_bounded_dir_shared_by_two_processes_keeps_its_bounds(tmp_path, monkeypatch):
    """Two servers on one thumbnail folder: each lists it again after RELIST_S, so the other's
    files count against the bounds."""
    from agentcir.serve.files import BoundedDir

    monkeypatch.setattr(BoundedDir, "RELIST_S", 0.0)
    a = BoundedDir(tmp_path / "d", max_bytes=10**6, max_files=4)
    b = BoundedDir(tmp_path / "d", max_bytes=10**6, max_files=4)
    for i in range(4):
        a.put(f"a{i}.jpg", b"a")
        b.put(f"b{i}.jpg", b"b")
    assert len(list((tmp_path / "d").iterdir())) == 4
