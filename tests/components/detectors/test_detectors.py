"""detector=vlm (object listing parsed from the reply) and detector=crop_tagger (offline)."""

import pytest

from agentcir.components.detectors.crop_tagger import grid_boxes
from agentcir.components.detectors.vlm import normalize_labels
from agentcir.framework.parsing import ReplyParseError
from agentcir.framework.errors import InputError
from agentcir.registry import DETECTORS, ConfigError


@pytest.mark.parametrize(
    "reply,expected",
    [
        ('{"objects": ["red shirt", "Dog", "the wooden table"]}', ["red shirt", "dog", "wooden table"]),
        ('Sure! ```json\n{"objects": ["cat", "sofa"]}\n``` Hope this helps.', ["cat", "sofa"]),
        ("Here you go: {'objects': ['cat', 'a sofa', 'cat']}", ["cat", "sofa"]),
        ('["shoe", "sock"]', ["shoe", "sock"]),
        ('{"objects": []}', []),
    ],
)
def test_vlm_detector_reads_the_reply(scripted, images, reply, expected):
    det = DETECTORS.build("vlm", {}, llm=scripted([reply]))
    assert [d["label"] for d in det.detect(images["red_tshirt"])] == expected


@pytest.mark.parametrize("reply", ["", "I can see a person standing in front of a building", '{"objects": ["a", '])
def test_vlm_detector_refuses_what_is_not_a_list(scripted, images, reply):
    det = DETECTORS.build("vlm", {}, llm=scripted([reply]))
    with pytest.raises(ReplyParseError, match="list_objects"):
        det.detect(images["red_tshirt"])


def test_normalize_labels():
    assert normalize_labels(["The Red Scarf.", "a  lamp", "lamp", " ", "an owl"]) == ["red scarf", "lamp", "owl"]


def test_vlm_detector_lists_objects(scripted, images):
    llm = scripted(['{"objects": ["t-shirt", "hanger", "wall"]}'])
    det = DETECTORS.build("vlm", {"max_objects": 2}, llm=llm)
    assert det.detect(images["red_tshirt"]) == [
        {"label": "t-shirt", "score": 1.0, "box": None},
        {"label": "hanger", "score": 1.0, "box": None},
    ]
    call = llm.calls[0]
    assert call["images"] == [str(images["red_tshirt"])] and call["json_mode"] is True
    assert '{"objects": ["<object>", "<object>"]}' in call["text"]  # recipes/prompts/tasks/list_objects.txt


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
    det = DETECTORS.build(
        "crop_tagger",
        {"vocabularies": ["objects"], "grids": [1, 2], "overlap": 0.0, "min_score": 0.0},
        encoder=word_encoder,
    )
    found = {d["label"]: d for d in det.detect(images["red_yellow"])}
    assert word_encoder.image_calls == 5  # the whole image and 4 crops, in one batch
    assert set(found) == {"apple", "banana", "orange"}
    assert found["orange"]["box"] == [0, 0, 60, 60]
    assert found["apple"]["box"][2] <= 30 and found["banana"]["box"][0] >= 30
    # scores are probability x crop area fraction: the whole image first, its halves' quarter-crops after
    assert found["orange"]["score"] > 0.9 and 0.2 < found["apple"]["score"] < 0.3
    assert [d["label"] for d in det.detect(images["red_yellow"])][0] == "orange"
    unweighted = DETECTORS.build(
        "crop_tagger",
        {"vocabularies": ["objects"], "grids": [1, 2], "overlap": 0.0, "area_power": 0.0},
        encoder=word_encoder,
    )
    assert all(d["score"] > 0.9 for d in unweighted.detect(images["red_yellow"]))
    # the default min_score (0.5) drops the quarter-crop votes (score ~0.25): only the whole image is left
    default = DETECTORS.build(
        "crop_tagger", {"vocabularies": ["objects"], "grids": [1, 2], "overlap": 0.0}, encoder=word_encoder
    )
    assert [d["label"] for d in default.detect(images["red_yellow"])] == ["orange"]


def test_crop_tagger_thresholds_and_limits(word_encoder, images):
    det = DETECTORS.build(
        "crop_tagger", {"vocabularies": ["objects"], "grids": [1, 2], "max_objects": 1}, encoder=word_encoder
    )
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
    with pytest.raises(ConfigError, match=r"field 'grids\[0\]': must be at least 1, got 0"):
        DETECTORS.build("crop_tagger", {"grids": [0]}, encoder=word_encoder)
    with pytest.raises(ConfigError, match="field 'area_power': must be at least 0, got -1"):
        DETECTORS.build("crop_tagger", {"area_power": -1.0}, encoder=word_encoder)
    with pytest.raises(InputError, match=r"field 'overlap' must be in \[0, 1\)"):
        DETECTORS.build("crop_tagger", {"overlap": 1.0}, encoder=word_encoder)
    with pytest.raises(InputError, match="vocabulary 'things' not found"):
        DETECTORS.build("crop_tagger", {"vocabularies": ["things"]}, encoder=word_encoder)
