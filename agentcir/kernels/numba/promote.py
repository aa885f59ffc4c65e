"""promote_first_accepted, numba: verification re-rank (first accepted candidate to the front)."""

from __future__ import annotations

import numpy as np
from numba import prange

from ._common import dual


@dual()
def _promote(ids, scores, accepted, bonus, out_s, out_i):
    Q, L = ids.shape
    A = min(accepted.shape[1], L)
    for q in prange(Q):
        top = -np.inf
        for j in range(L):
            out_i[q, j] = ids[q, j]
            out_s[q, j] = scores[q, j] if ids[q, j] >= 0 else -np.inf
            top = max(top, out_s[q, j])
        hit = -1
        for j in range(A):
            if accepted[q, j] and ids[q, j] >= 0:
                hit = j
                break
        if hit < 0:
            continue
        for j in range(hit, 0, -1):
            out_i[q, j] = out_i[q, j - 1]
            out_s[q, j] = out_s[q, j - 1]
        out_i[q, 0] = ids[q, hit]
        out_s[q, 0] = top + bonus


def promote_first_accepted(ids: np.ndarray, scores: np.ndarray, accepted: np.ndarray, bonus: float):
    """See :func:`agentcir.kernels.promote_first_accepted`."""
    out_s = np.empty(ids.shape, dtype=np.float32)
    out_i = np.empty(ids.shape, dtype=np.int32)
    _promote(ids, scores, accepted, np.float32(bonus), out_s, out_i, work=ids.size)
    return out_s, out_i
