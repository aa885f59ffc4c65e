"""cosine_topk, Triton: one program per (16 queries x BN gallery rows) block; exact fp32
``tl.dot``, exclusion mask, packed keys, ``tl.topk`` per tile; the host merges the tiles."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._inputs import Gallery
from ._common import exclusion_mask, merge, on_device, pack_keys, product, tile_products, topk_launch

BLOCK_Q, BLOCK_D = 16, 32


@triton.jit
def _cosine_kernel(
    X,
    G,
    excl,
    part,
    Q,
    N,
    D,
    ex_value,
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
    acc = tile_products(X, rows, row_ok, G, cols, col_ok, D, BQ, BN, BD)
    if HAS_EXCL:
        acc = tl.where(exclusion_mask(excl, rows, row_ok, cols, M, MP), ex_value, acc)
    acc = tl.where(col_ok[None, :], acc, float("-inf"))
    top = tl.topk(pack_keys(acc, cols[None, :]), KP, dim=1)
    n_tiles = tl.num_programs(1)
    offs = (rows.to(tl.int64)[:, None] * n_tiles + pid_n) * KP + tl.arange(0, KP)[None, :]
    tl.store(part + offs, top, mask=row_ok[:, None])


def cosine_topk(
    queries: torch.Tensor, gallery: Gallery, k: int, exclude: torch.Tensor | None, exclude_score: float | None
):
    """See :func:`agentcir.kernels.cosine_topk`."""
    gallery = on_device(gallery)
    if product(k) == "blas":
        from ..torch.cosine import cosine_topk as torch_cosine_topk

        return torch_cosine_topk(queries, gallery, k, exclude, exclude_score)
    G = gallery.data
    dev = G.device
    X = queries.to(device=dev, dtype=torch.float32).contiguous()
    Q, D = X.shape
    N = G.shape[0]
    n_tiles, part, excl, ex_value, meta = topk_launch(Q, N, k, exclude, exclude_score, dev)
    _cosine_kernel[(triton.cdiv(Q, BLOCK_Q), n_tiles)](
        X, G, excl, part, Q, N, D, ex_value, BQ=BLOCK_Q, BD=BLOCK_D, **meta
    )
    return merge(part, k)
