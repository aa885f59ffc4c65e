"""octopus_topk, numba: OCTOPUS bidirectional fusion with top-k and the streamed entropy.

Pass 1 (:mod:`.weights`) gives the proxy weights, hence ``t = (e + q_t) / 2``. Pass 2 scores
``t . I`` and ``q_v . C`` on the same gallery rows, forms ``S = lam*S_t2v + (1-lam)*S_v2t*S_t2v``,
applies the reference mask, folds the scores into the running softmax entropy and the running
top-k (:func:`_fuse_rows`). Pass 2 is one parallel launch over gallery chunks
(``_fused_kernel``): each chunk walks sub-tiles of both galleries in lockstep, with its own heaps
and entropy state, merged at the end; the sub-tile products are the microkernels (``loop``) or a
``cblas_sgemm`` call each (``blas``, :mod:`agentcir.kernels.tune`); where the BLAS cannot be
called from numba's threads, ``blas`` folds numpy's whole-tile products in serially.
Extra memory: O(Q*(K+1)*tile) in pass 1, O(Q*tile) in pass 2.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .. import tune
from .._inputs import Gallery, read_only, to_backend_float
from . import _blas, _sgemm
from ._common import (
    empty_exclude,
    entropy_from_state,
    entropy_update,
    exclusion_value,
    heap_slot,
    log_partition_from_state,
    merged_entropy_states,
    merged_heaps,
    new_entropy_state,
    new_heaps,
    patch_excluded,
    select_row,
    sorted_from_heaps,
    thread_heaps,
)
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
from .weights import octopus_query, octopus_weights


@njit(inline="always", cache=True)
def _fuse_rows(St, Sv, q, T, has_visual, lam, start, excl, ex_value, inv_tau, vals, state, hs, hi, n):
    """Fuse query ``q``'s scores of ``T`` gallery rows from ``start`` into ``vals``, mask, fold them into
    ``state`` (entropy) and the heap ``hs / hi`` of size ``n``; returns the new size."""
    a = np.float32(lam)
    b = np.float32(1.0 - lam)
    v = vals[:T]
    if has_visual:
        for j in range(T):
            t = St[q, j]
            v[j] = a * t + b * (Sv[q, j] * t)
    else:
        for j in range(T):
            v[j] = St[q, j]
    if excl.shape[1]:
        patch_excluded(v, q, start, excl, ex_value)
    entropy_update(v, inv_tau, state)
    return select_row(v, start, hs, hi, n)


@njit(cache=True)
def _fuse_tile(St, Sv, has_visual, lam, start, excl, ex_value, inv_tau, state, hs, hi, cnt):
    """One BLAS tile pair folded in (serial: right after a BLAS call, :mod:`._blas`)."""
    vals = np.empty(St.shape[1], dtype=np.float32)
    for q in range(St.shape[0]):
        cnt[q] = _fuse_rows(
            St,
            Sv,
            q,
            St.shape[1],
            has_visual,
            lam,
            start,
            excl,
            ex_value,
            inv_tau,
            vals,
            state[q],
            hs[q],
            hi[q],
            cnt[q],
        )


@njit(parallel=True, cache=True)
def _fused_kernel(
    blas,
    T,
    Tp,
    V,
    Vp,
    Q,
    I,
    C,
    ki,
    kc,
    si,
    sc,
    has_visual,
    lam,
    excl,
    ex_value,
    inv_tau,
    n_chunks,
    sub,
    state,
    hs,
    hi,
    cnt,
):
    for c in prange(n_chunks):
        t = heap_slot(c, n_chunks, hs)  # the heaps: the thread's (order-free); the entropy state: the chunk's
        St = np.empty((panel_rows(Tp), sub), dtype=np.float32)
        Sv = np.empty((panel_rows(Vp) if has_visual else 0, sub), dtype=np.float32)
        rows = buffer_rows(blas, sub)
        Wi, Wc = tile_buffer(I, rows), tile_buffer(C, rows)
        vals = np.empty(sub, dtype=np.float32)
        lo, end = chunk_span(c, n_chunks, I.shape[0])
        for t0 in range(lo, end, sub):
            t1 = min(end, t0 + sub)
            tile(blas, T, Tp, I, ki, t0, t1, St, Wi)
            scale_columns(St, Q, si, t0, t1)
            if has_visual:
                tile(blas, V, Vp, C, kc, t0, t1, Sv, Wc)
                scale_columns(Sv, Q, sc, t0, t1)
            for q in range(Q):
                cnt[t, q] = _fuse_rows(
                    St,
                    Sv,
                    q,
                    t1 - t0,
                    has_visual,
                    lam,
                    t0,
                    excl,
                    ex_value,
                    inv_tau,
                    vals,
                    state[c, q],
                    hs[t, q],
                    hi[t, q],
                    cnt[t, q],
                )


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
    inv_tau = 1.0 / entropy_tau
    N = images.shape[0]
    blas = _sgemm.for_path(tune.choose(images.kind, len(mats) * Q))
    if blas is None:  # no callable sgemm: numpy's product on whole tiles, each tile pair folded in serially
        hs, hi, cnt = new_heaps(Q, k)
        state = new_entropy_state(Q)
        for start, _, outs in _blas.tiles(images, mats, _blas.tile_rows(len(mats) * Q, d, N), gals):
            _fuse_tile(outs[0], outs[-1], visual is not None, lam, start, excl, ex_value, inv_tau, state, hs, hi, cnt)
        scores, ids = sorted_from_heaps(hs, hi, cnt)
        return scores, ids, w, entropy_from_state(state), log_partition_from_state(state)
    sub = fused_sub_rows(len(mats) * Q, d, bool(blas.address))
    n_chunks = chunk_count(N, sub)
    hs, hi, cnt = thread_heaps(Q, k, n_chunks)
    states = np.stack([new_entropy_state(Q)] * n_chunks)
    images_data, images_kind, images_scales = gallery_args(images)
    caps_data, caps_kind, caps_scales = gallery_args(gals[-1])
    with balanced(), _sgemm.calling(blas):
        _fused_kernel(
            blas,
            t,
            pack_rows(t),
            to_backend_float(mats[-1], "numpy"),
            pack_rows(mats[-1]),
            Q,
            images_data,
            caps_data,
            images_kind,
            caps_kind,
            images_scales,
            caps_scales,
            visual is not None,
            lam,
            read_only(excl),
            ex_value,
            inv_tau,
            n_chunks,
            min(sub, max(1, N)),
            states,
            hs,
            hi,
            cnt,
        )
    scores, ids = merged_heaps(hs, hi, cnt, Q)
    state = merged_entropy_states(states)
    return scores, ids, w, entropy_from_state(state), log_partition_from_state(state)
