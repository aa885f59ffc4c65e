"""fuse_scores, numba: weighted sum of per-list normalised scores, per query in parallel.

Dense matrices ``[V, Q, N]``: a float64 accumulator of N per query. Scored id lists:
the same sorted-key grouping as :mod:`.rank_fusion` (first occurrence per list counts),
normalisation statistics per list over those entries, absent items contribute 0.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._common import heap_push
from .rank_fusion import _emit, _out

NORM_CODES = {"minmax": 0, "zscore": 1, "none": 2}


@njit(inline="always", cache=True)
def _apply(x, lo, hi, mean, sd, norm):
    if norm == 0:
        return (x - lo) / (hi - lo) if hi > lo else 1.0
    if norm == 1:
        return (x - mean) / sd if sd > 0 else 0.0
    return x


@njit(parallel=True, cache=True)
def _fuse_dense(S, w, norm, k, out_s, out_i):
    V, Q, N = S.shape
    for q in prange(Q):
        acc = np.zeros(N, dtype=np.float64)
        for v in range(V):
            lo = np.inf
            hi = -np.inf
            tot = 0.0
            for i in range(N):
                x = np.float64(S[v, q, i])
                lo = min(lo, x)
                hi = max(hi, x)
                tot += x
            mean = tot / N
            var = 0.0
            for i in range(N):
                dx = np.float64(S[v, q, i]) - mean
                var += dx * dx
            sd = np.sqrt(var / N)
            for i in range(N):
                acc[i] += w[v] * _apply(np.float64(S[v, q, i]), lo, hi, mean, sd, norm)
        hs = np.full(k, -np.inf, dtype=np.float64)
        hi_ = np.full(k, -1, dtype=np.int32)
        cnt = 0
        for i in range(N):
            cnt = heap_push(hs, hi_, cnt, acc[i], np.int32(i))
        _emit(hs, hi_, cnt, out_s[q], out_i[q])


@njit(parallel=True, cache=True)
def _fuse_lists(ids, S, w, norm, k, out_s, out_i):
    V, Q, L = ids.shape
    VL = np.int64(V) * L
    for q in prange(Q):
        keys = np.empty(V * L, dtype=np.int64)
        n = 0
        for v in range(V):
            for p in range(L):
                item = ids[v, q, p]
                if item >= 0:
                    keys[n] = np.int64(item) * VL + v * L + p
                    n += 1
        keys = np.sort(keys[:n])
        first = np.zeros(n, dtype=np.bool_)
        lo = np.full(V, np.inf)
        hi = np.full(V, -np.inf)
        tot = np.zeros(V)
        num = np.zeros(V)
        for j in range(n):
            if j == 0 or keys[j] // L != keys[j - 1] // L:  # new (item, list) pair
                first[j] = True
                v = (keys[j] % VL) // L
                x = np.float64(S[v, q, keys[j] % L])
                lo[v] = min(lo[v], x)
                hi[v] = max(hi[v], x)
                tot[v] += x
                num[v] += 1
        mean = tot / np.maximum(num, 1)
        var = np.zeros(V)
        for j in range(n):
            if first[j]:
                v = (keys[j] % VL) // L
                dx = np.float64(S[v, q, keys[j] % L]) - mean[v]
                var[v] += dx * dx
        sd = np.sqrt(var / np.maximum(num, 1))
        hs = np.full(k, -np.inf, dtype=np.float64)
        hi_ = np.full(k, -1, dtype=np.int32)
        cnt = 0
        j = 0
        while j < n:
            item = keys[j] // VL
            total = 0.0
            while j < n and keys[j] // VL == item:
                if first[j]:
                    v = (keys[j] % VL) // L
                    total += w[v] * _apply(np.float64(S[v, q, keys[j] % L]), lo[v], hi[v], mean[v], sd[v], norm)
                j += 1
            cnt = heap_push(hs, hi_, cnt, total, np.int32(item))
        _emit(hs, hi_, cnt, out_s[q], out_i[q])


def fuse_dense(scores: np.ndarray, k: int, weights: np.ndarray, norm: str):
    """See :func:`agentcir.kernels.fuse_scores` (dense ``[V, Q, N]``)."""
    out_s, out_i = _out(scores.shape[1], k)
    _fuse_dense(scores, weights, NORM_CODES[norm], k, out_s, out_i)
    return out_s, out_i


def fuse_lists(ids: np.ndarray, scores: np.ndarray, k: int, weights: np.ndarray, norm: str):
    """See :func:`agentcir.kernels.fuse_scores` (scored id lists ``[V, Q, L]``)."""
    out_s, out_i = _out(ids.shape[1], k)
    _fuse_lists(ids, scores, weights, NORM_CODES[norm], k, out_s, out_i)
    return out_s, out_i
