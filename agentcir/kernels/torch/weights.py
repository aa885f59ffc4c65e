"""octopus_weights, torch: gaps ``(f_ref - P_i) . I_tile`` per tile, relu-summed; softmax at the end."""

from __future__ import annotations

import torch

from .._inputs import Gallery
from ._common import as_device, device_tile_rows, tiles


def octopus_weights(reference: torch.Tensor, proxies: torch.Tensor, gallery: Gallery, tau: float) -> torch.Tensor:
    """See :func:`agentcir.kernels.octopus_weights`."""
    dev = gallery.data.device
    P = as_device(proxies, dev)
    Q, K, d = P.shape
    if K == 1:  # softmax over one proxy is exactly 1: no pass over the gallery
        return torch.ones((Q, 1), dtype=torch.float32, device=dev)
    return torch.softmax(octopus_gap_sums(reference, P, gallery) / (gallery.shape[0] * tau), dim=1).float()


def octopus_gap_sums(reference: torch.Tensor, proxies: torch.Tensor, gallery: Gallery) -> torch.Tensor:
    """See :func:`agentcir.kernels.octopus_gap_sums`."""
    dev = gallery.data.device
    P = as_device(proxies, dev)
    Q, K, d = P.shape
    N = gallery.shape[0]
    D = (as_device(reference, dev)[:, None, :] - P).reshape(Q * K, d)
    acc = torch.zeros(Q * K, dtype=torch.float64, device=dev)
    for _, _, Gt in tiles(gallery, device_tile_rows(Q * K, d, N, dev)):
        acc += torch.relu(D @ Gt.T).sum(dim=1).double()
    return acc.view(Q, K)


def octopus_query(proxies: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``e = norm(sum_i w_i P_i)`` (float32 ``[Q, d]``)."""
    e = (weights.double()[:, :, None] * proxies.double()).sum(dim=1)
    return (e / e.norm(dim=1, keepdim=True).clamp_min(1e-12)).float()
