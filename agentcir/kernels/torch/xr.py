"""xr_rerank, torch: head scores ``(w*qa + (1-w)*cap) * minmax(sims)``, stable re-sort of the head."""

from __future__ import annotations

import numpy as np
import torch

from ._common import to_t


def xr_rerank(ids: np.ndarray, sims: np.ndarray, qa: np.ndarray, cap: np.ndarray, qa_weight: float):
    """See :func:`agentcir.kernels.xr_rerank`."""
    I, S = to_t(ids), to_t(sims)
    H = qa.shape[1]
    valid = I[:, :H] >= 0
    sh = S[:, :H].double()
    inf = torch.tensor(float("inf"), dtype=torch.float64)
    lo = torch.where(valid, sh, inf).amin(dim=1, keepdim=True)
    span = torch.where(valid, sh, -inf).amax(dim=1, keepdim=True) - lo
    mm = torch.where(span > 0, (sh - lo) / torch.where(span > 0, span, 1.0), torch.zeros_like(sh))
    score = (qa_weight * to_t(qa).double() + (1.0 - qa_weight) * to_t(cap).double()) * mm
    score = torch.where(valid, score, -inf)
    order = torch.sort(score, dim=1, descending=True, stable=True).indices
    out_i = I.clone()
    out_s = torch.where(I >= 0, S, torch.tensor(float("-inf"))).float()
    out_i[:, :H] = I[:, :H].gather(1, order)
    out_s[:, :H] = score.gather(1, order).float()
    return out_s, out_i
