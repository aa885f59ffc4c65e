"""CIRR and CIRCO submission files: built from rankings, validated against the official format."""

import json

import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.eval.submissions import (
    circo_submission,
    cirr_submission,
    validate_circo,
    validate_cirr,
    write_json,
)

GALLERY = [f"img{i}" for i in range(60)]


def _cirr_case():
    refs = {"1": "img0", "2": "img5"}
    members = {
        "1": ["img0", "img1", "img2", "img3", "img4", "img9"],
        "2": ["img5", "img6", "img7", "img8", "img10", "img11"],
    }
    rankings = {"1": list(GALLERY), "2": list(reversed(GALLERY))}
    return rankings, refs, members


def test_cirr_submission_removes_reference_and_keeps_top50_and_top3(tmp_path):
    rankings, refs, members = _cirr_case()
    recall, subset = cirr_submission(rankings, refs, members)
    assert recall["version"] == "rc2" and recall["metric"] == "recall"
    assert subset["version"] == "rc2" and subset["metric"] == "recall_subset"
    assert recall["1"] == GALLERY[1:51] and "img0" not in recall["1"]
    assert len(recall["2"]) == 50 and "img5" not in recall["2"]
    assert subset["1"] == ["img1", "img2", "img3"]
    assert subset["2"] == ["img11", "img10", "img8"]
    p = write_json(recall, tmp_path / "sub" / "recall.json")
    assert json.loads(p.read_text()) == recall


def test_cirr_submission_errors_name_the_query():
    rankings, refs, members = _cirr_case()
    with pytest.raises(InputError, match=r"CIRR: 1 query id\(s\) missing \(e.g. 2\)"):
        cirr_submission({"1": rankings["1"]}, refs, members)
    with pytest.raises(InputError, match="CIRR ranking of pairid 1 has duplicate prediction 'img1'"):
        cirr_submission({**rankings, "1": ["img1", "img1", *GALLERY]}, refs, members)
    with pytest.raises(InputError, match=r"pairid 1: 1 of its subset members are not in the ranking"):
        cirr_submission({**rankings, "1": [g for g in GALLERY if g != "img9"]}, refs, members)
    with pytest.raises(InputError, match="needs exactly 50 predictions, got 10"):
        cirr_submission({**rankings, "1": GALLERY[:11]}, refs, members)


def test_validate_cirr_rejects_bad_objects():
    rankings, refs, members = _cirr_case()
    recall, subset = cirr_submission(rankings, refs, members)
    with pytest.raises(InputError, match="'version' must be 'rc2'"):
        validate_cirr({**recall, "version": "rc1"}, refs)
    with pytest.raises(InputError, match="'metric' must be 'recall' or 'recall_subset'"):
        validate_cirr({**recall, "metric": "map"}, refs)
    with pytest.raises(InputError, match="the reference image 'img0' must be removed"):
        validate_cirr({**subset, "1": ["img0", "img1", "img2"]}, refs, members)
    with pytest.raises(InputError, match="'img40' is not a member of the query's image set"):
        validate_cirr({**subset, "1": ["img40", "img1", "img2"]}, refs, members)
    with pytest.raises(InputError, match=r"unknown query id\(s\) \(e.g. 3\)"):
        validate_cirr({**recall, "3": GALLERY[:50]}, refs)


def test_circo_submission_and_validation():
    ids = [str(1000 + i) for i in range(80)]
    sub = circo_submission({"0": ids, "1": ids[::-1]}, ["0", "1"])
    assert sub["0"] == [int(x) for x in ids[:50]] and len(sub["1"]) == 50
    with pytest.raises(InputError, match=r"CIRCO: 1 query id\(s\) missing \(e.g. 1\)"):
        circo_submission({"0": ids}, ["0", "1"])
    with pytest.raises(InputError, match="query 0: needs exactly 50 predictions, got 20"):
        circo_submission({"0": ids[:20], "1": ids}, ["0", "1"])
    with pytest.raises(InputError, match="query 0 has duplicate prediction '1000'"):
        validate_circo({"0": [1000] * 50, "1": list(range(50))}, ["0", "1"])
    with pytest.raises(InputError, match="image ids must be COCO integer ids"):
        circo_submission({"0": ["abc"] * 50, "1": ids}, ["0", "1"])
    with pytest.raises(InputError, match="must be a list of integer image ids"):
        validate_circo({"0": ["1"] * 50, "1": list(range(50))}, ["0", "1"])
