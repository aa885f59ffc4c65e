"""cosine_topk, torch: tile product ``X @ G_tile.T`` (float32), then a running top-k on the device."""

from __future__ import annotations

import torch

from .._inputs import Gallery
from ._common import RunningTopK, as_device, device_tile_rows, exclusion_value, patch_excluded, tiles


def cosine_topk(
    queries: torch.Tensor, gallery: Gallery, k: int, exclude: torch.Tensor | None, exclude_score: float | None
):
    """See :func:`agentcir.kernels.cosine_topk`."""
    dev = gallery.data.device
    X = as_device(queries, dev)
    N, d = gallery.shape
    top = RunningTopK(X.shape[0], k, dev)
    value = exclusion_value(exclude_score)
    for start, _, Gt in tiles(gallery, device_tile_rows(X.shape[0], d, N, dev)):
        top.push(patch_excluded(X @ Gt.T, start, exclude, value), start)
    return top.result()
