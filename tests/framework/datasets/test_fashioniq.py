"""FashionIQ on the real annotation files (placeholder images, synthetic rankings)."""

import json

import pytest

from agentcir.framework.datasets.fashioniq import FashionIQ, fashioniq_text
from agentcir.framework.errors import InputError
from agentcir.registry import ConfigError

pytestmark = pytest.mark.shared


def _dataset(annotations, images, category="dress", **kw):
    return FashionIQ(
        FashionIQ.Config(root=str(annotations / "fashion-iq"), category=category, images=str(images), **kw)
    )


@pytest.fixture
def dress(annotations, tmp_path, h):
    """Placeholders for the dress val gallery, every 10th image left out (FashionIQ lacks images too)."""
    names = json.loads((annotations / "fashion-iq/image_splits/split.dress.val.json").read_text())
    missing = set(names[::10])
    h.touch_all(tmp_path / "img" / f"{n}.{'png' if i % 2 else 'jpg'}" for i, n in enumerate(names) if n not in missing)
    return names, missing, tmp_path / "img"


def test_query_text_is_the_official_join():
    assert fashioniq_text(["is shiny and silver.", " fit and flare?"]) == "is shiny and silver and fit and flare"
    assert (
        fashioniq_text([" yello and more flowing", "short and black, "]) == "yello and more flowing and short and black"
    )


def test_loader_counts_missing_images_and_skipped_queries(annotations, dress):
    names, missing, images = dress
    ds = _dataset(annotations, images)
    items = ds.gallery_items()
    assert len(items) == len(names) - len(missing)
    assert {it.id for it in items}.isdisjoint(missing)
    assert {p.rsplit(".", 1)[1] for p in (it.path for it in items)} == {"png", "jpg"}
    caps = json.loads((annotations / "fashion-iq/captions/cap.dress.val.json").read_text())
    queries = ds.queries()
    ref_missing = sum(c["candidate"] in missing for c in caps)
    tgt_missing = sum(c["candidate"] not in missing and c["target"] in missing for c in caps)
    assert len(queries) == len(caps) - ref_missing - tgt_missing
    q0 = queries[0]
    first = next(c for c in caps if c["candidate"] not in missing and c["target"] not in missing)
    assert q0.reference_id == first["candidate"] and q0.targets == [first["target"]]
    assert q0.text == fashioniq_text(first["captions"]) and q0.meta["text_reversed"] == fashioniq_text(
        first["captions"][::-1]
    )
    note = ds.subset_note()
    assert note.startswith(f"FashionIQ dress val: evaluated {len(queries)} of {len(caps)} queries")
    assert f"{ref_missing} reference image missing" in note and f"{tgt_missing} target image missing" in note
    assert f"gallery {len(items)} of {len(names)} images ({len(missing)} missing on disk, skipped" in note


def test_oracle_and_no_reference_removal(annotations, dress, h):
    ds = _dataset(annotations, dress[2])
    items = ds.gallery_items()
    g = h.id_gallery(items)
    queries = ds.queries()
    ids = [it.id for it in items]
    oracle = [[q.targets[0]] + [i for i in ids[:60] if i != q.targets[0]] for q in queries]
    m = ds.evaluate(h.candidates_from(oracle, g), queries, g)
    assert m == {"R@1": 100.0, "R@5": 100.0, "R@10": 100.0, "R@50": 100.0}
    # reference ranked first, target second: FashionIQ does not remove the reference
    ref_first = [
        [q.reference_id, q.targets[0]] + [i for i in ids[:60] if i not in (q.reference_id, q.targets[0])]
        for q in queries
    ]
    m = ds.evaluate(h.candidates_from(ref_first, g), queries, g)
    same = sum(q.reference_id == q.targets[0] for q in queries)
    assert m["R@1"] == pytest.approx(100.0 * same / len(queries)) and m["R@5"] == 100.0
    assert "Reference not removed" in ds.subset_note()


def test_random_ranking_is_near_chance(annotations, dress, h):
    ds = _dataset(annotations, dress[2], limit=300)
    items = ds.gallery_items()
    g = h.id_gallery(items)
    queries = ds.queries()
    assert len(queries) == 300 and "Limited to the first 300" in ds.subset_note()
    m = ds.evaluate(h.candidates_from(h.random_rankings([it.id for it in items], len(queries)), g), queries, g)
    chance50 = 100.0 * 50 / len(items)
    assert abs(m["R@50"] - chance50) < 3.0 and m["R@1"] < 2.0


def test_shallow_rankings_are_noted(annotations, dress, h):
    ds = _dataset(annotations, dress[2], limit=5)
    g = h.id_gallery(ds.gallery_items())
    queries = ds.queries()
    ds.evaluate(h.candidates_from([[q.targets[0]] for q in queries], g), queries, g)
    assert "Rankings hold 1 items but R@50 needs 50" in ds.subset_note()


def test_test_split_has_nothing_to_score(annotations, tmp_path, h):
    names = json.loads((annotations / "fashion-iq/image_splits/split.shirt.test.json").read_text())
    h.touch_all(tmp_path / f"{n}.png" for n in names)
    ds = _dataset(annotations, tmp_path, category="shirt", split="test", limit=3)
    queries = ds.queries()
    assert len(queries) == 3 and all(not q.targets for q in queries)
    g = h.id_gallery(ds.gallery_items())
    assert ds.evaluate(h.candidates_from([[names[0]]] * 3, g), queries, g) == {}
    assert "No ground truth in this split" in ds.subset_note()


def test_bad_config_and_missing_files(tmp_path):
    with pytest.raises(
        ConfigError, match="dataset 'FashionIQ': field 'category': must be one of dress, shirt, toptee, got 'hat'"
    ):
        FashionIQ(FashionIQ.Config(category="hat"))
    with pytest.raises(InputError, match="dataset 'fashioniq': set dataset.root to the dataset folder"):
        FashionIQ(FashionIQ.Config()).gallery_items()
    with pytest.raises(InputError, match=r"annotation file not found; looked for .*split.dress.val.json"):
        FashionIQ(FashionIQ.Config(root=str(tmp_path))).gallery_items()
    assert FashionIQ(FashionIQ.Config(root=str(tmp_path))).model_identity() == ""
