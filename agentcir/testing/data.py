"""Tiny datasets on disk for method tests: real image files, a composed benchmark folder.

:func:`tiny_composed_dataset` writes a complete ``dataset=composed`` folder
(:mod:`agentcir.framework.datasets.composed`): ``colours x items`` small product-like images
(a coloured shape per item type on white), dataset captions ("a red shirt"), and queries that
change one attribute ("make it blue" on a red shirt, whose target is the blue shirt). It is
deterministic, so two runs over it give identical rankings, and small enough for a run in
seconds with the offline components::

    root = tiny_composed_dataset(tmp_path / "data")
    agentcir run method=my_method dataset=composed dataset.root=<root> run.root=<tmp>/runs
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Sequence

import numpy as np

COLOURS = {
    "red": (200, 30, 30),
    "blue": (30, 60, 200),
    "green": (30, 160, 60),
    "yellow": (230, 210, 40),
    "black": (20, 20, 20),
    "white": (235, 235, 235),
}
ITEMS = ("shirt", "dress", "shoe", "bag")


def make_image(path: str | Path, seed: int, size: int = 24) -> Path:
    """A ``size`` x ``size`` image of random pixels (seeded), written to ``path`` (JPEG/PNG by suffix)."""
    from PIL import Image

    path = Path(path)
    rng = np.random.default_rng(seed)
    arr = (rng.random((size, size, 3)) * 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


def make_item_image(path: str | Path, colour: Sequence[int], item: str, size: int = 48) -> Path:
    """A product-like photo: a coloured shape for ``item`` (one of :data:`ITEMS`) on white."""
    from PIL import Image, ImageDraw

    path = Path(path)
    im = Image.new("RGB", (size, size), (250, 250, 250))
    d = ImageDraw.Draw(im)
    s, c = size, tuple(int(x) for x in colour)
    if item == "shirt":
        d.rectangle([s * 0.25, s * 0.2, s * 0.75, s * 0.85], fill=c)
        d.rectangle([s * 0.08, s * 0.2, s * 0.92, s * 0.4], fill=c)
    elif item == "dress":
        d.polygon([(s * 0.4, s * 0.1), (s * 0.6, s * 0.1), (s * 0.85, s * 0.9), (s * 0.15, s * 0.9)], fill=c)
    elif item == "shoe":
        d.rectangle([s * 0.15, s * 0.55, s * 0.85, s * 0.75], fill=c)
        d.rectangle([s * 0.15, s * 0.35, s * 0.45, s * 0.6], fill=c)
    else:
        d.ellipse([s * 0.2, s * 0.35, s * 0.8, s * 0.85], fill=c)
        d.arc([s * 0.3, s * 0.15, s * 0.7, s * 0.55], 180, 360, fill=c, width=max(1, s // 16))
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path)
    return path


def tiny_composed_dataset(
    root: str | Path,
    *,
    colours: Sequence[str] = tuple(COLOURS),
    items: Sequence[str] = ITEMS,
    num_queries: int = 8,
    captions: bool = True,
) -> Path:
    """Write a composed-retrieval benchmark folder at ``root`` (see the module docstring); returns it.

    Args:
        root: the folder (created; files in it are overwritten).
        colours: colour names of :data:`COLOURS`.
        items: item types of :data:`ITEMS`.
        num_queries: queries written (each changes the colour of one item to the next colour).
        captions: write the ``caption`` column (dataset captions).
    """
    root = Path(root)
    bad = [c for c in colours if c not in COLOURS] + [i for i in items if i not in ITEMS]
    if bad or len(colours) < 2 or not items:
        raise ValueError(
            f"tiny_composed_dataset: colours must be >= 2 of {', '.join(COLOURS)} and items some of "
            f"{', '.join(ITEMS)}; bad: {', '.join(bad) or 'too few'}"
        )
    if num_queries < 1:
        raise ValueError(f"tiny_composed_dataset: num_queries must be at least 1, got {num_queries}")
    rows = []
    for c in colours:
        for it in items:
            iid = f"{c}_{it}"
            make_item_image(root / "images" / f"{iid}.png", COLOURS[c], it)
            rows.append(
                {"id": iid, "image": f"images/{iid}.png", "caption": f"a {c} {it}", "baseColour": c, "articleType": it}
            )
    root.mkdir(parents=True, exist_ok=True)
    fields = ["id", "image", *(["caption"] if captions else []), "baseColour", "articleType"]
    with open(root / "gallery.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(root / "queries.jsonl", "w", encoding="utf-8") as f:
        for n in range(num_queries):
            it = items[n % len(items)]
            src = colours[(n // len(items)) % len(colours)]
            dst = colours[(colours.index(src) + 1 + n // (len(items) * len(colours))) % len(colours)]
            if dst == src:
                dst = colours[(colours.index(src) + 1) % len(colours)]
            q = {
                "id": f"q{n:03d}",
                "reference_id": f"{src}_{it}",
                "text": f"make it {dst}",
                "targets": [f"{dst}_{it}"],
                "edit": {"kind": "colour", "from": src, "to": dst},
            }
            f.write(json.dumps(q) + "\n")
    return root
