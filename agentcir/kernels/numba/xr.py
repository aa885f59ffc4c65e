"""xr_rerank, numba: XR stage-2 re-rank of each query's head, in parallel over queries."""

from __future__ import annotations

import numpy as np
from numba import prange

from ._common import dual


@dual()
def _xr_rerank(ids, sims, qa, cap, wq, out_s, out_i):
    Q, L = ids.shape
    H = qa.shape[1]
    for q in prange(Q):
        for j in range(L):
            out_i[q, j] = ids[q, j]
            out_s[q, j] = sims[q, j] if ids[q, j] >= 0 else -np.inf
        n = 0
        while n < H and ids[q, n] >= 0:
            n += 1
        if n == 0:
            continue
        lo = np.inf
        hi = -np.inf
        for j in range(n):
            lo = min(lo, np.float64(sims[q, j]))
            hi = max(hi, np.float64(sims[q, j]))
        score = np.empty(n, dtype=np.float64)
        for j in range(n):
            mm = (np.float64(sims[q, j]) - lo) / (hi - lo) if hi > lo else 0.0  # constant head: zeros
            score[j] = (wq * np.float64(qa[q, j]) + (1.0 - wq) * np.float64(cap[q, j])) * mm
        order = np.argsort(-score, kind="mergesort")  # stable: ties keep the stage-1 order
        for j in range(n):
            out_i[q, j] = ids[q, order[j]]
            out_s[q, j] = score[order[j]]


def xr_rerank(ids: np.ndarray, sims: np.ndarray, qa: np.ndarray, cap: np.ndarray, qa_weight: float):
    """See :func:`agentcir.kernels.xr_rerank`."""
    out_s = np.empty(ids.shape, dtype=np.float32)
    out_i = np.empty(ids.shape, dtype=np.int32)
    _xr_rerank(ids, sims, qa, cap, float(qa_weight), out_s, out_i, work=ids.size)
    return out_s, out_i
