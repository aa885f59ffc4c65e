"""Shared pieces of the Triton ops: device-side key packing / tile top-k, host-side merge.

Each program scores a block of queries against a block of ``BN`` gallery rows, packs
``(score, id)`` into int64 keys (``(monotone_int32(score) << 32) | (2^31-1-id)``, so key
order = score descending then lower id), and keeps the tile's best ``KP`` keys with
``tl.topk`` in a partial buffer ``[Q, n_tiles, KP]``; the host merges the partials with
one ``torch.topk``. Extra memory is ``Q * n_tiles * KP`` keys: O(Q * N * k / BN), never
``[Q, N]`` for ``k << BN``.

Products are exact float32 (``input_precision="ieee"``, half tiles widened on load), so
the Triton backend ranks exactly like the others. Tested under ``TRITON_INTERPRET=1`` on
small shapes; launchable on CUDA (``benchmarks/gpu_check.py``).

Which product a gallery op uses (:func:`product`): ``blas`` by default, the torch backend's op
on the device (cuBLAS tile products, then on-device selection, few large tiles), or ``loop``,
these Triton kernels (less memory: no ``[Q, tile]`` block, but on an H200 1.2-3.1x slower than
the cuBLAS path at the benchmark shapes: ``triton/README.md``).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .. import tune
from .._inputs import Gallery

INT64_MIN = torch.iinfo(torch.int64).min
#: gallery rows per program and the largest k done on the device (beyond it the torch
#: backend's running top-k is used instead; see README "Triton")
BLOCK_N = 128
MAX_DEVICE_K = 256


#: the product path of the GPU ops when none is forced (see :func:`product`)
GPU_PRODUCT = "blas"


def product(k: int = 1) -> str:
    """``loop`` (the Triton kernels) or ``blas`` (the torch backend's op on the device) for top-``k``:
    the path forced by ``$AGENTCIR_KERNELS_PRODUCT`` (:func:`agentcir.kernels.tune.forced`), else
    :data:`GPU_PRODUCT`; ``blas`` whenever ``k`` exceeds what a tile keeps on the device
    (:data:`MAX_DEVICE_K`)."""
    if next_pow2(k) > MAX_DEVICE_K:
        return "blas"
    return tune.forced() or GPU_PRODUCT


def on_device(gallery: Gallery | None) -> Gallery | None:
    """The gallery on the CUDA device (copied there when it came as a CPU array: pass a CUDA
    tensor to avoid the copy). Under the interpreter a private copy: the interpreter writes
    every tensor argument back after a launch, which a read-only memory map cannot take."""
    if gallery is None or gallery.data.is_cuda:
        return gallery
    if os.environ.get("TRITON_INTERPRET") == "1":
        return Gallery(gallery.data.clone(), gallery.kind)
    return Gallery(gallery.data.cuda(), gallery.kind)


def next_pow2(x: int) -> int:
    return 1 << max(0, int(x) - 1).bit_length()


def block_n(k: int) -> tuple[int, int]:
    """(BN, KP): gallery rows per program and keys kept per tile (powers of two, KP <= BN)."""
    kp = next_pow2(k)
    return max(BLOCK_N, kp), kp


@triton.jit
def tile_products(X, rows, row_ok, G, cols, col_ok, D, BR: tl.constexpr, BN: tl.constexpr, BD: tl.constexpr):
    """``[BR, BN]`` exact float32 products of rows ``rows`` of ``X`` ``[*, D]`` with gallery rows
    ``cols`` of ``G`` (half-precision tiles widened on load); masked rows and columns give 0."""
    acc = tl.zeros((BR, BN), dtype=tl.float32)
    for d0 in range(0, D, BD):
        ds = d0 + tl.arange(0, BD)
        d_ok = ds < D
        x = tl.load(X + rows[:, None] * D + ds[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        g = tl.load(
            G + cols.to(tl.int64)[:, None] * D + ds[None, :], mask=col_ok[:, None] & d_ok[None, :], other=0.0
        ).to(tl.float32)
        acc += tl.dot(x, tl.trans(g), input_precision="ieee")
    return acc


@triton.jit
def pack_keys(scores, cols):
    """int64 keys of float32 ``scores`` at gallery ids ``cols``; ``-inf`` -> INT64_MIN."""
    s = scores + 0.0
    b = s.to(tl.int32, bitcast=True)
    m = b ^ ((b >> 31) & 0x7FFFFFFF)
    key = (m.to(tl.int64) << 32) | (0x7FFFFFFF - cols).to(tl.int64)
    return tl.where(s == float("-inf"), -9223372036854775808, key)


@triton.jit
def exclusion_mask(excl_ptr, rows, row_ok, cols, M: tl.constexpr, MP: tl.constexpr):
    """``[BQ, BN]`` True where gallery id ``cols`` is in row ``rows``'s exclude list."""
    ms = tl.arange(0, MP)
    ex = tl.load(excl_ptr + rows[:, None] * M + ms[None, :], mask=row_ok[:, None] & (ms[None, :] < M), other=-1)
    return tl.max((ex[:, None, :] == cols[None, :, None]).to(tl.int32), axis=2) > 0


def decode(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 keys -> (float32 scores, int32 ids); INT64_MIN -> (-inf, -1)."""
    hi = (keys >> 32).to(torch.int32)
    bits = hi ^ ((hi >> 31) & 0x7FFFFFFF)
    scores = bits.view(torch.float32).clone()
    ids = (0x7FFFFFFF - (keys & 0xFFFFFFFF)).to(torch.int32)
    pad = keys == INT64_MIN
    scores[pad] = float("-inf")
    ids[pad] = -1
    return scores, ids


def merge(partial: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[Q, n_tiles, KP]`` keys -> top-k (scores, ids) ``[Q, k]``, padded."""
    Q = partial.shape[0]
    flat = partial.reshape(Q, -1)
    kk = min(k, flat.shape[1])
    top = flat.topk(kk, dim=1).values
    if kk < k:
        top = torch.cat([top, torch.full((Q, k - kk), INT64_MIN, dtype=torch.int64, device=top.device)], dim=1)
    return decode(top)


def topk_launch(
    Q: int, N: int, k: int, exclude: torch.Tensor | None, exclude_score: float | None, device: torch.device
) -> tuple[int, torch.Tensor, torch.Tensor, float, dict]:
    """What every top-k kernel launch shares: ``(n_tiles, part, excl, ex_value, meta)``.

    ``part`` is the ``[Q, n_tiles, KP]`` key buffer :func:`merge` reads; ``excl`` the int32
    ``[Q, M]`` exclude ids on the device (a 1-column dummy when there are none); ``meta`` the
    constexpr arguments ``HAS_EXCL, M, MP, BN, KP``.
    """
    BN, KP = block_n(k)
    n_tiles = triton.cdiv(N, BN)
    part = torch.empty((Q, n_tiles, KP), dtype=torch.int64, device=device)
    if exclude is None:
        excl, M = torch.full((1, 1), -1, dtype=torch.int32, device=device), 0
    else:
        excl, M = exclude.to(device=device, dtype=torch.int32).contiguous(), int(exclude.shape[1])
    ex_value = float("-inf") if exclude_score is None else float(exclude_score)
    meta = {"HAS_EXCL": M > 0, "M": max(M, 1), "MP": next_pow2(max(M, 1)), "BN": BN, "KP": KP}
    return n_tiles, part, excl, ex_value, meta
