"""proxy_scores_topk, torch: ``[Q*K, tile]`` products reduced over K per tile, running top-k
(``mean`` is linear: the mean proxy is scored with :mod:`.cosine`)."""

from __future__ import annotations

import torch

from .._inputs import Gallery
from ._common import RunningTopK, as_device, device_tile_rows, exclusion_value, patch_excluded, tiles
from .cosine import cosine_topk
from .weights import octopus_query, octopus_weights


def proxy_scores_topk(
    proxies: torch.Tensor,
    gallery: Gallery,
    k: int,
    agg: str,
    tau: float,
    reference: torch.Tensor | None,
    exclude: torch.Tensor | None,
    exclude_score: float | None,
):
    """See :func:`agentcir.kernels.proxy_scores_topk`."""
    dev = gallery.data.device
    P = as_device(proxies, dev)
    if agg == "octopus":
        w = octopus_weights(reference, P, gallery, tau)
        return cosine_topk(octopus_query(P, w), gallery, k, exclude, exclude_score)
    if agg == "mean":  # linear: mean_i (P_i . g) = (mean_i P_i) . g, one row per query instead of K
        return cosine_topk(P.double().mean(dim=1).float(), gallery, k, exclude, exclude_score)
    Q, K, d = P.shape
    X = P.reshape(Q * K, d)
    top = RunningTopK(Q, k, dev)
    value = exclusion_value(exclude_score)
    for start, _, Gt in tiles(gallery, device_tile_rows(Q * K, d, gallery.shape[0], dev)):
        S = (X @ Gt.T).view(Q, K, -1)
        if agg == "mean":
            A = S.mean(dim=1)
        elif agg == "max":
            A = S.amax(dim=1)
        else:
            A = tau * torch.logsumexp(S / tau, dim=1)
        top.push(patch_excluded(A, start, exclude, value), start)
    return top.result()
