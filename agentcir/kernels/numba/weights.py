"""octopus_weights, numba: OCTOPUS adaptive proxy weights in one streamed pass.

``S_r[j] - S_E[i, j] = (f_ref - P_i) . I_j`` is linear, so one product of the K
difference rows ``D_i = f_ref - P_i`` per query with a gallery tile (``[Q*K, tile]``)
gives the gaps directly (one row per proxy instead of K + 1 rows, and the rounding is
relative to the gap, not to the similarities). ``_relu_sums`` adds ``relu(gap)`` into
``acc[q, i]``; after the last tile ``s = acc / N`` and ``w = softmax(s / tau)``.

The pass is one fused parallel kernel (``_fused_relu_sums``) whose sub-tile products are the
register-tiled microkernels or a ``cblas_sgemm`` call each (:mod:`._sgemm`), as
:func:`agentcir.kernels.tune.choose` picks for the dtype and ``Q*K`` rows.

Precision: exact float32 products for float32 galleries. For float16 / bfloat16
galleries of at least ``COARSE_MIN_ITEMS`` items on a CPU with AMX the tile product runs
in bfloat16 (:func:`._tiles.coarse_tiles`, about 3-4x faster there; without AMX the
exact product is faster, :func:`._tiles.coarse_is_faster`); the weights are a mean over
the whole gallery, so the rounding averages out (tested against the reference with the
half-precision tolerance, and by the top-10 agreement benchmark).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .. import tune
from .._inputs import Gallery
from .._tiling import tile_rows
from . import _blas, _sgemm
from ._common import FASTMATH, score_f32
from ._gemm import (
    buffer_rows,
    chunk_count,
    chunk_span,
    fused_sub_rows,
    gallery_args,
    pack_rows,
    panel_rows,
    scale_columns,
    tile,
    tile_buffer,
)
from ._threads import balanced
from ._tiles import coarse_is_faster, coarse_tiles

#: half-precision galleries at least this large use the bfloat16 tile product
COARSE_MIN_ITEMS = 16384


@njit(cache=True, fastmath=FASTMATH)
def _relu_sums(S, split, acc):
    """``acc.flat[p] += sum_j relu(S[p, j])``; with ``split`` the gap is ``S[p, j] + S[R + p, j]``
    (the high and low bf16 parts of :func:`._tiles.coarse_tiles`). Run serial after the torch
    product (``_common`` "Threads")."""
    flat = acc.reshape(-1)
    R = flat.shape[0]
    for p in range(R):
        t = np.float32(0.0)
        if split:
            for j in range(S.shape[1]):
                t += max(score_f32(S, p, j) + score_f32(S, R + p, j), np.float32(0.0))
        else:
            for j in range(S.shape[1]):
                t += max(score_f32(S, p, j), np.float32(0.0))
        flat[p] += t


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def _fused_relu_sums(blas, D, Dp, R, G, kind, scales, n_chunks, sub, acc):
    """``acc[c, p] = sum_j relu(D[p] . G[j])`` over the rows ``j`` of chunk ``c`` (``Dp`` the packed rows,
    ``R`` real rows; int8 codes times their ``scales``, empty for float galleries; the product by the path
    ``blas`` names, :func:`._gemm.tile`)."""
    for c in prange(n_chunks):
        S = np.empty((panel_rows(Dp), sub), dtype=np.float32)
        W = tile_buffer(G, buffer_rows(blas, sub))
        lo, end = chunk_span(c, n_chunks, G.shape[0])
        for t0 in range(lo, end, sub):
            t1 = min(end, t0 + sub)
            tile(blas, D, Dp, G, kind, t0, t1, S, W)
            scale_columns(S, R, scales, t0, t1)
            for p in range(R):
                t = np.float32(0.0)
                for j in range(t1 - t0):
                    t += max(S[p, j], np.float32(0.0))
                acc[c, p] += t


def octopus_weights(reference: np.ndarray, proxies: np.ndarray, gallery: Gallery, tau: float) -> np.ndarray:
    """See :func:`agentcir.kernels.octopus_weights`."""
    Q, K, d = proxies.shape
    if K == 1:  # softmax over one proxy is exactly 1: no pass over the gallery (a sharded OCTOPUS gives one)
        return np.ones((Q, 1), dtype=np.float32)
    x = octopus_gap_sums(reference, proxies, gallery) / (gallery.shape[0] * tau)
    x = np.exp(x - x.max(axis=1, keepdims=True))
    return (x / x.sum(axis=1, keepdims=True)).astype(np.float32)


def octopus_gap_sums(reference: np.ndarray, proxies: np.ndarray, gallery: Gallery) -> np.ndarray:
    """See :func:`agentcir.kernels.octopus_gap_sums`."""
    Q, K, d = proxies.shape
    N = gallery.shape[0]
    D = np.ascontiguousarray((reference[:, None, :] - proxies).reshape(Q * K, d), dtype=np.float32)
    acc = np.zeros((Q, K), dtype=np.float64)
    tile = tile_rows(Q * K, d, N)
    if gallery.kind in ("float16", "bfloat16") and N >= COARSE_MIN_ITEMS and coarse_is_faster():
        for _, _, S in coarse_tiles(gallery, D, tile):
            _relu_sums(S, True, acc)
    elif (blas := _sgemm.for_path(tune.choose(gallery.kind, Q * K))) is None:  # numpy tiles, folded serially
        for _, _, (S,) in _blas.tiles(gallery, [D], _blas.tile_rows(Q * K, d, N)):
            _relu_sums(S, False, acc)
    else:
        sub = fused_sub_rows(Q * K, d, bool(blas.address))
        n_chunks = chunk_count(N, sub)
        part = np.zeros((n_chunks, Q * K), dtype=np.float64)
        with balanced(), _sgemm.calling(blas):
            _fused_relu_sums(
                blas,
                D,
                pack_rows(D),
                Q * K,
                *gallery_args(gallery),
                n_chunks,
                min(sub, N),
                part,
            )
        acc = part.sum(axis=0).reshape(Q, K)
    return acc


def octopus_query(proxies: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``e = norm(sum_i w_i P_i)`` as float32 ``[Q, d]``."""
    e = np.einsum("qk,qkd->qd", weights.astype(np.float64), proxies.astype(np.float64))
    return (e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)).astype(np.float32)
