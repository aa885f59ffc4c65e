"""The server's start-up and a changing gallery: the warm-up reported per model at /api/status, a
search during the warm-up going first, thumbnails made in the background, `serve --watch` making
a new photo searchable (and a deleted one leave) without a restart, another server over the same
gallery opening the update by itself."""

from __future__ import annotations

import io
import shutil
import threading
import time

import pytest

from .conftest import DEMO, make_client

pytest.importorskip("watchdog")


def wait_for(cond, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return False


def test_status_reports_the_warm_up_per_model_and_the_thumbnails(searcher, ask_factory, tmp_path):
    c = make_client(searcher, ask_factory, tmp_path, warm_up=True)
    assert wait_for(lambda: c.get("/api/status").json()["warm_up"]["state"] == "done", 120)
    st = c.get("/api/status").json()
    w = st["warm_up"]
    assert [s["name"] for s in w["steps"]][:4] == [
        "encoder text tower",
        "text search",
        "encoder image tower",
        "image search",
    ]
    assert w["steps"][-1]["name"] == "composed search" and all(s["state"] == "done" for s in w["steps"])
    assert w["models"]["encoder:catalog text"] == w["models"]["encoder:catalog images"] == "ready"
    assert all(v == "ready" for v in w["models"].values())
    assert any(m.startswith("llm:") for m in w["models"]) and set(w["ready_for"]) == {"text", "image", "composed"}
    assert wait_for(lambda: c.get("/api/status").json()["thumbnails"]["state"] == "done", 60)
    t = c.get("/api/status").json()["thumbnails"]
    n = len(searcher.gallery)
    assert t["done"] == t["total"] == n and t["size"] == 256
    thumbs = [f for d in (tmp_path / "thumbs").iterdir() for f in d.iterdir()]
    assert len(thumbs) >= n - 2  # every photo but those that do not decode here (a HEIC without its plugin)
    g = st["gallery"]
    assert g["size"] == n and g["generation"] == searcher.generation and g["watching"] is None


def test_a_search_during_the_warm_up_goes_first(searcher, monkeypatch):
    from agentcir.framework.search import WarmStep, WarmUp

    def slow(progress):  # a model loading: holds the search lock, as every step does
        with searcher._lock:
            time.sleep(0.3)

    steps = [WarmStep(f"slow {i}", [f"model:{i}"], ("text",), slow) for i in range(5)]
    monkeypatch.setattr(searcher, "warm_steps", lambda: steps)
    w = WarmUp()
    t = threading.Thread(target=searcher.warm_up, kwargs={"status": w})
    t.start()
    assert wait_for(lambda: w.snapshot()["steps"] and w.snapshot()["steps"][0]["state"] == "running", 5)
    searcher.search(text="a red dress", k=3)
    snap = w.snapshot()
    t.join()
    assert snap["state"] == "running" and sum(s["state"] == "done" for s in snap["steps"]) <= 2, snap
    assert "loading" in snap["models"].values() or "waiting" in snap["models"].values()
    assert w.snapshot()["state"] == "done" and w.snapshot()["models"] == {f"model:{i}": "ready" for i in range(5)}


def test_serve_watch_makes_a_new_photo_searchable_without_a_restart(gallery, ask_factory, tmp_path):
    from PIL import Image

    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher
    from agentcir.serve import ServeConfig, create_app
    from fastapi.testclient import TestClient

    folder, gdir, _, _ = gallery
    photos, g2 = tmp_path / "photos", tmp_path / "g"
    shutil.copytree(folder, photos)
    shutil.copytree(gdir, g2)
    s = Searcher(compose([f"run.root={tmp_path}", "run.progress=false"]), g2)
    n = len(s.gallery)
    app = create_app(
        s, uploads=tmp_path / "up", thumbs=tmp_path / "thumbs", config=ServeConfig(warm_up=False, reload_s=0.1)
    )
    c = TestClient(app, base_url="http://127.0.0.1")
    other = TestClient(
        create_app(
            Searcher(compose([f"run.root={tmp_path}", "run.progress=false"]), g2),
            uploads=tmp_path / "up2",
            thumbs=tmp_path / "thumbs2",
            config=ServeConfig(warm_up=False, reload_s=0.1),
        ),
        base_url="http://127.0.0.1",
    )
    st = app.state.serve
    try:
        st.watch(photos, debounce_s=0.2, settle_s=0.3, observer="polling", poll_s=0.05)
        # the first update: the folder was copied, so every photo is at a new place (nothing embedded)
        assert wait_for(lambda: c.get("/api/status").json()["gallery"]["generation"] >= 1, 60)
        assert all(p.startswith(str(photos.resolve())) for p in s.gallery.paths)
        new = sorted(DEMO.iterdir())[40]
        t0 = time.monotonic()
        shutil.copy(new, photos / "arrived.jpg")
        assert wait_for(lambda: c.get("/api/status").json()["gallery"]["size"] == n + 1, 60)
        took = time.monotonic() - t0
        # the server's own follower may open the swapped-in gallery before the watch records its update
        assert wait_for(lambda: c.get("/api/status").json()["gallery"]["updates"] >= 1, 10)
        g = c.get("/api/status").json()["gallery"]
        # one update, or two when a loaded machine paused the copy past the settle time
        assert g["updates"] >= 1 and "new" in g["last_update"] and 0 < g["last_update_s"] <= took + 1
        # searchable: a crop of it finds it first ("more like this")
        im = Image.open(new).convert("RGB")
        w, h = im.size
        buf = io.BytesIO()
        im.crop((w // 10, h // 10, w - w // 10, h - h // 10)).save(buf, "JPEG")
        r = c.post("/api/search", files={"image": ("crop.jpg", buf.getvalue(), "image/jpeg")}, data={"k": "3"})
        assert r.status_code == 200, r.text
        assert r.json()["hits"][0]["id"] == "arrived"
        row = r.json()["hits"][0]["row"]
        assert c.get(f"/thumb/{row}").status_code == 200
        # the other server over the same gallery opened the update by itself
        assert wait_for(lambda: other.get("/api/status").json()["gallery"]["size"] == n + 1, 10)
        # a deleted photo leaves
        (photos / "arrived.jpg").unlink()
        assert wait_for(lambda: c.get("/api/status").json()["gallery"]["size"] == n, 60)
        assert "arrived" not in s.gallery.ids
    finally:
        st.close()
        other.app.state.serve.close()


def test_the_serve_command_watches_the_folder_it_is_given(gallery, monkeypatch, tmp_path, capsys):
    import uvicorn

    from agentcir.cli import main

    folder, gdir, _, _ = gallery
    photos, g2 = tmp_path / "photos", tmp_path / "g"
    shutil.copytree(folder, photos)
    shutil.copytree(gdir, g2)
    apps = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: apps.append(app))
    assert main(["serve", "--gallery", str(g2), "--watch", str(photos), "--poll", "0.05", f"run.root={tmp_path}"]) == 0
    st = apps[-1].state.serve
    try:
        assert st.library["watching"] == str(photos.resolve()) and "watching" in capsys.readouterr().out
        assert wait_for(lambda: st.library["following"], 60) and st.library["observer"] == "polling"
        assert wait_for(lambda: st.warm.snapshot()["state"] in ("done", "failed"), 120)  # nothing left running
    finally:
        st.close()
    assert main(["serve", "--gallery", str(g2), "--watch", str(tmp_path / "nope"), f"run.root={tmp_path}"]) == 2
    assert f"--watch: folder '{tmp_path / 'nope'}' does not exist" in capsys.readouterr().err
