"""CIRR on the real rc2 annotation files (placeholder images, synthetic rankings)."""

import json

import pytest

from agentcir.framework.datasets.cirr import CIRR
from agentcir.framework.errors import InputError
from agentcir.registry import ConfigError
from agentcir.framework.eval.submissions import validate_cirr

pytestmark = pytest.mark.shared


@pytest.fixture
def cirr_images(annotations, tmp_path, h):
    """Placeholders at the split files' relative paths (val and test1)."""
    for split in ("val", "test1"):
        rel = json.loads((annotations / f"cirr/image_splits/split.rc2.{split}.json").read_text())
        h.touch_all(tmp_path / p for p in rel.values())
    return tmp_path


def _ds(annotations, images, **kw):
    return CIRR(CIRR.Config(root=str(annotations / "cirr"), images=str(images), **kw))


def test_loader_reads_val(annotations, cirr_images):
    ds = _ds(annotations, cirr_images)
    items = ds.gallery_items()
    queries = ds.queries()
    assert len(items) == 2297 and len(queries) == 4181
    q = queries[0]
    assert q.id == "12060" and q.reference_id == "dev-244-0-img0" and q.targets == ["dev-1028-1-img1"]
    assert q.text == "show three bottles of soft drink" and len(q.meta["members"]) == 6
    assert q.reference[0].endswith("dev/dev-244-0-img0.png")
    assert ds.subset_note().startswith("CIRR val: evaluated 4181 of 4181 queries; gallery 2297 of 2297 images.")


def test_oracle_with_reference_ranked_first_scores_100(annotations, cirr_images, h):
    ds = _ds(annotations, cirr_images, limit=1000)
    items = ds.gallery_items()
    g = h.id_gallery(items)
    queries = ds.queries()
    ids = [it.id for it in items]
    rankings = [
        [q.reference_id, q.targets[0]] + [i for i in ids if i not in (q.reference_id, q.targets[0])] for q in queries
    ]
    m = ds.evaluate(h.candidates_from(rankings, g), queries, g)
    assert all(v == 100.0 for v in m.values()) and set(m) == {
        "R@1",
        "R@5",
        "R@10",
        "R@50",
        "R_subset@1",
        "R_subset@2",
        "R_subset@3",
        "Avg",
    }
    note = ds.subset_note()
    assert "Reference removed from rankings" in note and "beyond the ranking depth" not in note


def test_random_full_rankings_give_chance_subset_recall(annotations, cirr_images, h):
    ds = _ds(annotations, cirr_images, limit=1200)
    items = ds.gallery_items()
    g = h.id_gallery(items)
    queries = ds.queries()
    m = ds.evaluate(h.candidates_from(h.random_rankings([it.id for it in items], len(queries), seed=1), g), queries, g)
    # 5 subset members: R_subset@k = 20k %; 1200 queries -> sd about 1.2 points
    assert abs(m["R_subset@1"] - 20) < 4 and abs(m["R_subset@2"] - 40) < 5 and abs(m["R_subset@3"] - 60) < 5
    assert m["R@1"] < 1 and abs(m["R@50"] - 100 * 50 / 2296) < 2


def test_truncated_rankings_are_noted(annotations, cirr_images, h):
    ds = _ds(annotations, cirr_images, limit=20)
    items = ds.gallery_items()
    g = h.id_gallery(items)
    queries = ds.queries()
    ds.evaluate(h.candidates_from([[q.targets[0]] for q in queries], g), queries, g)
    note = ds.subset_note()
    assert "Rankings hold 1 items but R@50 after removing the reference needs 51" in note
    assert "20 queries had subset members beyond the ranking depth" in note


def test_test1_submission_files(annotations, cirr_images, h, tmp_path):
    ds = _ds(annotations, cirr_images, split="test1")
    items = ds.gallery_items()
    queries = ds.queries()
    assert len(queries) == 4148 and all(not q.targets for q in queries)
    g = h.id_gallery(items)
    assert ds.evaluate(h.candidates_from([[items[0].id]] * len(queries), g), queries, g) == {}
    ids = [it.id for it in items]
    others = h.random_rankings(ids, len(queries), seed=2)
    # a ranking holding 60 random images and every subset member, shuffled
    rankings = {
        q.id: h.random_rankings(list(dict.fromkeys(q.meta["members"] + r[:60])), 1, seed=n)[0]
        for n, (q, r) in enumerate(zip(queries, others))
    }
    files = ds.write_submission(rankings, tmp_path / "sub")
    recall, subset = (json.loads(f.read_text()) for f in files)
    assert [f.name for f in files] == ["cirr_test1_recall.json", "cirr_test1_recall_subset.json"]
    refs = {q.id: q.reference_id for q in queries}
    validate_cirr(recall, refs)
    validate_cirr(subset, refs, {q.id: q.meta["members"] for q in queries})
    assert len(recall) == 4148 + 2 and all(len(v) == 3 for k, v in subset.items() if k not in ("version", "metric"))
    with pytest.raises(InputError, match=r"1 query id\(s\) missing"):
        ds.write_submission({k: v for k, v in list(rankings.items())[1:]}, tmp_path / "sub2")


def test_missing_annotation_and_bad_split(tmp_path):
    with pytest.raises(
        ConfigError,
        match="dataset 'CIRR': field 'split': must be one of train, val, test1, got 'test'; did you mean 'test1'",
    ):
        CIRR(CIRR.Config(split="test"))
    with pytest.raises(
        InputError, match=r"looked for .*/image_splits/split.rc2.val.json, .*/cirr/image_splits/split.rc2.val.json"
    ):
        CIRR(CIRR.Config(root=str(tmp_path))).queries()
    (tmp_path / "cirr" / "image_splits").mkdir(parents=True)
    (tmp_path / "cirr" / "image_splits" / "split.rc2.val.json").write_text("{}")
    with pytest.raises(InputError, match=r"looked for .*/captions/cap.rc2.val.json, .*/cirr/captions/cap.rc2.val.json"):
        CIRR(CIRR.Config(root=str(tmp_path))).queries()
    (tmp_path / "cirr" / "image_splits" / "split.rc2.val.json").write_text("[1, 2")
    with pytest.raises(InputError, match="split.rc2.val.json' is not valid JSON"):
        CIRR(CIRR.Config(root=str(tmp_path))).gallery_items()
