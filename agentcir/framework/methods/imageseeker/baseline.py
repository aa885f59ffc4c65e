"""``method=history_topk``: plain embedding retrieval over a photo history (the ImageSeeker baseline).

The question's text embedding against the image embeddings of the question's user's photos;
the answer is the top ``top_k`` (DeepImageSearch's "embedding-based retrieval" baseline,
which cannot use dates, places or other photos).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ....registry import METHODS
from ...method import Method, RunState, Stage
from ...runner import RunContext
from ...types import Candidates
from .scoring import cosine_topk


@METHODS.register("history_topk")
class HistoryTopK(Method):
    """Baseline: the top ``top_k`` of the user's photos by text-image similarity.

    Config:
        top_k: photos answered per question.
        prefix: text put before the question (e.g. ``"a photo of "``; empty = the question as is).
    """

    requires: ClassVar[tuple[str, ...]] = ("encoder",)
    needs_reference: ClassVar[bool] = False

    @dataclass
    class Config:
        top_k: int = 10
        prefix: str = ""

    def stages(self) -> list[Stage]:
        return [Stage("retrieve", self._retrieve)]

    async def _retrieve(self, ctx: RunContext, state: RunState) -> None:
        g = state.gallery
        texts = [self.cfg.prefix + q.text for q in state.queries]
        emb = np.asarray(await ctx.call(self.encoder, "encode_texts", texts=texts), np.float32)
        users = np.array([str(it.meta.get("user")) for it in g.items])
        k = max(1, self.cfg.top_k)
        ids = np.full((len(texts), k), -1, np.int32)
        scores = np.full((len(texts), k), -np.inf, np.float32)
        for qi, q in enumerate(state.queries):
            mask = None if q.user is None else users == str(q.user)
            rows, s = cosine_topk(emb[qi], g.image_emb, k, mask)
            ids[qi, : len(rows)], scores[qi, : len(rows)] = rows, s
        state.candidates = Candidates(ids, scores)
