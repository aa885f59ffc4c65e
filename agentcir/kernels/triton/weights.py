"""octopus_weights, Triton: one program per (query, BN gallery rows): ``relu((f_ref - P_i) . I)``
summed over the tile into ``[Q, n_tiles, K]`` partials; the host sums them and applies the softmax."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._inputs import Gallery
from ._common import BLOCK_N, next_pow2, on_device, product, tile_products

BLOCK_D = 32


@triton.jit
def _gap_kernel(Dm, G, part, K, N, D, BK: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    q = tl.program_id(0)
    pid_n = tl.program_id(1)
    ks = tl.arange(0, BK)
    cols = pid_n * BN + tl.arange(0, BN)
    k_ok = ks < K
    col_ok = cols < N
    acc = tile_products(Dm, q * K + ks, k_ok, G, cols, col_ok, D, BK, BN, BD)
    gaps = tl.sum(tl.where(col_ok[None, :], tl.maximum(acc, 0.0), 0.0), axis=1)
    tl.store(part + (q * tl.num_programs(1) + pid_n) * K + ks, gaps, mask=k_ok)


def octopus_weights(reference: torch.Tensor, proxies: torch.Tensor, gallery: Gallery, tau: float) -> torch.Tensor:
    """See :func:`agentcir.kernels.octopus_weights`."""
    gallery = on_device(gallery)
    Q, K = proxies.shape[:2]
    if K == 1:  # softmax over one proxy is exactly 1: no pass over the gallery
        return torch.ones((Q, 1), dtype=torch.float32, device=gallery.data.device)
    return torch.softmax(octopus_gap_sums(reference, proxies, gallery) / (gallery.shape[0] * tau), dim=1).float()


def octopus_gap_sums(reference: torch.Tensor, proxies: torch.Tensor, gallery: Gallery) -> torch.Tensor:
    """See :func:`agentcir.kernels.octopus_gap_sums`."""
    gallery = on_device(gallery)
    if product() == "blas":
        from ..torch.weights import octopus_gap_sums as torch_gap_sums

        return torch_gap_sums(reference, proxies, gallery)
    G = gallery.data
    dev = G.device
    P = proxies.to(device=dev, dtype=torch.float32)
    Q, K, D = P.shape
    N = G.shape[0]
    Dm = (reference.to(device=dev, dtype=torch.float32)[:, None, :] - P).contiguous()
    n_tiles = triton.cdiv(N, BLOCK_N)
    part = torch.empty((Q, n_tiles, K), dtype=torch.float32, device=dev)
    _gap_kernel[(Q, n_tiles)](Dm, G, part, K, N, D, BK=max(16, next_pow2(K)), BN=BLOCK_N, BD=BLOCK_D)
    return part.double().sum(dim=1)
