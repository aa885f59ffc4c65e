"""captioner=transformers on a tiny randomly initialised BLIP saved with save_pretrained
(its processor and WordPiece tokenizer are built here from a 20-word vocabulary)."""

import pytest

from agentcir.framework.errors import InputError
from agentcir.registry import CAPTIONERS, ConfigError

pytest.importorskip("transformers", reason="captioner 'transformers' needs the [hf] extra")

WORDS = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "a",
    "photo",
    "of",
    "the",
    "shirt",
    "red",
    "blue",
    "dog",
    "cat",
    "on",
    "grass",
    "with",
    "and",
    "man",
    ".",
]

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def save_tiny_blip(folder, seed=0):
    import torch
    from transformers import BertTokenizer, BlipConfig, BlipForConditionalGeneration, BlipImageProcessor, BlipProcessor

    folder.mkdir(parents=True, exist_ok=True)
    vocab = folder / "vocab-src.txt"
    vocab.write_text("\n".join(WORDS) + "\n")
    processor = BlipProcessor(
        image_processor=BlipImageProcessor(size={"height": 32, "width": 32}), tokenizer=BertTokenizer(str(vocab))
    )
    cfg = BlipConfig(
        vision_config=dict(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        text_config=dict(
            vocab_size=len(WORDS),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=64,
            bos_token_id=2,
            eos_token_id=3,
            pad_token_id=0,
            sep_token_id=3,
        ),
        projection_dim=16,
    )
    torch.manual_seed(seed)
    BlipForConditionalGeneration(cfg).eval().save_pretrained(folder)
    processor.save_pretrained(folder)
    vocab.unlink()
    return folder


@pytest.fixture(scope="module")
def tiny_blip(tmp_path_factory):
    return save_tiny_blip(tmp_path_factory.mktemp("blip"))


def test_captions_with_a_tiny_blip(tiny_blip, images):
    cap = CAPTIONERS.build("transformers", {"model": str(tiny_blip), "max_new_tokens": 6})
    text = cap.caption(images["red_tshirt"])
    assert isinstance(text, str) and text and set(text.replace(".", " . ").split()) <= set(WORDS)
    assert cap.caption(images["red_tshirt"]) == text  # deterministic (greedy)
    many = cap.caption_many([images["red_tshirt"], images["yellow_dress"], images["green_shoes"]], batch_size=2)
    assert len(many) == 3 and many[0] == text


def test_conditional_prefix_and_strip(tiny_blip, images):
    cap = CAPTIONERS.build("transformers", {"model": str(tiny_blip), "max_new_tokens": 4, "text": "a photo of"})
    assert cap.caption(images["red_tshirt"]).startswith("a photo of")
    cap = CAPTIONERS.build(
        "transformers", {"model": str(tiny_blip), "max_new_tokens": 4, "text": "a photo of", "strip_text": True}
    )
    assert not cap.caption(images["red_tshirt"]).startswith("a photo of")


def test_identity_follows_the_weights(tiny_blip, tmp_path):
    a = CAPTIONERS.build("transformers", {"model": str(tiny_blip)})
    same = CAPTIONERS.build("transformers", {"model": str(tiny_blip), "batch_size": 2, "device": "cpu"})
    assert a.identity == same.identity  # speed settings are not part of it
    other = save_tiny_blip(tmp_path / "blip-seed1", seed=1)
    assert CAPTIONERS.build("transformers", {"model": str(other)}).identity != a.identity
    assert CAPTIONERS.build("transformers", {"model": str(tiny_blip), "max_new_tokens": 5}).identity != a.identity


def test_building_is_cheap_and_a_missing_model_is_named(tmp_path, images):
    cap = CAPTIONERS.build("transformers", {"model": str(tmp_path / "nowhere"), "local_files_only": True})
    with pytest.raises(InputError, match=r"captioner 'transformers': cannot load model '.*nowhere'"):
        cap.caption(images["red_tshirt"])
    with pytest.raises(ConfigError, match="field 'dtype': must be one of float32, float16, bfloat16, got 'int4'"):
        CAPTIONERS.build("transformers", {"model": str(tmp_path), "dtype": "int4"})
