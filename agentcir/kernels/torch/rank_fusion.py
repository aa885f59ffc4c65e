"""rrf, torch: reciprocal rank fusion of id lists (sorted grouping) or dense score matrices (stable ranks)."""

from __future__ import annotations

import numpy as np
import torch

from ._common import to_t, topk_sorted_f64
from ._lists import ListEntries


def rrf_lists(ids: np.ndarray, k: int, z: float, weights: np.ndarray):
    """See :func:`agentcir.kernels.rrf` (integer rank lists)."""
    e = ListEntries(to_t(ids))
    w = to_t(weights)
    return e.topk(e.sum_per_pair(w[e.v] / (z + e.pos.double() + 1.0)), k, first_appearance=True)


def rrf_scores(scores: np.ndarray, k: int, z: float, weights: np.ndarray):
    """See :func:`agentcir.kernels.rrf` (dense score matrices)."""
    S = to_t(scores)
    V, Q, N = S.shape
    order = torch.sort(S, dim=-1, descending=True, stable=True).indices
    ranks = torch.empty_like(order)
    ranks.scatter_(-1, order, torch.arange(1, N + 1).expand(V, Q, N).contiguous())
    contrib = to_t(weights)[:, None, None] / (z + ranks.double())
    fused = contrib[0].clone()
    for v in range(1, V):  # list order, as the reference sums
        fused += contrib[v]
    s, pos = topk_sorted_f64(fused.gather(-1, order[0]), k)  # columns in list-0 order: ties keep it
    return s, torch.where(pos >= 0, order[0].gather(-1, pos.clamp_min(0).long()), -1).to(torch.int32)
