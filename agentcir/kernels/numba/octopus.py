"""octopus_topk, numba: OCTOPUS bidirectional fusion with top-k and the streamed entropy.

Pass 1 (:mod:`.weights`) gives the proxy weights, hence ``t = (e + q_t) / 2``. Pass 2
walks image and caption tiles in lockstep: the tile product (numba :mod:`._gemm` or BLAS :mod:`._blas`, :mod:`agentcir.kernels.tune`) gives ``t . I_tile`` and ``q_v . C_tile``;
``_fuse_select`` forms ``S = lam*S_t2v + (1-lam)*S_v2t*S_t2v``, applies the reference
mask, folds the tile into the running softmax entropy and the running top-k.
Extra memory: O(Q*(K+1)*tile) in pass 1, O(Q*tile) in pass 2.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._inputs import Gallery
from .._tiling import score_tile_rows
from ._common import (
    dual,
    empty_exclude,
    entropy_from_state,
    entropy_update,
    log_partition_from_state,
    exclusion_value,
    new_entropy_state,
    new_heaps,
    patch_excluded,
    select_row,
    sorted_from_heaps,
)
from ._tiles import product_tiles
from ._threads import balanced
from .weights import octopus_query, octopus_weights


@dual()
def _fuse_select(St, Sv, has_visual, lam, start, excl, ex_value, inv_tau, state, hs, hi, cnt):
    T = St.shape[1]
    a = np.float32(lam)
    b = np.float32(1.0 - lam)
    for q in prange(St.shape[0]):
        vals = np.empty(T, dtype=np.float32)
        if has_visual:
            for j in range(T):
                t = St[q, j]
                vals[j] = a * t + b * (Sv[q, j] * t)
        else:
            for j in range(T):
                vals[j] = St[q, j]
        if excl.shape[1]:
            patch_excluded(vals, q, start, excl, ex_value)
        entropy_update(vals, inv_tau, state[q])
        cnt[q] = select_row(vals, start, hs[q], hi[q], cnt[q])


def octopus_topk(
    reference: np.ndarray,
    proxies: np.ndarray,
    target: np.ndarray,
    visual: np.ndarray | None,
    images: Gallery,
    captions: Gallery | None,
    k: int,
    lam: float,
    tau: float,
    entropy_tau: float,
    exclude: np.ndarray | None,
    exclude_score: float | None,
):
    """See :func:`agentcir.kernels.octopus_topk`."""
    Q, K, d = proxies.shape
    w = octopus_weights(reference, proxies, images, tau)
    t = ((octopus_query(proxies, w).astype(np.float64) + target) / 2.0).astype(np.float32)
    mats, gals = [t], [images]
    if visual is not None:
        mats.append(visual)
        gals.append(captions)
    excl = empty_exclude() if exclude is None else exclude
    ex_value = exclusion_value(exclude_score)
    hs, hi, cnt = new_heaps(Q, k)
    state = new_entropy_state(Q)
    tile = score_tile_rows(len(mats) * Q, images.shape[0])
    blas, it = product_tiles(images, mats, tile, galleries=gals)
    for start, _, outs in it:
        args = (
            outs[0],
            outs[-1],
            visual is not None,
            lam,
            start,
            excl,
            ex_value,
            1.0 / entropy_tau,
            state,
            hs,
            hi,
            cnt,
        )
        if blas:  # serial right after a BLAS call (_blas)
            _fuse_select.serial(*args)
            continue
        with balanced():
            _fuse_select.parallel(*args)
    scores, ids = sorted_from_heaps(hs, hi, cnt)
    return scores, ids, w, entropy_from_state(state), log_partition_from_state(state)
