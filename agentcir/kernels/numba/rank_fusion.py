"""rrf, numba: reciprocal rank fusion of id lists or dense score matrices.

The shape is "library sort, then a numba pass": a numba pass builds one int64 sort key per
entry, numpy sorts the key rows (its vectorised integer sort, ~10x faster than an argsort
of floats), and a numba pass per query walks the sorted keys, fuses and keeps the top-k.

* Id lists ``[V, Q, L]``: key ``(id * V + list) * L + position`` (padding sorts last), so
  an item's entries are adjacent, in list order, first occurrence first; its fused score
  is summed in list order (float64, the reference's order) into a float64 heap whose tie
  key is the item's first appearance ``list * L + position`` (mapped back to the id after).
* Score matrices ``[V, Q, N]``: key ``(~monotone_int32(score) << 32) | id`` sorts by score
  descending, ties by lower id; the position in the sorted row is the rank, and an item's
  rank in list 0 is its tie key.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._common import dual, heap_push, heap_to_sorted

INT64_MAX = np.iinfo(np.int64).max


@njit(inline="always", cache=True)
def _emit(hs, hi, n, out_s, out_i):
    tmp = np.empty(hs.shape[0], dtype=np.float64)
    heap_to_sorted(hs, hi, n, tmp, out_i)
    for j in range(tmp.shape[0]):
        out_s[j] = tmp[j]


@dual()
def list_keys(ids, keys):
    """``keys[q, v*L + p] = (id * V + v) * L + p`` for valid ids, INT64_MAX for padding."""
    V, Q, L = ids.shape
    VL = np.int64(V) * L
    for q in prange(Q):
        for v in range(V):
            for p in range(L):
                item = ids[v, q, p]
                keys[q, v * L + p] = np.int64(item) * VL + v * L + p if item >= 0 else INT64_MAX


def sorted_list_keys(ids: np.ndarray) -> np.ndarray:
    """Per query, the sorted keys of its list entries ``[Q, V*L]`` (see the module docstring)."""
    V, Q, L = ids.shape
    keys = np.empty((Q, V * L), dtype=np.int64)
    list_keys(ids, keys, work=ids.size)
    keys.sort(axis=1)
    return keys


@njit(inline="always", cache=True)
def _emit_from(hs, hi, n, out_s, out_i, id_at):
    """Emit the heap, whose ids are positions, as the ids ``id_at[position]``."""
    _emit(hs, hi, n, out_s, out_i)
    for j in range(out_i.shape[0]):
        if out_i[j] >= 0:
            out_i[j] = id_at[out_i[j]]


@dual()
def _rrf_lists(ids, keys, V, L, z, w, k, out_s, out_i):
    Q, n = keys.shape
    VL = np.int64(V) * L
    for q in prange(Q):
        hs = np.full(k, -np.inf, dtype=np.float64)
        hi = np.full(k, -1, dtype=np.int32)
        flat = np.empty(V * L, dtype=np.int32)
        for v in range(V):
            for p in range(L):
                flat[v * L + p] = ids[v, q, p]
        cnt = 0
        j = 0
        while j < n and keys[q, j] != INT64_MAX:
            item = keys[q, j] // VL
            first = keys[q, j] % VL  # the smallest list * L + position of the item: its first appearance
            total = 0.0
            last_v = -1
            while j < n and keys[q, j] != INT64_MAX and keys[q, j] // VL == item:
                v = (keys[q, j] % VL) // L
                if v != last_v:  # the first occurrence of the item in list v
                    total += w[v] / (z + (keys[q, j] % L) + 1)
                    last_v = v
                j += 1
            cnt = heap_push(hs, hi, cnt, total, np.int32(first))
        _emit_from(hs, hi, cnt, out_s[q], out_i[q], flat)


@njit(inline="always", cache=True)
def _rank_key(score, i):
    """int64 key sorting ascending as score descending, then id ascending."""
    b = np.float32(score + np.float32(0.0)).view(np.int32)  # -0.0 -> +0.0
    m = b ^ ((b >> np.int32(31)) & np.int32(0x7FFFFFFF))  # int32 order = float order
    return (np.int64(~m) << np.int64(32)) | np.int64(i)


@dual()
def _score_keys(S, keys):
    V, Q, N = S.shape
    for vq in prange(V * Q):
        v = vq // Q
        q = vq % Q
        for i in range(N):
            keys[v, q, i] = _rank_key(S[v, q, i], i)


@dual()
def _rrf_ranked(keys, z, w, k, out_s, out_i):
    V, Q, N = keys.shape
    for q in prange(Q):
        acc = np.zeros(N, dtype=np.float64)
        for v in range(V):
            for p in range(N):
                acc[keys[v, q, p] & np.int64(0xFFFFFFFF)] += w[v] / (z + p + 1)
        order0 = np.empty(N, dtype=np.int32)  # list 0's ranking: the first appearance of every item
        for p in range(N):
            order0[p] = np.int32(keys[0, q, p] & np.int64(0xFFFFFFFF))
        hs = np.full(k, -np.inf, dtype=np.float64)
        hi = np.full(k, -1, dtype=np.int32)
        cnt = 0
        for p in range(N):
            cnt = heap_push(hs, hi, cnt, acc[order0[p]], np.int32(p))
        _emit_from(hs, hi, cnt, out_s[q], out_i[q], order0)


def _out(Q: int, k: int):
    return np.empty((Q, k), dtype=np.float32), np.empty((Q, k), dtype=np.int32)


def rrf_lists(ids: np.ndarray, k: int, z: float, weights: np.ndarray):
    """See :func:`agentcir.kernels.rrf` (integer rank lists ``[V, Q, L]``)."""
    V, Q, L = ids.shape
    out_s, out_i = _out(Q, k)
    _rrf_lists(ids, sorted_list_keys(ids), V, L, float(z), weights, k, out_s, out_i, work=ids.size)
    return out_s, out_i


def rrf_scores(scores: np.ndarray, k: int, z: float, weights: np.ndarray):
    """See :func:`agentcir.kernels.rrf` (dense score matrices ``[V, Q, N]``)."""
    keys = np.empty(scores.shape, dtype=np.int64)
    _score_keys(scores, keys, work=scores.size)
    keys.sort(axis=-1)
    out_s, out_i = _out(scores.shape[1], k)
    _rrf_ranked(keys, float(z), weights, k, out_s, out_i, work=scores.size)
    return out_s, out_i
