"""promote_first_accepted, torch: gather with a per-row rotation of the prefix up to the first hit."""

from __future__ import annotations

import numpy as np
import torch

from ._common import to_t


def promote_first_accepted(ids: np.ndarray, scores: np.ndarray, accepted: np.ndarray, bonus: float):
    """See :func:`agentcir.kernels.promote_first_accepted`."""
    I, S = to_t(ids), to_t(scores)
    Q, L = I.shape
    A = min(accepted.shape[1], L)
    ok = to_t(accepted)[:, :A] & (I[:, :A] >= 0)
    has = ok.any(dim=1)
    hit = ok.int().argmax(dim=1)  # first True
    pos = torch.arange(L).expand(Q, L)
    src = torch.where(pos == 0, hit[:, None], torch.where(pos <= hit[:, None], pos - 1, pos))
    src = torch.where(has[:, None], src, pos)
    base = torch.where(I >= 0, S, torch.tensor(float("-inf"))).float()
    out_s = base.gather(1, src)
    out_s[:, 0] = torch.where(has, base.amax(dim=1) + bonus, out_s[:, 0])
    return out_s, I.gather(1, src)
