"""CIRCO on the real annotation files (COCO image list and placeholder images made here)."""

import json
import shutil

import pytest

from agentcir.framework.datasets.circo import CIRCO, SEMANTIC_ASPECTS
from agentcir.framework.errors import InputError
from agentcir.registry import ConfigError

pytestmark = pytest.mark.shared


@pytest.fixture
def circo_root(annotations, tmp_path, h):
    """The official layout: real annotations, a COCO image list of every id the annotations
    name plus 400 distractors, placeholders for all of them but one ground truth."""
    root = tmp_path / "CIRCO"
    shutil.copytree(annotations / "circo" / "annotations", root / "annotations")
    val = json.loads((root / "annotations/val.json").read_text())
    test = json.loads((root / "annotations/test.json").read_text())
    ids = {x["reference_img_id"] for x in val + test} | {g for x in val for g in x["gt_img_ids"]}
    ids |= set(range(900_000_000, 900_000_400))
    ids = sorted(ids)
    info = {"images": [{"id": i, "file_name": f"{i:012d}.jpg"} for i in ids]}
    (root / "COCO2017_unlabeled/annotations").mkdir(parents=True)
    (root / "COCO2017_unlabeled/annotations/image_info_unlabeled2017.json").write_text(json.dumps(info))
    lost = val[0]["gt_img_ids"][-1]
    h.touch_all(root / "COCO2017_unlabeled/unlabeled2017" / f"{i:012d}.jpg" for i in ids if i != lost)
    return root, val, str(lost), len(ids)


def test_loader_and_counts(circo_root):
    root, val, lost, n_ids = circo_root
    ds = CIRCO(CIRCO.Config(root=str(root)))
    items = ds.gallery_items()
    queries = ds.queries()
    assert len(items) == n_ids - 1 and len(queries) == 220
    q = queries[0]
    assert q.id == "0" and q.reference_id == str(val[0]["reference_img_id"]) and q.text == val[0]["relative_caption"]
    assert q.targets == [str(x) for x in val[0]["gt_img_ids"]] and q.meta["target_img_id"] == q.targets[0]
    assert q.meta["shared_concept"] == val[0]["shared_concept"]
    assert f"gallery {n_ids - 1} of {n_ids} images (1 missing on disk, skipped; e.g. {lost})" in ds.subset_note()


def test_oracle_random_and_semantic_aspects(circo_root, h):
    root, val, lost, _ = circo_root
    ds = CIRCO(CIRCO.Config(root=str(root)))
    items = ds.gallery_items()
    g = h.id_gallery(items)
    queries = ds.queries()
    ids = [it.id for it in items]
    oracle = [[t for t in q.targets if t != lost] + [i for i in ids if i not in q.targets][:60] for q in queries]
    m = ds.evaluate(h.candidates_from(oracle, g), queries, g)
    # query 0 lost one of its ground truths: AP@k = (#gt - 1) / min(k, #gt) for it
    n0 = len(val[0]["gt_img_ids"])
    assert m["mAP@50"] == pytest.approx(100 * (219 + (n0 - 1) / n0) / 220)
    assert m["R@5"] == 100.0 and set(f"mAP@10/{a}" for a in SEMANTIC_ASPECTS) <= set(m)
    assert "1 ground-truth image(s) are not in the indexed gallery" in ds.subset_note()
    rnd = ds.evaluate(h.candidates_from(h.random_rankings(ids, len(queries)), g), queries, g)
    assert rnd["mAP@50"] < 5 and rnd["R@50"] < 20


def test_duplicates_in_a_ranking_are_an_error(circo_root, h):
    root = circo_root[0]
    ds = CIRCO(CIRCO.Config(root=str(root), limit=2))
    g = h.id_gallery(ds.gallery_items())
    queries = ds.queries()
    ids = g.ids[:50]
    cands = h.candidates_from([ids, ids], g)
    cands.ids[1, 3] = cands.ids[1, 2]
    with pytest.raises(InputError, match="duplicate prediction"):
        ds.evaluate(cands, queries, g)


def test_test_split_submission(circo_root, h, tmp_path):
    root = circo_root[0]
    ds = CIRCO(CIRCO.Config(root=str(root), split="test"))
    items = ds.gallery_items()
    queries = ds.queries()
    assert len(queries) == 800 and not queries[0].targets
    ids = [it.id for it in items]
    rankings = {q.id: r[:50] for q, r in zip(queries, h.random_rankings(ids, len(queries)))}
    (f,) = ds.write_submission(rankings, tmp_path / "out")
    sub = json.loads(f.read_text())
    assert f.name == "circo_test_submission.json" and sorted(map(int, sub)) == list(range(800))
    assert all(len(v) == 50 and all(isinstance(x, int) for x in v) for v in sub.values())
    with pytest.raises(InputError, match=r"query 0: needs exactly 50 predictions, got 10"):
        ds.write_submission({**rankings, "0": rankings["0"][:10]}, tmp_path / "out2")


def test_missing_coco_list(tmp_path):
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "val.json").write_text("[]")
    with pytest.raises(InputError, match=r"looked for .*COCO2017_unlabeled/annotations/image_info_unlabeled2017.json"):
        CIRCO(CIRCO.Config(root=str(tmp_path))).gallery_items()
    with pytest.raises(ConfigError, match="field 'split': must be one of val, test, got 'train'"):
        CIRCO(CIRCO.Config(split="train"))
