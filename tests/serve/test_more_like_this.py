""" "More like this": a reference photo with no text works with every method (image retrieval),
in the Python search, the CLI, the JSON API and the page's button on each result."""

from __future__ import annotations

import json

import pytest

from .conftest import make_client
from .test_browser import _hit_ids, _open, _wait_results, artifacts, page, server  # noqa: F401 (fixtures)


def test_python_search_with_only_an_image_is_image_retrieval(searcher, gallery):
    folder, _, _, facts = gallery
    ref = folder / f"{facts['products'][2]}.jpg"
    res = searcher.search(image=ref, k=5)  # the default method (OCTOPUS) would need a modification text
    s = res.trace["search"]
    assert s["mode"] == "image" and s["method"] == "image_only" and s["recipe_method"] == "octopus"
    assert "more like this" in s["note"] and "image retrieval" in s["note"]
    assert len(res.hits) == 5 and facts["products"][2] not in [h.id for h in res.hits]
    # the ranking is the reference's image-embedding neighbours, in order
    g = searcher.gallery
    import numpy as np

    row = g.index_of(facts["products"][2])
    sims = g.image_emb @ g.image_emb[row]
    assert [h.score for h in res.hits] == sorted((h.score for h in res.hits), reverse=True)
    assert res.hits[0].score == pytest.approx(float(np.sort(sims[[h.row for h in res.hits]])[::-1][0]), abs=1e-4)


def test_image_only_with_a_set_answering_method(gallery):
    from agentcir.framework.recipe import compose
    from agentcir.framework.search import Searcher

    folder, gdir, root, facts = gallery
    s = Searcher(compose([f"run.root={root}", "run.progress=false", "method=imageseeker"]), gdir)
    res = s.search(image=folder / f"{facts['products'][0]}.jpg", k=4)
    t = res.trace["search"]
    assert t["mode"] == "image" and t["method"] == "image_only" and t["recipe_method"] == "imageseeker"
    assert len(res.hits) == 4 and all(h.score is not None for h in res.hits)


def test_api_reference_row_without_text(searcher, ask_factory, gallery, tmp_path):
    _, _, _, facts = gallery
    c = make_client(searcher, ask_factory, tmp_path)
    row = searcher.gallery.index_of(facts["products"][1])
    r = c.post("/api/search", data={"reference_row": str(row), "k": "6"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["trace"]["search"]["mode"] == "image" and body["trace"]["search"]["method"] == "image_only"
    assert len(body["hits"]) == 6 and facts["products"][1] not in [h["id"] for h in body["hits"]]


def test_cli_search_with_only_an_image(gallery, capsys):
    from agentcir.cli import main

    folder, gdir, root, facts = gallery
    ref = folder / f"{facts['products'][3]}.jpg"
    assert main(["search", "--gallery", str(gdir), "--image", str(ref), "-k", "3", "--json", f"run.root={root}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trace"]["search"]["mode"] == "image" and len(out["hits"]) == 3
    assert main(["search", "--gallery", str(gdir), "--image", str(ref), "-k", "3", f"run.root={root}", "-q"]) == 0
    cap = capsys.readouterr()
    assert len(cap.out.strip().splitlines()) == 4 and "image retrieval" in cap.err


def test_page_more_like_this_button(page, server, artifacts):  # noqa: F811
    _open(page, server)
    page.fill("#text", "a blue shirt")
    page.click("#go")
    _wait_results(page)
    first = _hit_ids(page)
    button = page.locator("#hits figure.hit").nth(1).locator("button.more")
    picked = page.locator("#hits figure.hit").nth(1).get_attribute("data-id")
    button.click()
    page.locator("#note").filter(has_text="image retrieval").wait_for()
    _wait_results(page)
    after = _hit_ids(page)
    assert after and after != first and picked not in after
    assert page.input_value("#text") == "" and page.locator("#ref-img").is_visible()
    page.screenshot(path=str(artifacts / "more-like-this.png"), full_page=True)
    assert not page.problems, page.problems
