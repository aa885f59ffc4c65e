"""`agentcir serve`: the web page and JSON API over an indexed gallery (FastAPI test client)."""

import pytest

pytest.importorskip("fastapi", reason="agentcir[serve] is not installed")
pytest.importorskip("multipart", reason="agentcir[serve] is not installed")

from fastapi.testclient import TestClient  # noqa: E402

from agentcir.framework.gallery import Gallery, items_from_folder  # noqa: E402
from agentcir.framework.recipe import compose  # noqa: E402
from agentcir.framework.search import Searcher  # noqa: E402
from agentcir.registry import ENCODERS  # noqa: E402
from agentcir.serve import create_app  # noqa: E402


@pytest.fixture
def client(plugin_path, image_folder, tmp_path):
    items, _ = items_from_folder(image_folder)
    Gallery.build(tmp_path / "g", items, ENCODERS.build("toy", {}))
    recipe = compose(["encoder=toy", "method=image_text_sum", "method.image_weight=1.0", f"run.root={tmp_path}",
                      "run.progress=false"])
    return TestClient(create_app(Searcher(recipe, tmp_path / "g"), uploads=tmp_path / "up")), image_folder, tmp_path


def test_page_info_and_images(client):
    c, _, _ = client
    page = c.get("/")
    assert page.status_code == 200 and "<form" in page.text and "image_text_sum" in page.text
    info = c.get("/api/info").json()
    assert info["size"] == 12 and info["encoder"] == "toy"
    assert c.get("/image/0").status_code == 200 and c.get("/image/0").content[:2] in (b"\xff\xd8", b"\x89P")
    assert c.get("/image/99").status_code == 404


def test_search_with_an_uploaded_image_and_text(client):
    c, folder, tmp = client
    data = (folder / "img01.png").read_bytes()
    r = c.post("/api/search", files={"image": ("ref.png", data, "image/png")}, data={"text": "brighter", "k": "5"})
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert [h["rank"] for h in hits] == [1, 2, 3, 4, 5] and hits[0]["score"] >= hits[-1]["score"]
    assert hits[0]["id"] == "img01"  # the same photo is in the gallery (image weight 1)
    assert len(list((tmp / "up").iterdir())) == 1  # stored once, by content
    c.post("/api/search", files={"image": ("again.png", data, "image/png")}, data={"text": "x"})
    assert len(list((tmp / "up").iterdir())) == 1


def test_text_only_and_bad_inputs(client):
    c, _, _ = client
    r = c.post("/api/search", data={"text": "a photo", "k": "3"})  # a composed method needs a reference image
    assert r.status_code == 400 and "has no reference image: composed retrieval needs one" in r.json()["detail"]
    r = c.post("/api/search", data={"text": "  "})
    assert r.status_code == 400 and r.json()["detail"] == "a search needs a reference image, a text, or both"
    r = c.post("/api/search", files={"image": ("notes.png", b"not an image", "image/png")}, data={"text": "x"})
    assert r.status_code == 400 and "image 'notes.png': cannot decode" in r.json()["detail"]
