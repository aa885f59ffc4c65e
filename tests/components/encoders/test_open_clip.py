"""The open_clip backend on a tiny random architecture built here.

Skipped without open_clip, except where ``AGENTCIR_REQUIRE_OPEN_CLIP=1`` (``make test-clip``, which
``make test`` runs in its own virtual environment, ``.venv-clip``: installing the torchvision that
open_clip needs beside transformers breaks ``import transformers``)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from agentcir.framework.errors import InputError, MissingExtraError
from agentcir.registry import ENCODERS

from .conftest import DEMO

TINY = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture(scope="module")
def open_clip():
    from agentcir.components.encoders.open_clip import import_open_clip

    try:
        return import_open_clip()
    except MissingExtraError as e:
        if os.environ.get("AGENTCIR_REQUIRE_OPEN_CLIP") == "1":
            raise
        pytest.skip(
            f"open_clip is not importable here ({e}); install: pip install open_clip_torch torchvision==<match torch>"
        )


@pytest.fixture(scope="module")
def tiny(open_clip, tmp_path_factory):
    """A tiny random architecture saved as a config file, and two checkpoints with different weights."""
    import torch

    root = tmp_path_factory.mktemp("open_clip")
    cfg = root / "tiny-clip.json"
    cfg.write_text(json.dumps(TINY))
    open_clip.add_model_config(str(cfg))
    ckpts = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        torch.save(open_clip.create_model("tiny-clip").state_dict(), root / f"w{seed}.pt")
        ckpts.append(root / f"w{seed}.pt")
    return cfg, ckpts


def build(cfg, ckpt, **kw):
    return ENCODERS.build("open_clip", {"model": "tiny-clip", "model_config": str(cfg), "pretrained": str(ckpt), **kw})


def test_shapes_normalisation_and_identity(tiny):
    cfg, (w0, w1) = tiny
    enc = build(cfg, w0)
    photos = sorted((DEMO / "images").glob("*.jpg"))[:5]
    img = enc.encode_images(photos, batch_size=2)
    txt = enc.encode_texts(["a photo of a red shirt", "a blue watch", "x"])
    assert img.shape == (5, 16) and txt.shape == (3, 16) and enc.dim == 16
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(txt, axis=1), 1, atol=1e-5)
    assert not np.allclose(txt[0], txt[1])
    other = build(cfg, w1)
    assert other.identity != enc.identity and build(cfg, w0, batch_size=7).identity == enc.identity
    assert not np.allclose(other.encode_images(photos[:1]), img[:1])
    # the model really loaded the checkpoint: same numbers as open_clip's own pipeline
    import open_clip
    import torch
    from PIL import Image

    model, _, pre = open_clip.create_model_and_transforms("tiny-clip", pretrained=str(w0))
    with torch.no_grad():
        ref = torch.nn.functional.normalize(model.encode_image(pre(Image.open(photos[0]).convert("RGB"))[None]), dim=-1)
    np.testing.assert_allclose(img[:1], ref.numpy(), atol=1e-5)


def test_bad_settings_are_named(tiny, tmp_path):
    cfg, (w0, _) = tiny
    with pytest.raises(
        InputError, match="set encoder.pretrained to a local checkpoint file or an open_clip pretrained tag"
    ):
        ENCODERS.build("open_clip", {}).encode_texts(["x"])
    with pytest.raises(InputError, match=r"checkpoint '.*missing.pt' not found"):
        build(cfg, tmp_path / "missing.pt").encode_texts(["x"])
    with pytest.raises(InputError, match="unknown architecture 'No-Such-Arch'"):
        ENCODERS.build("open_clip", {"model": "No-Such-Arch", "pretrained": str(w0)}).encode_texts(["x"])
    assert "tag:laion2b_s34b_b79k" in ENCODERS.build("open_clip", {"pretrained": "laion2b_s34b_b79k"}).model_identity()
