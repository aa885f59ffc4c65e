"""octopus_topk, torch: weights pass, then image and caption tiles in lockstep: fused scores,
reference mask, streamed entropy and running top-k on the device."""

from __future__ import annotations

from .._inputs import Gallery
from ._common import RunningEntropy, RunningTopK, as_device, device_tile_rows, exclusion_value, patch_excluded, tiles
from .weights import octopus_query, octopus_weights


def octopus_topk(
    reference,
    proxies,
    target,
    visual,
    images: Gallery,
    captions: Gallery | None,
    k: int,
    lam: float,
    tau: float,
    entropy_tau: float,
    exclude,
    exclude_score: float | None,
):
    """See :func:`agentcir.kernels.octopus_topk`."""
    dev = images.data.device
    P = as_device(proxies, dev)
    Q, K, d = P.shape
    w = octopus_weights(reference, P, images, tau)
    t = ((octopus_query(P, w).double() + as_device(target, dev).double()) / 2.0).float()
    v = as_device(visual, dev)
    top = RunningTopK(Q, k, dev)
    ent = RunningEntropy(Q, entropy_tau, dev)
    value = exclusion_value(exclude_score)
    tile = device_tile_rows(2 * Q, d, images.shape[0], dev)
    caps = tiles(captions, tile) if captions is not None else None
    for start, _, It in tiles(images, tile):
        S = t @ It.T
        if caps is not None:
            Ct = next(caps)[2]
            S = lam * S + (1.0 - lam) * ((v @ Ct.T) * S)
        S = patch_excluded(S, start, exclude, value)
        ent.push(S)
        top.push(S, start)
    scores, ids = top.result()
    return scores, ids, w, ent.result(), ent.log_partition()
