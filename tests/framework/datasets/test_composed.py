"""Composed benchmark folders: the bundled demo, missing folders with a build hint, the subset line."""

import json

import pytest

from agentcir.framework.datasets.composed import ComposedFolder, Demo, FashionCIR
from agentcir.framework.errors import InputError


def test_demo_loads_and_is_small():
    from agentcir.framework.datasets.composed import DEMO_ROOT

    ds = Demo()
    items, queries = ds.gallery_items(), ds.queries()
    assert len(items) == 320 and len(queries) == 40
    size = sum(p.stat().st_size for p in DEMO_ROOT.rglob("*") if p.is_file())
    assert size <= 5 * 2**20
    assert "Myntra" in (DEMO_ROOT / "README.md").read_text()
    assert (
        ds.subset_note().startswith("Composed benchmark")
        and "evaluated 40 of 40 queries; gallery 320 of 320 images." in ds.subset_note()
    )


def test_missing_folder_fails_on_use_with_a_build_hint(tmp_path):
    ds = FashionCIR(FashionCIR.Config(root=str(tmp_path / "bench"), source="/data/fp"))
    assert ds.model_identity() == ""  # building is cheap; the error comes on use
    with pytest.raises(
        InputError,
        match=r"has no gallery.csv \(build it first: agentcir build-benchmark --csv "
        r"/data/fp/products.csv --images /data/fp/images --out .*bench\)",
    ):
        ds.gallery_items()
    with pytest.raises(InputError, match="has no gallery.csv .*agentcir build-benchmark"):
        ComposedFolder(ComposedFolder.Config(root=str(tmp_path))).queries()


def test_skips_are_counted_and_reference_excluded(tmp_path, h):
    h.touch_all(tmp_path / "images" / f"{i}.jpg" for i in "abcd")
    (tmp_path / "gallery.csv").write_text("id,image\n" + "".join(f"{i},images/{i}.jpg\n" for i in "abcde"))
    qs = [
        {"id": "q1", "reference_id": "a", "text": "t", "targets": ["b", "c"]},
        {"id": "q2", "reference_id": "e", "text": "t", "targets": ["b"]},  # reference photo missing
        {"id": "q3", "reference_id": "b", "text": "t", "targets": ["e"]},
    ]  # its only target missing
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    ds = ComposedFolder(ComposedFolder.Config(root=str(tmp_path)))
    g = h.id_gallery(ds.gallery_items())
    queries = ds.queries()
    assert [q.id for q in queries] == ["q1"]
    m = ds.evaluate(h.candidates_from([["a", "b", "d", "c"]], g), queries, g)
    # reference a removed: b rank 1, c rank 3 -> AP@5 = (1 + 2/3) / 2
    assert m["mAP@5"] == pytest.approx(100 * (1 + 2 / 3) / 2) and m["R@1"] == 100.0
    note = ds.subset_note()
    assert "evaluated 1 of 3 queries (skipped: 1 no target image on disk, 1 reference image missing)" in note
    assert "gallery 4 of 5 images (1 missing on disk, skipped; e.g. e)" in note and "Reference excluded" in note
