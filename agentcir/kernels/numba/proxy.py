"""proxy_scores_topk, numba: K proxies per query, aggregated per gallery item, fused with top-k.

The tile product (the ``loop`` or ``blas`` path, :mod:`agentcir.kernels.tune`) scores a ``[Q*K, tile]`` block (:func:`._tiles.product_tiles`); ``_aggregate_select``
reduces the K rows of each query to one row (mean / max / logsumexp), applies the
exclusions and feeds the running top-k. No ``[Q, K, N]`` (or ``[Q, N]``) buffer exists.
``agg="mean"`` is linear, so it scores the mean proxy with :mod:`.cosine` (one row per
query instead of K). ``agg="octopus"`` computes the adaptive weights (:mod:`.weights`), builds
``e = norm(sum_i w_i P_i)`` and ranks ``e . I`` with :mod:`.cosine`.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._inputs import Gallery
from .._tiling import score_tile_rows
from ._common import (
    FASTMATH,
    dual,
    empty_exclude,
    exclusion_value,
    new_heaps,
    patch_excluded,
    select_row,
    sorted_from_heaps,
)
from ._threads import balanced
from ._tiles import product_tiles
from .cosine import cosine_topk
from .weights import octopus_query, octopus_weights

AGG_CODES = {"mean": 0, "max": 1, "logsumexp": 2}


@dual(fastmath=FASTMATH)
def _aggregate_select(S, K, agg, tau, start, excl, ex_value, hs, hi, cnt):
    Q = S.shape[0] // K
    T = S.shape[1]
    inv_tau = np.float32(1.0 / tau)
    for q in prange(Q):
        vals = np.empty(T, dtype=np.float32)
        base = q * K
        for j in range(T):
            vals[j] = S[base, j]
        if agg == 0:
            for i in range(1, K):
                for j in range(T):
                    vals[j] += S[base + i, j]
            inv_k = np.float32(1.0 / K)
            for j in range(T):
                vals[j] *= inv_k
        else:
            for i in range(1, K):
                for j in range(T):
                    vals[j] = max(vals[j], S[base + i, j])
            if agg == 2:  # tau * log(sum_i exp(S_i / tau)) = m + tau * log(sum_i exp((S_i - m) / tau))
                acc = np.zeros(T, dtype=np.float32)
                for i in range(K):
                    for j in range(T):
                        acc[j] += np.exp((S[base + i, j] - vals[j]) * inv_tau)
                for j in range(T):
                    vals[j] += np.float32(tau) * np.log(acc[j])
        if excl.shape[1]:
            patch_excluded(vals, q, start, excl, ex_value)
        cnt[q] = select_row(vals, start, hs[q], hi[q], cnt[q])


def proxy_scores_topk(
    proxies: np.ndarray,
    gallery: Gallery,
    k: int,
    agg: str,
    tau: float,
    reference: np.ndarray | None,
    exclude: np.ndarray | None,
    exclude_score: float | None,
):
    """See :func:`agentcir.kernels.proxy_scores_topk`."""
    if agg == "octopus":
        w = octopus_weights(reference, proxies, gallery, tau)
        return cosine_topk(octopus_query(proxies, w), gallery, k, exclude, exclude_score)
    if agg == "mean":  # linear: mean_i (P_i . g) = (mean_i P_i) . g, one row per query instead of K
        return cosine_topk(
            proxies.mean(axis=1, dtype=np.float64).astype(np.float32), gallery, k, exclude, exclude_score
        )
    Q, K, d = proxies.shape
    X = np.ascontiguousarray(proxies.reshape(Q * K, d))
    excl = empty_exclude() if exclude is None else exclude
    ex_value = exclusion_value(exclude_score)
    hs, hi, cnt = new_heaps(Q, k)
    tile = score_tile_rows(Q * K, gallery.shape[0])
    serial, it = product_tiles(gallery, [X], tile)
    for start, _, (S,) in it:
        if serial:  # right after numpy's BLAS pool ran (_blas)
            _aggregate_select.serial(S, K, AGG_CODES[agg], tau, start, excl, ex_value, hs, hi, cnt)
            continue
        with balanced():  # parallel over queries: the product ran on the same numba pool
            _aggregate_select.parallel(S, K, AGG_CODES[agg], tau, start, excl, ex_value, hs, hi, cnt)
    return sorted_from_heaps(hs, hi, cnt)
