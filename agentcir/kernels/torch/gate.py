"""uncertainty, torch: softmax entropy and top-2/top-1 margin per row, min-max over queries."""

from __future__ import annotations

import numpy as np
import torch

from ..reference import GATE_EPS
from ._common import to_t


def uncertainty(scores: np.ndarray, tau: float, entropy: np.ndarray | None) -> torch.Tensor:
    """See :func:`agentcir.kernels.uncertainty`."""
    S = to_t(scores).double()
    Q, L = S.shape
    valid = S != float("-inf")
    count = valid.sum(dim=1)
    top = S.topk(min(2, L), dim=1).values
    if L >= 2:
        ratio = (top[:, 1] / (top[:, 0] + GATE_EPS)).clamp(0.0, 1.0)
        ratio = torch.where(count >= 2, ratio, torch.zeros_like(ratio))
    else:
        ratio = torch.zeros(Q, dtype=torch.float64)
    if entropy is None:
        x = torch.where(valid, S / tau - (top[:, :1] / tau), torch.zeros_like(S))
        e = torch.where(valid, torch.exp(x), torch.zeros_like(S))
        z = e.sum(dim=1)
        H = torch.where(
            count > 0, torch.log(z.clamp_min(1e-300)) - (e * x).sum(dim=1) / z.clamp_min(1e-300), torch.zeros_like(z)
        )
    else:
        H = to_t(entropy).double()
    return (0.5 * _gate_minmax(H) + 0.5 * _gate_minmax(ratio)).float()


def _gate_minmax(x: torch.Tensor) -> torch.Tensor:
    return (x - x.min()) / (x.max() - x.min() + GATE_EPS)
