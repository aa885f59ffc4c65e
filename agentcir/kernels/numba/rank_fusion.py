"""rrf, numba: reciprocal rank fusion of id lists or dense score matrices, per query in parallel.

Id lists: the valid ``(id, list, position)`` triples of a query are sorted by one int64
key, so each item's entries are adjacent (list order, then position: the first
occurrence in a list comes first); the item's fused score is summed in list order
(float64, the reference's order) and offered to a float64 heap.
Score matrices: each row is ranked by a stable argsort of ``-score`` (ties: lower id).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._common import heap_push, heap_to_sorted


@njit(inline="always", cache=True)
def _emit(hs, hi, n, out_s, out_i):
    tmp = np.empty(hs.shape[0], dtype=np.float64)
    heap_to_sorted(hs, hi, n, tmp, out_i)
    for j in range(tmp.shape[0]):
        out_s[j] = tmp[j]


@njit(parallel=True, cache=True)
def _rrf_lists(ids, z, w, k, out_s, out_i):
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
        hs = np.full(k, -np.inf, dtype=np.float64)
        hi = np.full(k, -1, dtype=np.int32)
        cnt = 0
        j = 0
        while j < n:
            item = keys[j] // VL
            total = 0.0
            last_v = -1
            while j < n and keys[j] // VL == item:
                v = (keys[j] % VL) // L
                if v != last_v:
                    total += w[v] / (z + (keys[j] % L) + 1)
                    last_v = v
                j += 1
            cnt = heap_push(hs, hi, cnt, total, np.int32(item))
        _emit(hs, hi, cnt, out_s[q], out_i[q])


@njit(parallel=True, cache=True)
def _rrf_scores(S, z, w, k, out_s, out_i):
    V, Q, N = S.shape
    for q in prange(Q):
        acc = np.zeros(N, dtype=np.float64)
        for v in range(V):
            order = np.argsort(-S[v, q], kind="mergesort")
            for p in range(N):
                acc[order[p]] += w[v] / (z + p + 1)
        hs = np.full(k, -np.inf, dtype=np.float64)
        hi = np.full(k, -1, dtype=np.int32)
        cnt = 0
        for i in range(N):
            cnt = heap_push(hs, hi, cnt, acc[i], np.int32(i))
        _emit(hs, hi, cnt, out_s[q], out_i[q])


def _out(Q: int, k: int):
    return np.empty((Q, k), dtype=np.float32), np.empty((Q, k), dtype=np.int32)


def rrf_lists(ids: np.ndarray, k: int, z: float, weights: np.ndarray):
    """See :func:`agentcir.kernels.rrf` (integer rank lists ``[V, Q, L]``)."""
    out_s, out_i = _out(ids.shape[1], k)
    _rrf_lists(ids, float(z), weights, k, out_s, out_i)
    return out_s, out_i


def rrf_scores(scores: np.ndarray, k: int, z: float, weights: np.ndarray):
    """See :func:`agentcir.kernels.rrf` (dense score matrices ``[V, Q, N]``)."""
    out_s, out_i = _out(scores.shape[1], k)
    _rrf_scores(scores, float(z), weights, k, out_s, out_i)
    return out_s, out_i
