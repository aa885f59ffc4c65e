"""cosine_topk, numba: streamed inner-product top-k with a running heap per query.

Two launch shapes, both exact float32 arithmetic on the stored gallery values:

* few queries (``Q <= DIRECT_MAX_Q``): one pass of ``_direct_kernel`` over the gallery,
  which is memory-bound: each row is read (and widened from fp16/bf16 bits) once, dotted
  with every query and offered to per-chunk heaps; the chunk heaps are merged at the end.
  Half-precision galleries read half the bytes, hence about twice as fast. Rows are
  prefetched ``PREFETCH_BYTES`` ahead (the hardware prefetchers alone reach about half
  the bandwidth).
* many queries: BLAS on a gallery tile (:func:`._tiles.exact_tiles`), then the serial
  ``_select_kernel`` walks the ``[Q, tile]`` scores and keeps the running top-k.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from .._inputs import Gallery
from .._tiling import tile_rows
from ._common import (
    KIND_CODES,
    dot,
    empty_exclude,
    exclusion_value,
    heap_push,
    new_heaps,
    patch_excluded,
    prefetch_row,
    row_dot4,
    row_f32,
    select_row,
    sorted_from_heaps,
)
from ._tiles import exact_tiles

#: at most this many queries use the direct (BLAS-free, memory-bound) kernel
DIRECT_MAX_Q = 4
#: gallery rows per parallel chunk of the direct kernel, at least (tests lower it)
DIRECT_CHUNK_ROWS = 1024
#: the direct kernel requests rows this many bytes ahead of the row it scores
PREFETCH_BYTES = 16384


@njit(inline="always", cache=True)
def _offer(s, r, q, c, excl, ex_value, hs, hi, cnt):
    for m in range(excl.shape[1]):
        if excl[q, m] == r:
            s = ex_value
    n = cnt[c, q]
    if n == hs.shape[2]:
        if s <= hs[c, q, 0]:
            return
    elif s == -np.inf:
        return
    cnt[c, q] = heap_push(hs[c, q], hi[c, q], n, s, r)


@njit(parallel=True, cache=True)
def _direct_kernel(X, G, kind, excl, ex_value, n_chunks, pf, hs, hi, cnt):
    N = G.shape[0]
    Q = X.shape[0]
    chunk = (N + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        buf = np.empty(G.shape[1], dtype=np.float32)
        lo = c * chunk
        hi_ = min(N, lo + chunk)
        r = lo
        if Q == 1:  # blocks of four rows, one fused decode + dot loop each
            while r + 4 <= hi_:
                if r + pf + 4 <= N:  # pf is a multiple of 4
                    for t in range(4):
                        prefetch_row(G, r + pf + t)
                s0, s1, s2, s3 = row_dot4(X[0], G, r, kind)
                _offer(s0, r, 0, c, excl, ex_value, hs, hi, cnt)
                _offer(s1, r + 1, 0, c, excl, ex_value, hs, hi, cnt)
                _offer(s2, r + 2, 0, c, excl, ex_value, hs, hi, cnt)
                _offer(s3, r + 3, 0, c, excl, ex_value, hs, hi, cnt)
                r += 4
        while r < hi_:  # decode the row once, dot it with every query
            if r + pf < N:
                prefetch_row(G, r + pf)
            row = row_f32(G, r, kind, buf)
            for q in range(Q):
                _offer(dot(X[q], row), r, q, c, excl, ex_value, hs, hi, cnt)
            r += 1


@njit(cache=True)
def _merge_chunks(hs, hi, cnt, out_hs, out_hi, out_cnt):
    for q in range(out_hs.shape[0]):
        n = 0
        for c in range(hs.shape[0]):
            for j in range(cnt[c, q]):
                n = heap_push(out_hs[q], out_hi[q], n, hs[c, q, j], hi[c, q, j])
        out_cnt[q] = n


@njit(cache=True)
def _select_kernel(S, start, excl, ex_value, hs, hi, cnt):
    for q in range(S.shape[0]):
        row = S[q]
        if excl.shape[1]:
            patch_excluded(row, q, start, excl, ex_value)
        cnt[q] = select_row(row, start, hs[q], hi[q], cnt[q])


def direct_topk(X: np.ndarray, gallery: Gallery, k: int, excl: np.ndarray, ex_value: np.float32):
    """Top-k of ``X @ G.T`` in one memory-bound pass (few queries)."""
    Q = X.shape[0]
    n_chunks = max(1, min(numba.get_num_threads() * 4, gallery.shape[0] // DIRECT_CHUNK_ROWS))
    hs = np.full((n_chunks, Q, k), -np.inf, dtype=np.float32)
    hi = np.full((n_chunks, Q, k), -1, dtype=np.int32)
    cnt = np.zeros((n_chunks, Q), dtype=np.int64)
    row_bytes = gallery.shape[1] * gallery.data.itemsize
    pf = 4 * max(1, -(-PREFETCH_BYTES // (4 * row_bytes)))  # rows, a multiple of 4
    _direct_kernel(X, gallery.data, KIND_CODES[gallery.kind], excl, ex_value, n_chunks, pf, hs, hi, cnt)
    mh, mi, mc = new_heaps(Q, k)
    _merge_chunks(hs, hi, cnt, mh, mi, mc)
    return sorted_from_heaps(mh, mi, mc)


def tiled_topk(X: np.ndarray, gallery: Gallery, k: int, excl: np.ndarray, ex_value: np.float32):
    """Top-k of ``X @ G.T`` by BLAS on gallery tiles + the numba select pass."""
    hs, hi, cnt = new_heaps(X.shape[0], k)
    tile = tile_rows(X.shape[0], gallery.shape[1], gallery.shape[0])
    for start, _, (S,) in exact_tiles(gallery, [X], tile):
        _select_kernel(S, start, excl, ex_value, hs, hi, cnt)
    return sorted_from_heaps(hs, hi, cnt)


def cosine_topk(queries: np.ndarray, gallery: Gallery, k: int, exclude: np.ndarray | None,
                exclude_score: float | None):
    """Top-k inner products; see :func:`agentcir.kernels.cosine_topk`."""
    excl = empty_exclude() if exclude is None else exclude
    ex_value = exclusion_value(exclude_score)
    if queries.shape[0] <= DIRECT_MAX_Q:
        return direct_topk(queries, gallery, k, excl, ex_value)
    return tiled_topk(queries, gallery, k, excl, ex_value)
