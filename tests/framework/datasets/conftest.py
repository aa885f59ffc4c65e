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

    return SimpleNamespace(touch_all=touch_all, id_gallery=id_gallery, candidates_from=candidates_from,
                           random_rankings=random_rankings)
