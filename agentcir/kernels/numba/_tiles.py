"""Gallery tiles for the numba ops: "a blocked product on a gallery tile, then a numba pass on that tile".

:func:`exact_tiles` yields ``X_m @ float32(G[a:b]).T`` for a few float32 row blocks
``X_m``: fp32 products of sub-tiles in parallel on numba's thread pool, by the register-tiled
kernel of :mod:`._gemm` or by one ``cblas_sgemm`` per sub-tile (:mod:`._sgemm`; the BLAS on one
thread meanwhile, so no second thread pool competes for the cores); half-precision and int8
sub-tiles are widened into a float32 buffer first.
:func:`coarse_tiles` yields the same products from torch's bfloat16 matmul (AMX /
AVX512-BF16: fp32 accumulation, bf16 output), with each query row split into a bf16 high
part and a bf16 low part (``x = hi + lo`` to ~16 bits), so only the gallery's rounding to
bf16 and the output rounding remain. Only the OCTOPUS proxy weights (a mean over the
whole gallery) use it, and only for large half-precision galleries (README.md "Precision").

:func:`product_tiles` yields the same products by the ``loop`` or the ``blas`` path, as
:mod:`agentcir.kernels.tune` chooses (``blas``: ``cblas_sgemm`` per sub-tile on numba's threads,
:mod:`._sgemm`, or numpy's product on whole tiles where no library is callable, :mod:`._blas`).

Buffers are reused from tile to tile: consume each yielded tile before the next.
Peak extra memory is O(rows x tile + tile x d), never O(rows x N).
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from typing import Iterator, Sequence

import numpy as np
from numba import njit

from .. import tune
from .._inputs import Gallery
from . import _blas, _sgemm
from ._common import KIND_CODES, f16_to_f32
from ._gemm import fused_sub_rows, gallery_args, pack_rows, product, sub_rows
from ._threads import balanced


@lru_cache(maxsize=1)
def _torch():
    """torch when it imports (the bfloat16 products of :func:`coarse_tiles`), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


@lru_cache(maxsize=1)
def has_fast_bf16() -> bool:
    """torch present and the CPU multiplies bfloat16 natively (AMX or AVX512-BF16)."""
    torch = _torch()
    if torch is None:
        return False
    cpu = getattr(torch, "cpu", None)
    try:
        return bool(cpu._is_amx_tile_supported() or cpu._is_avx512_bf16_supported())
    except AttributeError:
        return False


@lru_cache(maxsize=1)
def coarse_is_faster() -> bool:
    """Whether the bfloat16 ``coarse_tiles`` product beats the fp32 blocked numba product here:
    with AMX tiles (Sapphire Rapids: ~3.5x the fp32 rate). With AVX512-BF16 alone (AMD Zen 4/5)
    the hi/lo split doubles the rows and cancels bf16's 2x rate (measured on an EPYC: 2.3 s vs
    1.5 s for the Q=64 K=10 N=100k weight pass), so the exact numba product runs instead."""
    torch = _torch()
    if torch is None or not has_fast_bf16():
        return False
    try:
        return bool(torch.cpu._is_amx_tile_supported())
    except AttributeError:
        return False


def _t(a: np.ndarray):
    torch = _torch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only memory maps are only read here
        return torch.from_numpy(a)


def exact_tiles(
    gallery: Gallery,
    mats: Sequence[np.ndarray],
    tile: int,
    galleries: Sequence[Gallery] | None = None,
    blas: _sgemm.Sgemm = _sgemm.LOOP,
) -> Iterator[tuple[int, int, list[np.ndarray]]]:
    """Yield ``(start, stop, [mats[m] @ float32(G_m[start:stop]).T])`` (float32 ``[rows_m, stop - start]``),
    each tile's sub-tiles multiplied in parallel by the microkernels, or by ``cblas_sgemm`` with ``blas``.

    ``galleries`` (default: ``gallery`` for every block) gives each row block its own
    gallery of the same shape, e.g. OCTOPUS's image and caption matrices.
    """
    gals = list(galleries) if galleries is not None else [gallery] * len(mats)
    N, d = gallery.shape
    rows = [np.ascontiguousarray(m, dtype=np.float32) for m in mats]
    packed = [pack_rows(m) for m in rows]
    flat = [np.empty(p.shape[0] * p.shape[2] * tile, dtype=np.float32) for p in packed]
    for start in range(0, N, tile):
        stop = min(N, start + tile)
        T = stop - start
        outs = []
        for m, p, g, buf in zip(rows, packed, gals, flat):
            S = buf[: p.shape[0] * p.shape[2] * T].reshape(p.shape[0] * p.shape[2], T)
            sub = fused_sub_rows(m.shape[0], d, True) if blas.address else sub_rows(d)
            with balanced(), _sgemm.calling(blas):
                data, kind, scales = gallery_args(g)
                product(p, data, kind, start, stop, sub, S, scales, m, blas)
            outs.append(S[: m.shape[0]])
        yield start, stop, outs


def product_tiles(
    gallery: Gallery, mats: Sequence[np.ndarray], tile: int, galleries: Sequence[Gallery] | None = None
) -> tuple[bool, Iterator[tuple[int, int, list[np.ndarray]]]]:
    """``(serial, tiles)``: the tiles of :func:`exact_tiles` (``tile`` rows) by the product path
    :func:`agentcir.kernels.tune.choose` picks for the gallery's dtype and the rows of ``mats``, or,
    for ``blas`` without a callable ``cblas_sgemm`` (:mod:`._sgemm`), those of :func:`._blas.tiles`
    (its own tile size); ``serial`` tells the caller to run its pass after each tile serial (a BLAS
    thread pool has just run)."""
    rows = sum(m.shape[0] for m in mats)
    blas = _sgemm.for_path(tune.choose(gallery.kind, rows))
    if blas is None:
        N, d = gallery.shape
        return True, _blas.tiles(gallery, mats, _blas.tile_rows(rows, d, N), galleries)
    return False, exact_tiles(gallery, mats, tile, galleries, blas)


@njit(inline="always", cache=True)
def _f32_to_bf16_bits(f):
    u = np.float32(f).view(np.uint32)
    return np.uint16((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))


@njit(cache=True)
def _to_bf16_bits(G, start, stop, kind, out):
    """``out[:stop-start]`` = bfloat16 bits (round to nearest even) of gallery rows (kind 0 fp32, 1 fp16)."""
    for r in range(stop - start):
        src = G[start + r]
        dst = out[r]
        for j in range(src.shape[0]):
            if kind == 1:
                dst[j] = _f32_to_bf16_bits(f16_to_f32(src[j]))
            else:
                dst[j] = _f32_to_bf16_bits(src[j])


def coarse_tiles(gallery: Gallery, X: np.ndarray, tile: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """Yield ``(start, stop, bits)``: ``bits`` ``[2R, T]`` bfloat16 holds ``hi @ G_tile.T`` in
    rows ``:R`` and ``lo @ G_tile.T`` in rows ``R:`` (``X = hi + lo``; add the two halves)."""
    torch = _torch()
    N, d = gallery.shape
    x = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
    hi = x.to(torch.bfloat16)
    xb = torch.cat([hi, (x - hi.float()).to(torch.bfloat16)])
    out = torch.empty(xb.shape[0] * tile, dtype=torch.bfloat16)
    conv = None if gallery.kind == "bfloat16" else np.empty((tile, d), dtype=np.uint16)
    for start in range(0, N, tile):
        stop = min(N, start + tile)
        T = stop - start
        if conv is None:
            bits = gallery.data[start:stop]
        else:
            _to_bf16_bits(gallery.data, start, stop, KIND_CODES[gallery.kind], conv)
            bits = conv[:T]
        gb = _t(bits.view(np.int16)).view(torch.bfloat16)
        o = out[: xb.shape[0] * T].view(xb.shape[0], T)
        torch.mm(xb, gb.t(), out=o)
        yield start, stop, o.view(torch.int16).numpy().view(np.uint16)
