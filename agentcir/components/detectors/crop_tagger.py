"""``detector=crop_tagger``: the offline detector. Tags the whole image and a grid of crops
with the injected encoder against the objects/articles vocabularies.

Honest and limited: boxes are grid cells, not object outlines, and labels come only
from the vocabularies; a crop whose best label is unsure is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np

from ...framework.errors import InputError
from ...framework.images import load_rgb
from ...framework.interfaces import Detector
from ...registry import DETECTORS
from ...registry.config import bounded
from ..captioners.zeroshot import ZeroShot


def grid_boxes(width: int, height: int, grids: list[int], overlap: float) -> list[tuple[int, int, int, int]]:
    """Boxes ``(x0, y0, x1, y1)`` of a ``g x g`` grid for each ``g`` (1 = the whole image),
    each cell grown by ``overlap`` of its size on every side (clipped to the image)."""
    boxes: list[tuple[int, int, int, int]] = []
    for g in grids:
        cw, ch = width / g, height / g
        for r in range(g):
            for c in range(g):
                x0 = max(0.0, (c - overlap) * cw)
                y0 = max(0.0, (r - overlap) * ch)
                x1 = min(float(width), (c + 1 + overlap) * cw)
                y1 = min(float(height), (r + 1 + overlap) * ch)
                box = (int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1)))
                if box[2] > box[0] and box[3] > box[1] and box not in boxes:
                    boxes.append(box)
    return boxes


@DETECTORS.register("crop_tagger")
class CropTaggerDetector(Detector):
    """Zero-shot tags of crops -> labels with scores and boxes.

    The image and every cell of each ``g x g`` grid in ``grids`` are embedded in one
    batch and scored against the prompts of all terms of ``vocabularies`` together (one
    softmax). A crop votes for its top ``per_crop`` labels whose probability is at least
    ``min_prob``, with score ``probability x (crop area / image area) ** area_power``; a
    label's score is its best vote and its box that crop's. Labels are returned best
    first, at most ``max_objects``, and only those scoring at least ``min_score``. Without
    the area weight a confident small crop outranks the whole image: with the catalog
    encoder on the demo photos the top label is the article type 20% of the time at
    ``area_power`` 0, 40% at 1 (as the whole image alone), see
    benchmarks/offline_vision_quality.py. With the catalog encoder on product photos the low
    scores are mostly false positives: on 150 fashion-products val photos (one item each),
    303 of the 443 labels scored below 0.5 and 96% of those were not the photo's article type
    (other article types, COCO objects such as "donut" or "surfboard" on a t-shirt), against
    31% of the labels scoring 0.5 or more; hence ``min_score`` 0.5 (a 2x2-grid crop scores at
    most ~0.56: lower it to keep confident small objects with a stronger encoder).

    Config:
        vocabularies: vocabulary files whose terms are the labels.
        prompts: per-vocabulary zero-shot prompt overrides (``{}`` = the term).
        grids: grid sizes (1 = the whole image, 2 = 2x2 cells, ...).
        overlap: each cell grows by this fraction of its size on every side.
        per_crop: labels a crop may vote for.
        min_prob: minimum probability of a vote.
        area_power: how much a crop's vote is discounted by its size (0: not at all).
        max_objects: at most this many labels.
        min_score: labels scoring less are dropped.
        temperature: softmax temperature over cosine similarities.
        vocab_dir: folder of vocabulary files (empty: the bundled ones).
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder",)

    @dataclass
    class Config:
        vocabularies: list[str] = field(default_factory=lambda: ["articles", "objects"])
        prompts: dict[str, str] = field(default_factory=dict)
        grids: list[int] = bounded(lo=1, default_factory=lambda: [1, 2])
        overlap: float = bounded(0.25, 0.0, 1.0)
        per_crop: int = bounded(1, 1)
        min_prob: float = 0.3
        area_power: float = 1.0
        max_objects: int = 10
        min_score: float = 0.5
        temperature: float = bounded(0.01, 0, lo_open=True)
        vocab_dir: str = ""

    def __init__(self, cfg=None, **deps):
        super().__init__(cfg, **deps)
        c = self.cfg
        where = "detector 'crop_tagger'"
        if not c.vocabularies:
            raise InputError(f"{where}: field 'vocabularies' is empty")
        if not c.grids or any(g < 1 for g in c.grids):
            raise InputError(f"{where}: field 'grids' must list grid sizes >= 1, got {list(c.grids)}")
        if c.area_power < 0:
            raise InputError(f"{where}: field 'area_power' must be >= 0, got {c.area_power}")
        if not 0.0 <= c.overlap < 1.0:
            raise InputError(f"{where}: field 'overlap' must be in [0, 1), got {c.overlap}")
        self.zs = ZeroShot(
            self.encoder, vocab_dir=c.vocab_dir, prompts=c.prompts, temperature=c.temperature, where=where
        )
        for v in c.vocabularies:
            self.zs.vocabulary(v)

    def model_identity(self) -> str:
        return self.zs.identity()

    def detect(self, image: Path) -> list[dict]:
        c = self.cfg
        im = load_rgb(image)
        boxes = grid_boxes(im.width, im.height, list(c.grids), c.overlap)
        emb = self.zs.embed_images([im.crop(b) for b in boxes])
        ls, p = self.zs.probs(emb, *c.vocabularies)
        area = np.array([(b[2] - b[0]) * (b[3] - b[1]) for b in boxes], np.float64) / float(im.width * im.height)
        weight = area**c.area_power
        best: dict[str, tuple[float, tuple[int, int, int, int]]] = {}
        top = np.argsort(-p, axis=1, kind="stable")[:, : max(1, c.per_crop)]
        for i, row in enumerate(top):
            for j in row:
                prob = float(p[i, j])
                if prob < c.min_prob:
                    break
                label, score = ls.names[j], prob * float(weight[i])
                if label not in best or score > best[label][0]:
                    best[label] = (score, boxes[i])
        ranked = sorted(((lb, v) for lb, v in best.items() if v[0] >= c.min_score), key=lambda kv: -kv[1][0])
        ranked = ranked[: max(0, c.max_objects) or None]
        return [{"label": lb, "score": round(s, 6), "box": list(b)} for lb, (s, b) in ranked]
