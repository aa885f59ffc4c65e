"""detector=vlm (object listing parsed from the reply) and detector=crop_tagger (offline)."""

import pytest

from agentcir.components.detectors.crop_tagger import grid_boxes
from agentcir.components.detectors.vlm import parse_objects
from agentcir.components.verifiers.answers import ReplyError
from agentcir.framework.errors import InputError
from agentcir.registry import DETECTORS


@pytest.mark.parametrize("reply,expected", [
    ('{"objects": ["red shirt", "Dog", "the wooden table"]}', ["red shirt", "dog", "wooden table"]),
    ('Sure! ```json\n{"objects": ["cat", "sofa"]}\n``` Hope this helps.', ["cat", "sofa"]),
    ("Here you go: {'objects': ['cat', 'a sofa', 'cat']}", ["cat", "sofa"]),
    ('["shoe", "sock"]', ["shoe", "sock"]),
    ('{"objects": [{"label": "bag"}, {"name": "hat"}, 3]}', ["bag", "hat"]),
    ("Objects:\n- red scarf\n- a wooden table\n2. lamp", ["red scarf", "wooden table", "lamp"]),
    ("cat, dog and bird.", ["cat", "dog", "bird"]),
    ('{"objects": []}', []),
])
def test_parse_objects(reply, expected):
    assert parse_objects(reply) == expected


@pytest.mark.parametrize("reply", ["", "I can see a person who is standing in front of a large building at night",
                                   '{"objects": ["a", ', '{"caption": "no list"}'])
def test_parse_objects_refuses_what_is_not_a_list(reply):
    with pytest.raises(ReplyError, match="cannot read a list of objects from the reply"):
        parse_objects(reply)


def test_vlm_detector_lists_objects(scripted, images):
    llm = scripted(['{"objects": ["t-shirt", "hanger", "wall"]}'])
    det = DETECTORS.build("vlm", {"max_objects": 2}, llm=llm)
    assert det.detect(images["red_tshirt"]) == [{"label": "t-shirt", "score": 1.0, "box": None},
                                                {"label": "hanger", "score": 1.0, "box": None}]
    call = llm.calls[0]
    assert call["images"] == [str(images["red_tshirt"])] and call["json_mode"] is True
    assert '{"objects": ["...", "..."]}' in call["text"]


# -- crop_tagger ---------------------------------------------------------------------------------
def test_grid_boxes():
    assert grid_boxes(60, 40, [1], 0.0) == [(0, 0, 60, 40)]
    assert grid_boxes(60, 40, [2], 0.0) == [(0, 0, 30, 20), (30, 0, 60, 20), (0, 20, 30, 40), (30, 20, 60, 40)]
    grown = grid_boxes(60, 40, [2], 0.5)
    assert grown[0] == (0, 0, 45, 30) and grown[3] == (15, 10, 60, 40)
    assert len(grid_boxes(60, 40, [1, 2, 3], 0.25)) == 1 + 4 + 9


def test_crop_tagger_finds_objects_and_where_they_are(word_encoder, images):
    # left half red (-> "apple" for the word encoder), right half yellow (-> "banana"); the
    # whole image averages to orange (-> "orange")
    det = DETECTORS.build("crop_tagger", {"vocabularies": ["objects"], "grids": [1, 2], "overlap": 0.0},
                          encoder=word_encoder)
    found = {d["label"]: d for d in det.detect(images["red_yellow"])}
    assert set(found) == {"apple", "banana", "orange"}
    assert found["orange"]["box"] == [0, 0, 60, 60]
    assert found["apple"]["box"][2] <= 30 and found["banana"]["box"][0] >= 30
    assert all(0.3 <= d["score"] <= 1.0 for d in found.values())
    assert word_encoder.image_calls == 5  # the whole image and 4 crops, in one batch


def test_crop_tagger_thresholds_and_limits(word_encoder, images):
    det = DETECTORS.build("crop_tagger", {"vocabularies": ["objects"], "grids": [1, 2], "max_objects": 1},
                          encoder=word_encoder)
    assert len(det.detect(images["red_yellow"])) == 1
    # a high temperature flattens the probabilities below min_prob: nothing is sure enough
    det = DETECTORS.build("crop_tagger", {"vocabularies": ["objects"], "temperature": 5.0}, encoder=word_encoder)
    assert det.detect(images["red_yellow"]) == []


def test_crop_tagger_default_vocabularies_and_any_encoder(word_encoder, toy_encoder, images):
    dets = DETECTORS.build("crop_tagger", {}, encoder=word_encoder).detect(images["yellow_dress"])
    assert {"dress", "banana"} & {d["label"] for d in dets}
    for d in DETECTORS.build("crop_tagger", {}, encoder=toy_encoder).detect(images["red_tshirt"]):
        assert set(d) == {"label", "score", "box"} and len(d["box"]) == 4


def test_crop_tagger_bad_config(word_encoder):
    with pytest.raises(InputError, match=r"field 'grids' must list grid sizes >= 1, got \[0\]"):
        DETECTORS.build("crop_tagger", {"grids": [0]}, encoder=word_encoder)
    with pytest.raises(InputError, match=r"field 'overlap' must be in \[0, 1\)"):
        DETECTORS.build("crop_tagger", {"overlap": 1.0}, encoder=word_encoder)
    with pytest.raises(InputError, match="vocabulary 'things' not found"):
        DETECTORS.build("crop_tagger", {"vocabularies": ["things"]}, encoder=word_encoder)
