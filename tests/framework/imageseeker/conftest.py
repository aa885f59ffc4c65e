"""Shared fixtures: a small labelled photo set, the DISBench-format benchmark built from it, and
an indexed gallery of it (toy encoder of the test plugin)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from agentcir.framework.datasets.history_builder import HistorySpec, build_history_benchmark

LABELS = ["Hat", "Shoes", "Dress", "Pants", "Shirt", "Skirt"]
COLOURS = {
    "Hat": (200, 30, 30),
    "Shoes": (30, 200, 30),
    "Dress": (30, 30, 200),
    "Pants": (200, 200, 30),
    "Shirt": (30, 200, 200),
    "Skirt": (200, 30, 200),
}


def make_labelled_set(folder: Path, users: int = 2, per_user: int = 30, seed: int = 0) -> Path:
    """``folder/images/*.jpg`` (a colour per label, plus noise) and ``folder/photos.csv``
    (image, sender_id, label)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for u in range(users):
        for i in range(per_user):
            label = LABELS[(i * 7 + u) % len(LABELS)]
            pid = f"u{u}p{i:02d}"
            arr = np.clip(np.array(COLOURS[label])[None, None] + rng.normal(0, 25, (16, 16, 3)), 0, 255).astype(
                np.uint8
            )
            Image.fromarray(arr).save(folder / "images" / f"{pid}.jpg")
            rows.append({"image": pid, "sender_id": f"user{u}", "label": label})
    with open(folder / "photos.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["image", "sender_id", "label"])
        w.writeheader()
        w.writerows(rows)
    return folder


@pytest.fixture(scope="session")
def labelled_set(tmp_path_factory) -> Path:
    return make_labelled_set(tmp_path_factory.mktemp("labelled"))


@pytest.fixture(scope="session")
def history_bench(labelled_set, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "history"
    build_history_benchmark(
        HistorySpec(
            out=str(out),
            csv_path=str(labelled_set / "photos.csv"),
            images_dir=str(labelled_set / "images"),
            min_photos=10,
            photos_per_event=5,
            queries_per_user=6,
            seed=3,
        )
    )
    return out


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def toy_encoder(plugin_path):
    from agentcir.registry import ENCODERS

    return ENCODERS.build("toy", {})


@pytest.fixture
def bench_gallery(history_bench, toy_encoder, tmp_path):
    """The benchmark's photos indexed (all users) with the toy encoder."""
    from agentcir.framework.datasets.disbench import DISBench
    from agentcir.framework.gallery import Gallery

    ds = DISBench(DISBench.Config(root=str(history_bench)))
    return Gallery.build(tmp_path / "gallery", ds.gallery_items(), toy_encoder, progress=False), ds


def toy_overrides(recipes: Path) -> list[str]:
    """Overrides selecting the test plugin's toy encoder from a user recipe folder holding
    ``encoder/toy.yaml``: ``encoder=toy`` when the default recipe names an encoder, else
    ``+encoder=toy`` (Hydra appends a group the defaults list lacks)."""
    from agentcir.framework.recipe import compose

    (recipes / "encoder").mkdir(parents=True, exist_ok=True)
    (recipes / "encoder" / "toy.yaml").write_text("name: toy\n")
    has_default = bool(compose([]).get("encoder"))
    return [("encoder=toy" if has_default else "+encoder=toy"), "--recipes", str(recipes)]


@pytest.fixture(scope="session")
def toy_recipes(tmp_path_factory) -> list[str]:
    """CLI arguments selecting the toy encoder (see :func:`toy_overrides`)."""
    return toy_overrides(tmp_path_factory.mktemp("recipes"))
