"""The transformers backend on tiny randomly initialised CLIP and SigLIP models built here."""

from __future__ import annotations

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.registry import ENCODERS, ConfigError

from .conftest import DEMO, make_hf_model

pytest.importorskip("transformers", reason="needs the hf extra: pip install 'agentcir[hf]'")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {k: make_hf_model(root / k, k) for k in ("clip", "siglip")}


@pytest.mark.parametrize("kind,dim", [("clip", 16), ("siglip", 32)])
def test_shapes_normalisation_and_identity(models, kind, dim, tmp_path):
    enc = ENCODERS.build("hf_clip", {"path": str(models[kind])})
    photos = sorted((DEMO / "images").glob("*.jpg"))[:5]
    img = enc.encode_images(photos, batch_size=2)
    txt = enc.encode_texts(["a photo of a red shirt", "blue watch", "zebra"])
    assert img.shape == (5, dim) and txt.shape == (3, dim) and enc.dim == dim
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(txt, axis=1), 1, atol=1e-5)
    assert not np.allclose(img[0], img[1]) and not np.allclose(txt[0], txt[1])
    # identity: same folder -> same; other weights -> different; batch size does not count
    assert ENCODERS.build("hf_clip", {"path": str(models[kind]), "batch_size": 3}).identity == enc.identity
    other = ENCODERS.build("hf_clip", {"path": str(make_hf_model(tmp_path / "other", kind, seed=1))})
    assert other.identity != enc.identity
    assert not np.allclose(other.encode_images(photos[:1]), img[:1])


def test_preprocessing_follows_the_model_folder(models):
    clip = ENCODERS.build("hf_clip", {"path": str(models["clip"])}).preprocess_spec
    assert clip["mode"] == "shortest" and clip["size"] == 32 and clip["crop"] == 32 and clip["resample"] == "bicubic"
    sig = ENCODERS.build("hf_clip", {"path": str(models["siglip"])}).preprocess_spec
    assert sig["mode"] == "stretch" and sig["mean"] == [0.5] * 3


def _clip_processor(folder):
    """transformers' own ``CLIPProcessor`` for a model folder: its PIL image processor (the
    reference implementation; ``CLIPImageProcessorPil`` where transformers names it so) and the
    folder's tokenizer."""
    import transformers as tr

    images = getattr(tr, "CLIPImageProcessorPil", None) or tr.CLIPImageProcessor
    return tr.CLIPProcessor(
        image_processor=images.from_pretrained(str(folder)), tokenizer=tr.AutoTokenizer.from_pretrained(str(folder))
    )


def _photos():
    """Demo photos (square) and random pictures of odd shapes (landscape, portrait, above and
    below the model's size), so resizing the shortest edge and centre-cropping are both exercised."""
    from PIL import Image

    from agentcir.framework.images import load_rgb

    rng = np.random.default_rng(0)
    odd = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in ((31, 50), (40, 17), (97, 64))]
    return [load_rgb(p) for p in sorted((DEMO / "images").glob("*.jpg"))[:2]] + odd


def test_preprocessing_equals_transformers_clip_processor(models):
    """The pixels agentcir feeds the model are those of transformers' CLIPProcessor."""
    from agentcir.components.encoders.common import preprocess

    enc = ENCODERS.build("hf_clip", {"path": str(models["clip"])})
    photos = _photos()
    want = _clip_processor(models["clip"])(images=photos, return_tensors="np")["pixel_values"]
    got = preprocess(photos, enc.preprocess_spec)
    assert got.shape == want.shape == (len(photos), 3, 32, 32)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_matches_transformers_own_pipeline(models):
    """Same embeddings as the model called on CLIPProcessor's tokens and pixels."""
    import torch
    import transformers as tr

    enc = ENCODERS.build("hf_clip", {"path": str(models["clip"])})
    model = tr.CLIPModel.from_pretrained(str(models["clip"])).eval()
    texts = ["a photo of a red shirt", "a dog"]
    photos = _photos()
    batch = _clip_processor(models["clip"])(text=texts, images=photos, padding=True, return_tensors="pt")
    with torch.no_grad():
        t = model.get_text_features(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        t = t if torch.is_tensor(t) else t.pooler_output
        i = model.get_image_features(pixel_values=batch["pixel_values"])
        i = i if torch.is_tensor(i) else i.pooler_output
    np.testing.assert_allclose(enc.encode_texts(texts), torch.nn.functional.normalize(t, dim=-1).numpy(), atol=1e-5)
    np.testing.assert_allclose(enc.encode_images(photos), torch.nn.functional.normalize(i, dim=-1).numpy(), atol=1e-5)


def test_bad_folders_are_named(tmp_path):
    enc = ENCODERS.build("hf_clip", {})  # building is cheap and needs no folder
    assert "no model folder" in enc.model_identity()
    with pytest.raises(InputError, match="set encoder.path to a local CLIP/SigLIP model folder"):
        enc.encode_texts(["x"])
    with pytest.raises(InputError, match=r"'.*empty' is not a transformers model folder \(no config.json\)"):
        (tmp_path / "empty").mkdir()
        ENCODERS.build("hf_clip", {"path": str(tmp_path / "empty")}).encode_texts(["x"])
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(InputError, match="holds a 'bert' model; supported: clip, siglip"):
        ENCODERS.build("hf_clip", {"path": str(tmp_path / "bert")}).encode_texts(["x"])
    with pytest.raises(ConfigError, match="field 'dtype': must be one of float32, float16, bfloat16, got 'int8'"):
        ENCODERS.build("hf_clip", {"path": str(tmp_path), "dtype": "int8"})
