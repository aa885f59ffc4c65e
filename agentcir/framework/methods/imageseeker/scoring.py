"""The one scoring function of ImageSeeker: cosine top-k over a user's photos (plain numpy).

Kept in one small function so that the shared scoring core (``agentcir.kernels.cosine_topk``)
can replace it in one place.
"""

from __future__ import annotations

import numpy as np


def cosine_topk(
    query: np.ndarray, emb: np.ndarray, k: int, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` rows of ``emb`` [n, d] by dot product with the L2-normalised ``query`` [d]
    (rows where ``mask`` is false excluded); ties broken by the lower row. Returns (rows, scores)."""
    scores = np.asarray(emb, np.float32) @ np.asarray(query, np.float32)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    k = int(min(k, int(np.isfinite(scores).sum())))
    if k <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    order = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return order.astype(np.int64), scores[order].astype(np.float32)
