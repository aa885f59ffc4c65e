"""Helpers for loader tests: placeholder image files named by real ids, id-only galleries,
and candidates built from id rankings (evaluation reads ids only, never pixels)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pytest

from agentcir.framework.gallery import Gallery, GalleryItem
from agentcir.framework.types import Candidates


def touch_all(paths: Iterable[Path]) -> int:
    """Create empty placeholder files (loaders check existence; nothing decodes them)."""
    n = 0
    made: set[Path] = set()
    for p in paths:
        if p.parent not in made:
            p.parent.mkdir(parents=True, exist_ok=True)
            made.add(p.parent)
        p.touch()
        n += 1
    return n


def id_gallery(items: Sequence[GalleryItem]) -> Gallery:
    """A gallery holding only ids and paths (what ``Dataset.evaluate`` reads)."""
    return Gallery(Path("."), {}, list(items))


def candidates_from(rankings: Sequence[Sequence[str]], gallery: Gallery) -> Candidates:
    """Candidates (gallery rows, -1 padded) from ranked ids."""
    k = max(len(r) for r in rankings)
    ids = np.full((len(rankings), k), -1, np.int32)
    row_of = gallery._index
    for q, r in enumerate(rankings):
        rows = [row_of.get(x, -1) for x in r]
        assert min(rows) >= 0, "ranking names an id absent from the gallery"
        ids[q, : len(rows)] = rows
    scores = np.where(ids >= 0, -np.arange(k, dtype=np.float32)[None, :], -np.inf).astype(np.float32)
    return Candidates(ids, scores)


def random_rankings(ids: Sequence[str], n: int, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    ids = list(ids)
    return [[ids[i] for i in rng.permutation(len(ids))] for _ in range(n)]


@pytest.fixture
def annotations(shared_dir) -> Path:
    d = shared_dir / "data" / "annotations"
    if not d.is_dir():
        pytest.skip(f"no annotations in {d}")
    return d


@pytest.fixture
def h():
    """The helpers above, for test modules (conftest modules are not importable by name)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        touch_all=touch_all, id_gallery=id_gallery, candidates_from=candidates_from, random_rankings=random_rankings
    )


def make_release(
    root: Path,
    rows: Sequence[tuple[str, str, str]],
    *,
    dim: int = 8,
    archs=("ViT-B/32",),
    drop: Sequence[int] = (),
    seed: int = 0,
) -> Path:
    """A tiny OCTOPUS-style WebVid-CoVR release: ``annotation/webvid8m-covr_test.csv`` and
    ``preload/{img,ref_img,gen_img}_features/<arch>_webvidcovr_test.pkl`` torch-pickled as the authors
    did (plain ``pickle.dump`` of tensors; the ref file keeps only a 'last batch' of 2 names).
    ``rows`` are (reference, target, edit); rows in ``drop`` are in the CSV but not in the features."""
    import csv
    import pickle

    import torch

    (root / "annotation").mkdir(parents=True, exist_ok=True)
    with open(root / "annotation" / "webvid8m-covr_test.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["txt1", "txt2", "sim_txt", "pth1", "pth2", "edit", "scores"])
        for ref, tgt, edit in rows:
            w.writerow([f"caption of {ref}", f"caption of {tgt}", 0.5, ref, tgt, edit, "[]"])
    kept = [r for i, r in enumerate(rows) if i not in set(drop)]
    rng = np.random.default_rng(seed)
    vec = {}
    for ref, tgt, _ in kept:  # a target near its reference, so some queries are hits
        vec.setdefault(ref, rng.standard_normal(dim).astype(np.float16))
        vec.setdefault(tgt, (vec[ref] + 0.9 * rng.standard_normal(dim)).astype(np.float16))
    for a, arch in enumerate(archs):

        def t(vs):
            return torch.tensor(np.stack(vs)) + a

        files = {
            "img_features": {"index_features": t([vec[g] for _, g, _ in kept]), "index_names": [g for _, g, _ in kept]},
            "ref_img_features": {"ref_features": t([vec[r] for r, _, _ in kept]), "reference_names": [kept[-1][0]] * 2},
            "gen_img_features": {
                "gen_tar_features": t([rng.standard_normal(dim).astype(np.float16) for _ in kept]),
                "gen_reference_names": [r for r, _, _ in kept],
            },
        }
        for table, d in files.items():
            p = root / "preload" / table / f"{arch}_webvidcovr_test.pkl"
            p.parent.mkdir(parents=True, exist_ok=True)
            with open(p, "wb") as f:
                pickle.dump(d, f)
    caps = {
        "ref_captions": [f"caption of {r}" for r, _, _ in kept],
        "tar_captions": [f"caption of {t}" for _, t, _ in kept],
        "relative_captions": [e for _, _, e in kept],
        "target_names": [t for _, t, _ in kept],
        "reference_names": [r for r, _, _ in kept],
        "query_ids": [torch.tensor(i) for i in range(len(kept))],
        "gt_img_ids": [],
    }
    (root / "preload" / "image_captions").mkdir(parents=True, exist_ok=True)
    with open(root / "preload" / "image_captions" / "preload_image_captions.pkl", "wb") as f:
        pickle.dump(caps, f)
    return root
