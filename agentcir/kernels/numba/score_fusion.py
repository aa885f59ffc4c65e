"""fuse_scores, numba: weighted sum of per-list normalised scores, per query in parallel.

Dense matrices ``[V, Q, N]``: a float64 accumulator of N per query. Scored id lists:
the sorted keys of :func:`.rank_fusion.sorted_list_keys` (first occurrence per list
counts), normalisation statistics per list over those entries, absent items contribute 0.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._common import dual, heap_push
from .rank_fusion import INT64_MAX, _emit, _out, sorted_list_keys

NORM_CODES = {"minmax": 0, "zscore": 1, "none": 2}


@njit(inline="always", cache=True)
def _apply(x, lo, hi, mean, sd, norm):
    if norm == 0:
        return (x - lo) / (hi - lo) if hi > lo else 1.0
    if norm == 1:
        return (x - mean) / sd if sd > 0 else 0.0
    return x


@dual()
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


@dual()
def _fuse_lists(keys, S, w, norm, k, out_s, out_i):
    V, Q, L = S.shape
    n = keys.shape[1]
    VL = np.int64(V) * L
    for q in prange(Q):
        m = 0
        while m < n and keys[q, m] != INT64_MAX:
            m += 1
        first = np.zeros(m, dtype=np.bool_)
        lo = np.full(V, np.inf)
        hi = np.full(V, -np.inf)
        tot = np.zeros(V)
        num = np.zeros(V)
        for j in range(m):
            if j == 0 or keys[q, j] // L != keys[q, j - 1] // L:  # first entry of an (item, list) pair
                first[j] = True
                v = (keys[q, j] % VL) // L
                x = np.float64(S[v, q, keys[q, j] % L])
                lo[v] = min(lo[v], x)
                hi[v] = max(hi[v], x)
                tot[v] += x
                num[v] += 1
        mean = tot / np.maximum(num, 1)
        var = np.zeros(V)
        for j in range(m):
            if first[j]:
                v = (keys[q, j] % VL) // L
                dx = np.float64(S[v, q, keys[q, j] % L]) - mean[v]
                var[v] += dx * dx
        sd = np.sqrt(var / np.maximum(num, 1))
        hs = np.full(k, -np.inf, dtype=np.float64)
        hi_ = np.full(k, -1, dtype=np.int32)
        cnt = 0
        j = 0
        while j < m:
            item = keys[q, j] // VL
            total = 0.0
            while j < m and keys[q, j] // VL == item:
                if first[j]:
                    v = (keys[q, j] % VL) // L
                    total += w[v] * _apply(np.float64(S[v, q, keys[q, j] % L]), lo[v], hi[v], mean[v], sd[v], norm)
                j += 1
            cnt = heap_push(hs, hi_, cnt, total, np.int32(item))
        _emit(hs, hi_, cnt, out_s[q], out_i[q])


def fuse_dense(scores: np.ndarray, k: int, weights: np.ndarray, norm: str):
    """See :func:`agentcir.kernels.fuse_scores` (dense ``[V, Q, N]``)."""
    out_s, out_i = _out(scores.shape[1], k)
    _fuse_dense(scores, weights, NORM_CODES[norm], k, out_s, out_i, work=scores.size)
    return out_s, out_i


def fuse_lists(ids: np.ndarray, scores: np.ndarray, k: int, weights: np.ndarray, norm: str):
    """See :func:`agentcir.kernels.fuse_scores` (scored id lists ``[V, Q, L]``)."""
    out_s, out_i = _out(ids.shape[1], k)
    _fuse_lists(sorted_list_keys(ids), scores, weights, NORM_CODES[norm], k, out_s, out_i, work=ids.size)
    return out_s, out_i
