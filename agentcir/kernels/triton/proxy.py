"""proxy_scores_topk, Triton: one program per (query, BN gallery rows): the K proxy rows in one
``tl.dot``, reduced over K (mean / max / logsumexp) in registers, packed keys, ``tl.topk``."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._inputs import Gallery
from ._common import merge, next_pow2, on_device, pack_keys, product, tile_products, topk_launch
from .cosine import cosine_topk
from .weights import octopus_weights

BLOCK_D = 32
AGG_CODES = {"mean": 0, "max": 1, "logsumexp": 2}


@triton.jit
def _proxy_kernel(
    P,
    G,
    excl,
    part,
    K,
    N,
    D,
    ex_value,
    tau,
    AGG: tl.constexpr,
    HAS_EXCL: tl.constexpr,
    M: tl.constexpr,
    MP: tl.constexpr,
    BK: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    KP: tl.constexpr,
):
    q = tl.program_id(0)
    pid_n = tl.program_id(1)
    ks = tl.arange(0, BK)
    cols = pid_n * BN + tl.arange(0, BN)
    k_ok = ks < K
    col_ok = cols < N
    acc = tile_products(P, q * K + ks, k_ok, G, cols, col_ok, D, BK, BN, BD)
    if AGG == 0:
        s = tl.sum(tl.where(k_ok[:, None], acc, 0.0), axis=0) / K
    else:
        s = tl.max(tl.where(k_ok[:, None], acc, float("-inf")), axis=0)
        if AGG == 2:
            e = tl.where(k_ok[:, None], tl.exp((acc - s[None, :]) / tau), 0.0)
            s = s + tau * tl.log(tl.sum(e, axis=0))
    if HAS_EXCL:
        ms = tl.arange(0, MP)
        ex = tl.load(excl + q * M + ms, mask=ms < M, other=-1)
        hit = tl.max((ex[None, :] == cols[:, None]).to(tl.int32), axis=1) > 0
        s = tl.where(hit, ex_value, s)
    s = tl.where(col_ok, s, float("-inf"))
    top = tl.topk(pack_keys(s, cols), KP)
    tl.store(part + (q * tl.num_programs(1) + pid_n) * KP + tl.arange(0, KP), top)


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
    gallery = on_device(gallery)
    G = gallery.data
    dev = G.device
    P = proxies.to(device=dev, dtype=torch.float32).contiguous()
    if agg == "octopus":
        from ..torch.weights import octopus_query

        w = octopus_weights(reference, P, gallery, tau)
        return cosine_topk(octopus_query(P, w), gallery, k, exclude, exclude_score)
    if product(k) == "blas":
        from ..torch.proxy import proxy_scores_topk as torch_proxy

        return torch_proxy(proxies, gallery, k, agg, tau, reference, exclude, exclude_score)
    Q, K, D = P.shape
    N = G.shape[0]
    n_tiles, part, excl, ex_value, meta = topk_launch(Q, N, k, exclude, exclude_score, dev)
    _proxy_kernel[(Q, n_tiles)](
        P,
        G,
        excl,
        part,
        K,
        N,
        D,
        ex_value,
        float(tau),
        AGG=AGG_CODES[agg],
        BK=max(16, next_pow2(K)),
        BD=BLOCK_D,
        **meta,
    )
    return merge(part, k)
