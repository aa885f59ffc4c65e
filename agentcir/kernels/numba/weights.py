"""octopus_weights, numba: OCTOPUS adaptive proxy weights in one streamed pass.

``S_r[j] - S_E[i, j] = (f_ref - P_i) . I_j`` is linear, so one product of the K
difference rows ``D_i = f_ref - P_i`` per query with a gallery tile (``[Q*K, tile]``)
gives the gaps directly (one row per proxy instead of K + 1 rows, and the rounding is
relative to the gap, not to the similarities). ``_relu_sums`` adds ``relu(gap)`` into
``acc[q, i]``; after the last tile ``s = acc / N`` and ``w = softmax(s / tau)``.

Precision: exact float32 products for float32 galleries. For float16 / bfloat16
galleries of at least ``COARSE_MIN_ITEMS`` items on a CPU with native bfloat16 (AMX /
AVX512-BF16) the tile product runs in bfloat16 (:func:`._tiles.coarse_tiles`, about
3-4x faster here); the weights are a mean over the whole gallery, so the rounding
averages out (tested against the reference with the half-precision tolerance, and by
the top-10 agreement benchmark).
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._inputs import Gallery
from .._tiling import tile_rows
from ._common import FASTMATH, dual, score_f32
from ._threads import balanced
from ._tiles import coarse_tiles, exact_tiles, has_fast_bf16

#: half-precision galleries at least this large use the bfloat16 tile product
COARSE_MIN_ITEMS = 16384


@dual(fastmath=FASTMATH)
def _relu_sums(S, split, acc):
    """``acc.flat[p] += sum_j relu(S[p, j])``; with ``split`` the gap is ``S[p, j] + S[R + p, j]``
    (the high and low bf16 parts of :func:`._tiles.coarse_tiles`). Parallel after a numba
    product, serial after a torch one (``_common`` "Threads")."""
    flat = acc.reshape(-1)
    R = flat.shape[0]
    for p in prange(R):
        t = np.float32(0.0)
        if split:
            for j in range(S.shape[1]):
                t += max(score_f32(S, p, j) + score_f32(S, R + p, j), np.float32(0.0))
        else:
            for j in range(S.shape[1]):
                t += max(score_f32(S, p, j), np.float32(0.0))
        flat[p] += t


def octopus_weights(reference: np.ndarray, proxies: np.ndarray, gallery: Gallery, tau: float) -> np.ndarray:
    """See :func:`agentcir.kernels.octopus_weights`."""
    Q, K, d = proxies.shape
    N = gallery.shape[0]
    D = np.ascontiguousarray((reference[:, None, :] - proxies).reshape(Q * K, d))
    acc = np.zeros((Q, K), dtype=np.float64)
    tile = tile_rows(Q * K, d, N)
    if gallery.kind != "float32" and N >= COARSE_MIN_ITEMS and has_fast_bf16():
        for _, _, S in coarse_tiles(gallery, D, tile):
            _relu_sums.serial(S, True, acc)
    else:
        for _, _, (S,) in exact_tiles(gallery, [D], tile):
            with balanced():
                _relu_sums.parallel(S, False, acc)
    x = acc / (N * tau)
    x = np.exp(x - x.max(axis=1, keepdims=True))
    return (x / x.sum(axis=1, keepdims=True)).astype(np.float32)


def octopus_query(proxies: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``e = norm(sum_i w_i P_i)`` as float32 ``[Q, d]``."""
    e = np.einsum("qk,qkd->qd", weights.astype(np.float64), proxies.astype(np.float64))
    return (e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)).astype(np.float32)
