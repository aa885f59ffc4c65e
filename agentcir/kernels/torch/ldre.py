"""ldre_weights, torch: drops ``(b - e_i) . I_tile`` per tile, a running top-m of their relu."""

from __future__ import annotations

import torch

from .._inputs import Gallery
from ._common import as_device, device_tile_rows, tiles


def ldre_weights(before: torch.Tensor, proxies: torch.Tensor, gallery: Gallery, topk: int, tau: float) -> torch.Tensor:
    """See :func:`agentcir.kernels.ldre_weights`."""
    s = ldre_top_drops(before, proxies, gallery, topk).double().sum(dim=2)
    mx = s.max(dim=1, keepdim=True).values
    x = torch.where(mx > 0, s / torch.where(mx > 0, mx, torch.ones_like(mx)) / tau, torch.zeros_like(s))
    return torch.softmax(x, dim=1).float()


def ldre_top_drops(before: torch.Tensor, proxies: torch.Tensor, gallery: Gallery, topk: int) -> torch.Tensor:
    """See :func:`agentcir.kernels.ldre_top_drops`."""
    dev = gallery.data.device
    P = as_device(proxies, dev)
    Q, K, d = P.shape
    N = gallery.shape[0]
    m = min(topk, N)
    D = (as_device(before, dev)[:, None, :] - P).reshape(Q * K, d)
    best = torch.zeros(Q * K, m, dtype=torch.float32, device=dev)
    for _, _, Gt in tiles(gallery, device_tile_rows(Q * K, d, N, dev)):
        drops = torch.relu(D @ Gt.T)
        best = torch.topk(torch.cat([best, drops], dim=1), m, dim=1).values
    return best.view(Q, K, m)
