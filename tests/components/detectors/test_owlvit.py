"""detector=owlvit on a tiny randomly initialised OWL-ViT saved with save_pretrained (its
processor and CLIP BPE tokenizer built here from a character vocabulary)."""

import json

import pytest

from agentcir.framework.errors import InputError
from agentcir.registry import DETECTORS

pytest.importorskip("transformers", reason="detector 'owlvit' needs the [hf] extra")
pytestmark = pytest.mark.usefixtures("torch_one_thread")


def save_tiny_owlvit(folder, seed=0):
    import torch
    from transformers import (
        CLIPTokenizer,
        OwlViTConfig,
        OwlViTForObjectDetection,
        OwlViTImageProcessor,
        OwlViTProcessor,
    )

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"!": 0, "<|startoftext|>": 1, "<|endoftext|>": 2}  # OWL-ViT masks queries whose first id is 0
    for c in "abcdefghijklmnopqrstuvwxyz-":
        vocab[c] = len(vocab)
        vocab[c + "</w>"] = len(vocab)
    (folder / "v.json").write_text(json.dumps(vocab))
    (folder / "m.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizer(str(folder / "v.json"), str(folder / "m.txt"), model_max_length=24)
    proc = OwlViTProcessor(
        image_processor=OwlViTImageProcessor(size={"height": 32, "width": 32}, crop_size={"height": 32, "width": 32}),
        tokenizer=tok,
    )
    cfg = OwlViTConfig(
        text_config=dict(
            vocab_size=len(vocab),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=24,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=2,
        ),
        vision_config=dict(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=16,
    )
    torch.manual_seed(seed)
    OwlViTForObjectDetection(cfg).eval().save_pretrained(folder)
    proc.save_pretrained(folder)
    (folder / "v.json").unlink()
    (folder / "m.txt").unlink()
    return folder


@pytest.fixture(scope="module")
def tiny_owl(tmp_path_factory):
    return save_tiny_owlvit(tmp_path_factory.mktemp("owl"))


def test_detects_with_explicit_labels(tiny_owl, images):
    det = DETECTORS.build(
        "owlvit",
        {
            "model": str(tiny_owl),
            "labels": ["dog", "cat", "shirt"],
            "threshold": 0.0,
            "best_per_label": False,
            "max_objects": 0,
        },
    )
    dets = det.detect(images["red_yellow"])
    assert len(dets) == 16  # every box of the 4x4 patch grid passes threshold 0
    assert {d["label"] for d in dets} <= {"dog", "cat", "shirt"}
    assert [d["score"] for d in dets] == sorted((d["score"] for d in dets), reverse=True)
    for d in dets:
        x0, y0, x1, y1 = d["box"]
        assert 0 <= x0 <= x1 <= 60 and 0 <= y0 <= y1 <= 60  # pixel boxes of the 60x60 image
    best = DETECTORS.build("owlvit", {"model": str(tiny_owl), "labels": ["dog", "cat", "shirt"], "threshold": 0.0})
    one_each = best.detect(images["red_yellow"])
    assert len(one_each) == len({d["label"] for d in one_each}) <= 3
    assert one_each[0] == dets[0]
    strict = DETECTORS.build("owlvit", {"model": str(tiny_owl), "labels": ["dog"], "threshold": 1.01})
    assert strict.detect(images["red_yellow"]) == []


def test_vocabulary_labels_and_identity(tiny_owl, images, tmp_path):
    det = DETECTORS.build(
        "owlvit",
        {
            "model": str(tiny_owl),
            "vocabularies": ["colours"],
            "threshold": 0.0,
            "best_per_label": False,
            "max_objects": 3,
        },
    )
    assert len(det.labels) > 40 and "navy blue" in det.labels
    dets = det.detect(images["red_tshirt"])
    assert len(dets) == 3 and all(d["label"] in det.labels for d in dets)
    base = DETECTORS.build("owlvit", {"model": str(tiny_owl)})
    assert DETECTORS.build("owlvit", {"model": str(tiny_owl), "labels": ["dog"]}).identity != base.identity
    other = save_tiny_owlvit(tmp_path / "owl2", seed=1)
    assert DETECTORS.build("owlvit", {"model": str(other)}).identity != base.identity


def test_bad_config(tmp_path, images):
    with pytest.raises(InputError, match="exactly one '\\{\\}'"):
        DETECTORS.build("owlvit", {"query_prompt": "a photo"})
    with pytest.raises(InputError, match="no labels to look for"):
        DETECTORS.build("owlvit", {"labels": [], "vocabularies": []})
    det = DETECTORS.build("owlvit", {"model": str(tmp_path / "absent"), "local_files_only": True})
    with pytest.raises(InputError, match="detector 'owlvit': cannot load model"):
        det.detect(images["red_tshirt"])
