"""uncertainty, numba: per-query entropy and clipped top-2/top-1 margin, then the gate's min-max over queries."""

from __future__ import annotations

import numpy as np
from numba import prange

from ..reference import GATE_EPS, gate_minmax
from ._common import dual


@dual()
def _gate_rows(S, tau, want_entropy, H, ratio):
    Q, L = S.shape
    for q in prange(Q):
        top1 = -np.inf
        top2 = -np.inf
        count = 0
        for j in range(L):
            x = S[q, j]
            if x == -np.inf:
                continue
            count += 1
            if x > top1:
                top2 = top1
                top1 = x
            elif x > top2:
                top2 = x
        if count >= 2:
            ratio[q] = min(max(np.float64(top2) / (np.float64(top1) + GATE_EPS), 0.0), 1.0)
        if want_entropy and count > 0:
            m = np.float64(top1) / tau
            z = 0.0
            a = 0.0
            for j in range(L):
                if S[q, j] != -np.inf:
                    x = np.float64(S[q, j]) / tau - m
                    e = np.exp(x)
                    z += e
                    a += e * x
            H[q] = np.log(z) - a / z


def uncertainty(scores: np.ndarray, tau: float, entropy: np.ndarray | None) -> np.ndarray:
    """See :func:`agentcir.kernels.uncertainty`."""
    Q = scores.shape[0]
    H = np.zeros(Q, dtype=np.float64)
    ratio = np.zeros(Q, dtype=np.float64)
    _gate_rows(scores, float(tau), entropy is None, H, ratio, work=scores.size)
    if entropy is not None:
        H = entropy.astype(np.float64)
    return (0.5 * gate_minmax(H) + 0.5 * gate_minmax(ratio)).astype(np.float32)
