"""octopus_topk, Triton: the weights kernel, then one program per (16 queries x BN rows) that
scores ``t . I`` and ``q_v . C``, fuses them, masks the reference, writes per-tile entropy
partials (max, sum e, sum e*x) and the tile's packed top keys; the host merges both."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._inputs import Gallery
from ._common import exclusion_mask, merge, on_device, pack_keys, product, tile_products, topk_launch
from .weights import octopus_weights

BLOCK_Q, BLOCK_D = 16, 32


@triton.jit
def _octopus_kernel(
    T,
    V,
    I,
    C,
    excl,
    part,
    ent,
    Q,
    N,
    D,
    lam,
    inv_tau,
    ex_value,
    HAS_V: tl.constexpr,
    HAS_EXCL: tl.constexpr,
    M: tl.constexpr,
    MP: tl.constexpr,
    BQ: tl.constexpr,
    BN: tl.constexpr,
    BD: tl.constexpr,
    KP: tl.constexpr,
):
    pid_q = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_q * BQ + tl.arange(0, BQ)
    cols = pid_n * BN + tl.arange(0, BN)
    row_ok = rows < Q
    col_ok = cols < N
    st = tile_products(T, rows, row_ok, I, cols, col_ok, D, BQ, BN, BD)
    s = st
    if HAS_V:
        sv = tile_products(V, rows, row_ok, C, cols, col_ok, D, BQ, BN, BD)
        s = lam * st + (1.0 - lam) * (sv * st)
    if HAS_EXCL:
        s = tl.where(exclusion_mask(excl, rows, row_ok, cols, M, MP), ex_value, s)
    s = tl.where(col_ok[None, :], s, float("-inf"))
    valid = s != float("-inf")
    x = s * inv_tau
    mx = tl.max(x, axis=1)
    has = mx != float("-inf")
    xs = tl.where(valid & has[:, None], x - tl.where(has, mx, 0.0)[:, None], 0.0)
    e = tl.where(valid & has[:, None], tl.exp(xs), 0.0)
    n_tiles = tl.num_programs(1)
    eoff = (rows * n_tiles + pid_n) * 3
    tl.store(ent + eoff, mx, mask=row_ok)
    tl.store(ent + eoff + 1, tl.sum(e, axis=1), mask=row_ok)
    tl.store(ent + eoff + 2, tl.sum(e * xs, axis=1), mask=row_ok)
    top = tl.topk(pack_keys(s, cols[None, :]), KP, dim=1)
    offs = (rows.to(tl.int64)[:, None] * n_tiles + pid_n) * KP + tl.arange(0, KP)[None, :]
    tl.store(part + offs, top, mask=row_ok[:, None])


def _merge_entropy(ent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine per-tile (max x, sum e, sum e*(x - max)) into the entropy and the log partition
    function of the whole row."""
    e = ent.double()
    mx, z, a = e[..., 0], e[..., 1], e[..., 2]
    m = mx.amax(dim=1, keepdim=True)
    ok = (mx != float("-inf")) & (m != float("-inf"))
    shift = torch.where(ok, mx - torch.where(m == float("-inf"), 0.0, m), torch.zeros_like(mx))
    scale = torch.where(ok, torch.exp(shift), torch.zeros_like(mx))
    Z = (scale * z).sum(dim=1)
    A = (scale * (a + shift * z)).sum(dim=1)
    Zs = torch.where(Z > 0, Z, torch.ones_like(Z))
    logz = torch.where(Z > 0, m[:, 0] + torch.log(Zs), torch.full_like(Z, float("-inf")))
    return torch.where(Z > 0, torch.log(Zs) - A / Zs, torch.zeros_like(Z)).float(), logz.float()


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
    images, captions = on_device(images), on_device(captions)
    if product(k) == "blas":
        from ..torch.octopus import octopus_topk as torch_octopus

        return torch_octopus(
            reference, proxies, target, visual, images, captions, k, lam, tau, entropy_tau, exclude, exclude_score
        )
    from ..torch.weights import octopus_query

    I = images.data
    dev = I.device
    P = proxies.to(device=dev, dtype=torch.float32)
    Q, K, D = P.shape
    N = I.shape[0]
    w = octopus_weights(reference, P, images, tau)
    t = ((octopus_query(P, w).double() + target.to(dev).double()) / 2.0).float().contiguous()
    v = t if visual is None else visual.to(device=dev, dtype=torch.float32).contiguous()
    C = I if captions is None else captions.data
    n_tiles, part, excl, ex_value, meta = topk_launch(Q, N, k, exclude, exclude_score, dev)
    ent = torch.empty((Q, n_tiles, 3), dtype=torch.float32, device=dev)
    _octopus_kernel[(triton.cdiv(Q, BLOCK_Q), n_tiles)](
        t,
        v,
        I,
        C,
        excl,
        part,
        ent,
        Q,
        N,
        D,
        float(lam),
        1.0 / entropy_tau,
        ex_value,
        HAS_V=visual is not None,
        BQ=BLOCK_Q,
        BD=BLOCK_D,
        **meta,
    )
    scores, ids = merge(part, k)
    return (scores, ids, w, *_merge_entropy(ent))
