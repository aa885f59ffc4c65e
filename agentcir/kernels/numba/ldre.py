"""ldre_weights, numba: LDRE's adaptive ensemble weights in one streamed pass.

``b . I_j - e_i . I_j = (b - e_i) . I_j`` is linear, so one product of the K difference rows
``D_i = b - e_i`` per query with a gallery tile (``[Q*K, tile]``) gives the drops directly;
``_top_sums`` keeps, per row, the ``m`` largest ``relu(drop)`` seen so far (a sorted buffer
whose first slot is the smallest kept value: most values are rejected by one comparison).
After the last tile ``s = sum(buffer)`` and ``w = softmax(s / max_i s / tau)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._inputs import Gallery
from .._tiling import score_tile_rows
from ._common import FASTMATH, score_f32
from ._tiles import product_tiles


@njit(cache=True, fastmath=FASTMATH)
def _top_values(S, best):
    """For each row ``p``: merge ``relu(S[p, :])`` into the ascending top-m buffer ``best[p]``."""
    m = best.shape[1]
    for p in range(S.shape[0]):
        for j in range(S.shape[1]):
            v = max(score_f32(S, p, j), np.float32(0.0))
            if v <= best[p, 0]:
                continue
            pos = 0
            while pos + 1 < m and best[p, pos + 1] < v:
                best[p, pos] = best[p, pos + 1]
                pos += 1
            best[p, pos] = v


def ldre_weights(before: np.ndarray, proxies: np.ndarray, gallery: Gallery, topk: int, tau: float) -> np.ndarray:
    """See :func:`agentcir.kernels.ldre_weights`."""
    return ldre_softmax(ldre_top_drops(before, proxies, gallery, topk).astype(np.float64).sum(axis=2), tau)


def ldre_top_drops(before: np.ndarray, proxies: np.ndarray, gallery: Gallery, topk: int) -> np.ndarray:
    """See :func:`agentcir.kernels.ldre_top_drops`."""
    Q, K, d = proxies.shape
    N = gallery.shape[0]
    D = np.ascontiguousarray((before[:, None, :] - proxies).reshape(Q * K, d))
    best = np.zeros((Q * K, min(topk, N)), dtype=np.float32)  # relu >= 0: zeros are neutral
    for _, _, (S,) in product_tiles(gallery, [D], score_tile_rows(Q * K, N))[1]:
        _top_values(S, best)
    return best[:, ::-1].reshape(Q, K, -1)


def ldre_softmax(s: np.ndarray, tau: float) -> np.ndarray:
    """``softmax(s / max_i s / tau)`` per row; a row whose largest score is 0 gets uniform weights."""
    mx = s.max(axis=1, keepdims=True)
    x = np.where(mx > 0, s / np.where(mx > 0, mx, 1.0) / tau, 0.0)
    x = np.exp(x - x.max(axis=1, keepdims=True))
    return (x / x.sum(axis=1, keepdims=True)).astype(np.float32)
