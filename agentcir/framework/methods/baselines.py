"""Embedding baselines: reference-image-only, text-only, image+text sum."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from ...registry import METHODS
from ..interfaces import l2_normalize
from ..method import Method, RunState, Stage
from ..runner import RunContext
from ..types import Candidates


async def reference_embeddings(ctx: RunContext, state: RunState, encoder) -> np.ndarray:
    """``[Q, d]`` embedding of each query's reference (the gallery row when the reference is a
    gallery item, else the encoded image; the mean over keyframes for a video)."""
    g = state.gallery
    out = np.zeros((len(state.queries), g.dim), np.float32)
    todo: list[tuple[int, list[str]]] = []
    for qi, q in enumerate(state.queries):
        row = g.index_of(q.reference_id) if q.reference_id else -1
        if row >= 0 and len(q.reference) <= 1:
            out[qi] = g.image_emb[row]
        elif q.reference:
            todo.append((qi, q.reference))
    if todo:
        paths = [Path(p) for _, refs in todo for p in refs]
        emb = await ctx.call(encoder, "encode_images", images=paths)
        if len(emb) != len(paths):
            raise ValueError(f"{len(paths) - len(emb)} reference image(s) could not be decoded")
        pos = 0
        for qi, refs in todo:
            out[qi] = l2_normalize(emb[pos:pos + len(refs)].mean(0))
            pos += len(refs)
    return out


def reference_rows(state: RunState) -> np.ndarray:
    """Gallery row of each query's reference item, -1 when it is not in the gallery."""
    g = state.gallery
    return np.array([g.index_of(q.reference_id) if q.reference_id else -1 for q in state.queries], np.int32)


def rank(scores: np.ndarray, k: int, exclude: np.ndarray | None = None) -> Candidates:
    """Top-k of dense ``[Q, N]`` scores with each query's ``exclude`` row removed."""
    scores = np.array(scores, dtype=np.float32, copy=True)
    if exclude is not None:
        q = np.nonzero(exclude >= 0)[0]
        scores[q, exclude[q]] = -np.inf
    cands = Candidates.from_scores(scores, k)
    cands.ids[~np.isfinite(cands.scores)] = -1
    return cands


class _Embedding(Method):
    requires: ClassVar[tuple[str, ...]] = ("encoder",)
    use_image: ClassVar[bool] = True
    use_text: ClassVar[bool] = True

    @dataclass
    class Config:
        top_k: int = 50
        image_weight: float = 0.5

    def stages(self) -> list[Stage]:
        return [Stage("embed", self._embed), Stage("retrieve", self._retrieve)]

    async def _embed(self, ctx: RunContext, state: RunState) -> None:
        if self.use_image:
            state.arrays["ref_emb"] = await reference_embeddings(ctx, state, self.encoder)
        if self.use_text:
            state.arrays["text_emb"] = await ctx.call(self.encoder, "encode_texts", texts=[q.text for q in state.queries])

    async def _retrieve(self, ctx: RunContext, state: RunState) -> None:
        w = self.cfg.image_weight if (self.use_image and self.use_text) else (1.0 if self.use_image else 0.0)
        q = np.zeros((len(state.queries), state.gallery.dim), np.float32)
        if self.use_image:
            q += w * state.arrays["ref_emb"]
        if self.use_text:
            q += (1 - w) * state.arrays["text_emb"]
        scores = l2_normalize(q) @ np.asarray(state.gallery.image_emb, np.float32).T
        state.candidates = rank(scores, self.top_k, reference_rows(state))


@METHODS.register("image_only")
class ImageOnly(_Embedding):
    """Baseline: rank by similarity to the reference image alone."""

    use_text = False


@METHODS.register("text_only")
class TextOnly(_Embedding):
    """Baseline: rank by similarity to the modification text alone."""

    use_image = False


@METHODS.register("image_text_sum")
class ImageTextSum(_Embedding):
    """Baseline: rank by the normalised weighted sum of reference-image and text embeddings."""
