"""Every annotation field is type-checked; an error names the file, the record,
the field, what was expected and what came (no bare TypeError, no silent "None" caption, no string
split into characters, no duplicate ids)."""

from __future__ import annotations

import json

import pytest

from agentcir.framework.datasets.circo import CIRCO
from agentcir.framework.datasets.cirr import CIRR
from agentcir.framework.datasets.composed import ComposedFolder
from agentcir.framework.errors import InputError


# -- CIRR --------------------------------------------------------------------------------------
def cirr_row(**kw):
    row = {
        "pairid": 1,
        "reference": "dev-0-img0",
        "target_hard": "dev-0-img1",
        "caption": "make it red",
        "img_set": {"id": 0, "members": ["dev-0-img0", "dev-0-img1"]},
        "target_soft": {"dev-0-img1": 1.0},
    }
    row.update(kw)
    return {k: v for k, v in row.items() if v != "DROP"}


def cirr(tmp_path, rows):
    (tmp_path / "captions").mkdir(parents=True, exist_ok=True)
    (tmp_path / "image_splits").mkdir(exist_ok=True)
    (tmp_path / "captions" / "cap.rc2.val.json").write_text(json.dumps(rows))
    names = {"dev-0-img0": "./dev/dev-0-img0.png", "dev-0-img1": "./dev/dev-0-img1.png"}
    (tmp_path / "image_splits" / "split.rc2.val.json").write_text(json.dumps(names))
    (tmp_path / "dev").mkdir(exist_ok=True)
    for rel in names.values():
        (tmp_path / rel).write_bytes(b"x")
    return CIRR(CIRR.Config(root=str(tmp_path)))


def test_cirr_good_record_loads(tmp_path):
    (q,) = cirr(tmp_path, [cirr_row()]).queries()
    assert q.id == "1" and q.text == "make it red" and q.meta["members"] == ["dev-0-img0", "dev-0-img1"]


@pytest.mark.parametrize(
    "change,msg",
    [
        ({"caption": None}, r"record 0 \(pairid 1\): field 'caption': expected a string, got null"),
        ({"caption": 5}, r"field 'caption': expected a string, got a number \(5\)"),
        (
            {"img_set": {"members": "dev-0-img0"}},
            r"record 0 \(pairid 1\) img_set: field 'members': expected a list of ids .*, got a string",
        ),
        (
            {"img_set": {"members": ["a", None]}},
            r"field 'members': expected a list of ids .*got a list of 2 holding null",
        ),
        ({"img_set": []}, r"field 'img_set': expected an object, got a list of 0"),
        ({"reference": ["x"]}, r"field 'reference': expected an id .*, got a list of 1"),
        ({"pairid": True}, r"record 0: field 'pairid': expected an id .*, got a boolean"),
        ({"caption": "DROP"}, r"record 0 \(pairid 1\): missing field 'caption'"),
        ({"target_soft": "x"}, r"field 'target_soft': expected an object"),
    ],
)
def test_cirr_wrong_fields_are_named(tmp_path, change, msg):
    with pytest.raises(InputError, match=msg) as e:
        cirr(tmp_path, [cirr_row(**change)]).queries()
    assert "cap.rc2.val.json" in str(e.value)


def test_cirr_duplicates_and_shapes(tmp_path):
    with pytest.raises(InputError, match=r"duplicate pairid '1' \(record 0 \(pairid 1\) and record 1 \(pairid 1\)\)"):
        cirr(tmp_path, [cirr_row(), cirr_row()]).queries()
    with pytest.raises(InputError, match=r"should hold a JSON list of records, got an object"):
        cirr(tmp_path, {"pairid": 1}).queries()
    with pytest.raises(InputError, match=r"record 1: expected a JSON object, got a string"):
        cirr(tmp_path, [cirr_row(), "oops"]).queries()


# -- CIRCO -------------------------------------------------------------------------------------
def circo(tmp_path, rows, images=None):
    ann = tmp_path / "annotations"
    ann.mkdir(parents=True, exist_ok=True)
    (ann / "val.json").write_text(json.dumps(rows))
    info = tmp_path / "COCO2017_unlabeled" / "annotations"
    info.mkdir(parents=True, exist_ok=True)
    images = images if images is not None else [{"id": 1, "file_name": "000000000001.jpg"}, {"id": 2}]
    (info / "image_info_unlabeled2017.json").write_text(json.dumps({"images": images}))
    folder = tmp_path / "COCO2017_unlabeled" / "unlabeled2017"
    folder.mkdir(exist_ok=True)
    for i in (1, 2):
        (folder / f"{i:012d}.jpg").write_bytes(b"x")
    return CIRCO(CIRCO.Config(root=str(tmp_path)))


def circo_row(**kw):
    row = {
        "id": 7,
        "reference_img_id": 1,
        "target_img_id": 2,
        "gt_img_ids": [2],
        "relative_caption": "is blue",
        "shared_concept": "a cup",
        "semantic_aspects": ["color"],
    }
    row.update(kw)
    return row


def test_circo_good_and_bad(tmp_path):
    (q,) = circo(tmp_path, [circo_row()]).queries()
    assert q.targets == ["2"] and q.meta["target_img_id"] == "2"
    for change, msg in [
        ({"relative_caption": None}, r"query 0 \(id 7\): field 'relative_caption': expected a string, got null"),
        ({"gt_img_ids": "2"}, r"field 'gt_img_ids': expected a list of ids .*, got a string \('2'\)"),
        ({"semantic_aspects": "color"}, r"field 'semantic_aspects': expected a list of strings, got a string"),
        ({"reference_img_id": 1.5}, r"field 'reference_img_id': expected an id"),
    ]:
        with pytest.raises(InputError, match=msg):
            circo(tmp_path, [circo_row(**change)]).queries()
    with pytest.raises(InputError, match=r"duplicate query id '7'"):
        circo(tmp_path, [circo_row(), circo_row()]).queries()
    with pytest.raises(InputError, match=r"image_info_unlabeled2017.json' images\[0\]: field 'id': expected an id"):
        circo(tmp_path, [circo_row()], images=[{"id": None}]).gallery_items()


# -- composed folders --------------------------------------------------------------------------
def composed(tmp_path, queries, gallery="id,image\na,a.png\nb,b.png\n"):
    (tmp_path / "gallery.csv").write_text(gallery)
    for n in ("a", "b"):
        (tmp_path / f"{n}.png").write_bytes(b"x")
    (tmp_path / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return ComposedFolder(ComposedFolder.Config(root=str(tmp_path)))


def test_composed_fields(tmp_path):
    good = {"id": "q1", "text": "make it red", "reference_id": "a", "targets": ["b"]}
    assert composed(tmp_path, [good]).queries()[0].targets == ["b"]
    for change, msg in [
        ({"text": None}, r"line 1 \(id q1\): field 'text': expected a string, got null"),
        ({"targets": "b"}, r"line 1 \(id q1\): field 'targets': expected a list of ids .*got a string \('b'\)"),
        ({"reference_id": None}, r"field 'reference_id': expected an id .*got null"),
        ({"id": ""}, r"line 1: field 'id': expected an id .*got an empty string"),
    ]:
        with pytest.raises(InputError, match=msg) as e:
            composed(tmp_path, [{**good, **change}]).queries()
        assert "queries.jsonl" in str(e.value)
    with pytest.raises(InputError, match=r"duplicate query id 'q1' \(line 1 \(id q1\) and line 2 \(id q1\)\)"):
        composed(tmp_path, [good, good]).queries()
    with pytest.raises(InputError, match=r"gallery.csv': duplicate gallery id 'a' \(line 2 and line 3\)"):
        composed(tmp_path, [good], gallery="id,image\na,a.png\na,b.png\n").gallery_items()
    with pytest.raises(InputError, match=r"gallery.csv' line 3: column 'image' is empty"):
        composed(tmp_path, [good], gallery="id,image\na,a.png\nb,\n").gallery_items()
