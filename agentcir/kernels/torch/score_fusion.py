"""fuse_scores, torch: weighted sum of per-list normalised scores (dense or scored id lists)."""

from __future__ import annotations

import numpy as np
import torch

from ._common import minmax, to_t, topk_sorted_f64
from ._lists import ListEntries


def _normalise(x: torch.Tensor, norm: str) -> torch.Tensor:
    if norm == "minmax":
        return minmax(x)
    if norm == "zscore":
        sd = x.std(dim=-1, unbiased=False, keepdim=True)
        return torch.where(
            sd > 0, (x - x.mean(dim=-1, keepdim=True)) / torch.where(sd > 0, sd, 1.0), torch.zeros_like(x)
        )
    return x


def fuse_dense(scores: np.ndarray, k: int, weights: np.ndarray, norm: str):
    """See :func:`agentcir.kernels.fuse_scores` (dense ``[V, Q, N]``)."""
    S = to_t(scores).double()
    normed = to_t(weights)[:, None, None] * _normalise(S, norm)
    fused = normed[0].clone()
    for v in range(1, S.shape[0]):
        fused += normed[v]
    return topk_sorted_f64(fused, k)


def fuse_lists(ids: np.ndarray, scores: np.ndarray, k: int, weights: np.ndarray, norm: str):
    """See :func:`agentcir.kernels.fuse_scores` (scored id lists ``[V, Q, L]``)."""
    e = ListEntries(to_t(ids))
    S = to_t(scores).double()
    V, Q, L = S.shape
    x = S[e.v, e.pair_q[e.group], e.pos]
    seg = e.v * Q + e.pair_q[e.group]  # one statistics segment per (list, query)
    f = e.first
    n = torch.zeros(V * Q, dtype=torch.float64).index_add_(0, seg[f], torch.ones_like(x[f]))
    if norm == "minmax":
        lo = torch.full((V * Q,), float("inf"), dtype=torch.float64).scatter_reduce(0, seg[f], x[f], "amin")
        hi = torch.full((V * Q,), float("-inf"), dtype=torch.float64).scatter_reduce(0, seg[f], x[f], "amax")
        span = (hi - lo)[seg]
        y = torch.where(span > 0, (x - lo[seg]) / torch.where(span > 0, span, 1.0), torch.ones_like(x))
    elif norm == "zscore":
        mean = torch.zeros(V * Q, dtype=torch.float64).index_add_(0, seg[f], x[f]) / n.clamp_min(1)
        var = torch.zeros(V * Q, dtype=torch.float64).index_add_(0, seg[f], (x[f] - mean[seg[f]]) ** 2) / n.clamp_min(1)
        sd = var.sqrt()[seg]
        y = torch.where(sd > 0, (x - mean[seg]) / torch.where(sd > 0, sd, 1.0), torch.zeros_like(x))
    else:
        y = x
    return e.topk(e.sum_per_pair(to_t(weights)[e.v] * y), k)
