"""The ``blas`` product path where numba threads cannot call the BLAS (:func:`._sgemm.find` gives
None): numpy's ``matmul`` on whole gallery tiles, each tile folded in serially.

``tiles`` yields ``X_m @ float32(G_m[a:b]).T`` for a few float32 row blocks, computed by numpy's
``matmul`` (the BLAS numpy was built with: OpenBLAS picks its kernels per ISA at run time, MKL
and Accelerate likewise), as faiss does. A float16 / bfloat16 tile is first widened exactly into
a float32 buffer of ``BLAS_TILE_BYTES`` (an int8 tile: its codes times the row scales) (a serial numba pass: cache-resident, no second thread
pool). The passes after the product (selection, aggregation, fusion) are the numba backend's
own, run serial: a parallel numba region right after a BLAS call would wait for the BLAS
threads to go idle (``_common`` "Threads"), and those passes are cheap next to the product.

Which path a call takes is decided by :func:`agentcir.kernels.tune.choose`, measured per CPU,
dtype and shape class by :func:`._measure.measure`.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
from numba import njit

from .. import _tiling
from .._inputs import Gallery
from ._common import KIND_CODES, new_heaps, patch_excluded, row_f32, select_row, sorted_from_heaps

#: bytes of the [rows, tile] float32 score block of one BLAS call (L2 / L3 resident for the pass after it)
SCORE_BYTES = 2 << 20
#: bytes of a widened (half -> float32) gallery tile
BLAS_TILE_BYTES = 4 << 20
MIN_ROWS, MAX_ROWS = 256, 16384


def tile_rows(rows: int, d: int, N: int) -> int:
    """Gallery rows per BLAS tile: the score block within ``SCORE_BYTES`` and a widened tile within
    ``BLAS_TILE_BYTES`` (a multiple of 256 between 256 and 16384); ``_tiling.TILE_OVERRIDE`` wins (tests)."""
    if _tiling.TILE_OVERRIDE:
        return max(1, min(_tiling.TILE_OVERRIDE, N))
    t = min(SCORE_BYTES // (4 * max(rows, 1)), BLAS_TILE_BYTES // (4 * max(d, 1)))
    t = max(MIN_ROWS, min(MAX_ROWS, t)) // MIN_ROWS * MIN_ROWS
    return max(1, min(t, N))


@njit(cache=True)
def widen(G, kind, start, stop, out):
    """``out[:stop-start] = float32(G[start:stop])`` (kind 1 float16 bits, 2 bfloat16 bits; exact)."""
    for r in range(stop - start):
        row_f32(G, start + r, kind, out[r])


@njit(cache=True)
def dequantize(C, scales, start, stop, out):
    """``out[:stop-start] = scales[r] * float32(C[r])`` for the int8 rows ``start..stop``."""
    for r in range(stop - start):
        src = C[start + r]
        dst = out[r]
        s = scales[start + r]
        for j in range(src.shape[0]):
            dst[j] = np.float32(src[j]) * s


def tiles(
    gallery: Gallery, mats: Sequence[np.ndarray], tile: int, galleries: Sequence[Gallery] | None = None
) -> Iterator[tuple[int, int, list[np.ndarray]]]:
    """Yield ``(start, stop, [mats[m] @ float32(G_m[start:stop]).T])`` (float32 ``[rows_m, stop - start]``),
    like :func:`._tiles.exact_tiles`; buffers are reused: consume each tile before the next."""
    gals = list(galleries) if galleries is not None else [gallery] * len(mats)
    N, d = gallery.shape
    xs = [np.ascontiguousarray(m, dtype=np.float32) for m in mats]
    flat = [np.empty(x.shape[0] * tile, dtype=np.float32) for x in xs]
    wide = np.empty((tile, d), dtype=np.float32) if any(g.kind != "float32" for g in gals) else None
    for start in range(0, N, tile):
        stop = min(N, start + tile)
        T = stop - start
        outs = []
        for x, g, buf in zip(xs, gals, flat):
            S = buf[: x.shape[0] * T].reshape(x.shape[0], T)
            if g.kind == "float32":
                np.matmul(x, g.data[start:stop].T, out=S)
            elif g.kind == "int8":
                dequantize(g.data, g.scales, start, stop, wide)
                np.matmul(x, wide[:T].T, out=S)
            else:
                widen(g.data, KIND_CODES[g.kind], start, stop, wide)
                np.matmul(x, wide[:T].T, out=S)
            outs.append(S)
        yield start, stop, outs


@njit(cache=True)
def select_tile(S, start, excl, ex_value, hs, hi, cnt):
    """Offer every row ``q`` of the score tile to heap ``q`` (serial), exclusions patched first."""
    for q in range(S.shape[0]):
        row = S[q]
        if excl.shape[1]:
            patch_excluded(row, q, start, excl, ex_value)
        cnt[q] = select_row(row, start, hs[q], hi[q], cnt[q])


def topk(X: np.ndarray, gallery: Gallery, k: int, excl: np.ndarray, ex_value: np.float32):
    """Top-k of ``X @ float32(G).T``: BLAS tiles, each folded into the running heaps."""
    Q = X.shape[0]
    hs, hi, cnt = new_heaps(Q, k)
    N, d = gallery.shape
    for start, _, (S,) in tiles(gallery, [X], tile_rows(Q, d, N)):
        select_tile(S, start, excl, ex_value, hs, hi, cnt)
    return sorted_from_heaps(hs, hi, cnt)
