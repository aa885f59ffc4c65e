"""Register-blocked tile products in numba: ``S = X @ float32(G[a:b]).T`` without BLAS (the ``loop``
product path; the other, ``blas``, is :mod:`._blas`; :mod:`agentcir.kernels.tune` measures which is
faster per CPU, dtype and shape class).

Where it wins: on CPUs where the BLAS library is limited to AVX2 (OpenBLAS built or
configured for Haswell, MKL on AMD), or where its thread pool spins next to numba's
(two runtimes on two cores, see :mod:`._threads`), a BLAS tile product is both slower and
less predictable than this kernel. Here one block computes the 4 x ``RB`` dot products of 4
query rows with ``RB`` gallery rows in one loop over ``d``, and a half-precision row is widened
inside that loop (F16C ``vcvtph2ps`` or a shift for bfloat16), so float16 / bfloat16 galleries
need no widening pass and read half the bytes. Gallery sub-tiles of ``SUB_BYTES`` stay in the
core's L2 cache while every query block sweeps them.

The block's width follows the vector registers of the CPU numba compiles for
(:func:`wide_registers`): with AVX-512's 32, 4 x 6 (24 vector accumulators: 10 loads per 24
fused multiply-adds, so the FMA units, not the loads, bound it); with AVX2's 16 (or NEON's 32
narrow ones), 4 x 3: 12 accumulators that stay in registers where 24 would spill. Measured on
an AMD EPYC Zen 4 (64 and 640 query rows over 60k x 512): 4 x 6 160-180 GFLOP/s natively, 3-9%
ahead of 4 x 3; with AVX2 forced, 4 x 3 156-177 GFLOP/s against 83-114 for 4 x 6.

Arithmetic: float32 products, float32 accumulation in 16 lanes (reassociated), so a score
can differ from a BLAS or float64 score by rounding only (~1e-6 relative); the tests compare
with the float64 reference under the per-dtype tolerance and the tie rule of README.md.

``X`` must have a multiple of ``QB`` rows (:func:`pad_rows`); extra rows score zero.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .. import _tiling
from ._common import FASTMATH, _same, bf16_to_f32, f16_to_f32, i8_to_f32, target_has


def wide_registers() -> bool:
    """Whether the CPU numba compiles for has AVX-512's 32 wide vector registers
    (:func:`._common.target_has`: AVX2 forced on an AVX-512 host has not)."""
    return target_has("avx512f")


#: query rows and gallery rows of one register block (the gallery rows per CPU: module docstring)
QB, RB = 4, (6 if wide_registers() else 3)
#: bytes of gallery rows that one query-block sweep keeps in L2 (half of a 1 MB L2)
SUB_BYTES = 512 << 10
#: gallery chunks per thread of the fused kernels (dynamic scheduling evens out a busy core)
CHUNKS_PER_THREAD = 8


def sub_rows(d: int, itemsize: int) -> int:
    """Gallery rows of an L2-resident sub-tile: ``SUB_BYTES`` worth, a multiple of ``RB``, at least ``RB``
    (``_tiling.TILE_OVERRIDE``, set by the tests, forces odd sub-tiles too)."""
    if _tiling.TILE_OVERRIDE:
        return _tiling.TILE_OVERRIDE
    return max(RB, SUB_BYTES // max(1, d * itemsize) // RB * RB)


def fused_sub_rows(rows: int, d: int, itemsize: int) -> int:
    """Sub-tile rows of a fused kernel that also holds a ``[rows, sub]`` float32 score block:
    :func:`sub_rows`, lowered so that the block stays within ``SUB_BYTES / 2``."""
    sub = sub_rows(d, itemsize)
    if _tiling.TILE_OVERRIDE:
        return sub
    return max(RB, min(sub, (SUB_BYTES // 2) // (4 * max(rows, 1)) // RB * RB))


def pad_rows(X: np.ndarray) -> np.ndarray:
    """``X`` (float32 ``[R, d]``) with zero rows appended up to a multiple of ``QB`` rows (a copy only then)."""
    R = X.shape[0]
    if R % QB == 0:
        return np.ascontiguousarray(X, dtype=np.float32)
    out = np.zeros((R + QB - R % QB, X.shape[1]), dtype=np.float32)
    out[:R] = X
    return out


def _block46_loop(conv):
    def block(X, G, q, r, S, c):
        """``S[q + a, c + b] = X[q + a] . conv(G[r + b])`` for a < 4, b < 6."""
        x0, x1, x2, x3 = X[q], X[q + 1], X[q + 2], X[q + 3]
        g0, g1, g2, g3, g4, g5 = G[r], G[r + 1], G[r + 2], G[r + 3], G[r + 4], G[r + 5]
        s00 = s01 = s02 = s03 = s04 = s05 = np.float32(0.0)
        s10 = s11 = s12 = s13 = s14 = s15 = np.float32(0.0)
        s20 = s21 = s22 = s23 = s24 = s25 = np.float32(0.0)
        s30 = s31 = s32 = s33 = s34 = s35 = np.float32(0.0)
        for j in range(X.shape[1]):
            a0, a1, a2, a3 = x0[j], x1[j], x2[j], x3[j]
            b0, b1, b2 = conv(g0[j]), conv(g1[j]), conv(g2[j])
            b3, b4, b5 = conv(g3[j]), conv(g4[j]), conv(g5[j])
            s00 += a0 * b0
            s01 += a0 * b1
            s02 += a0 * b2
            s03 += a0 * b3
            s04 += a0 * b4
            s05 += a0 * b5
            s10 += a1 * b0
            s11 += a1 * b1
            s12 += a1 * b2
            s13 += a1 * b3
            s14 += a1 * b4
            s15 += a1 * b5
            s20 += a2 * b0
            s21 += a2 * b1
            s22 += a2 * b2
            s23 += a2 * b3
            s24 += a2 * b4
            s25 += a2 * b5
            s30 += a3 * b0
            s31 += a3 * b1
            s32 += a3 * b2
            s33 += a3 * b3
            s34 += a3 * b4
            s35 += a3 * b5
        S[q, c], S[q, c + 1], S[q, c + 2], S[q, c + 3], S[q, c + 4], S[q, c + 5] = s00, s01, s02, s03, s04, s05
        S[q + 1, c], S[q + 1, c + 1], S[q + 1, c + 2] = s10, s11, s12
        S[q + 1, c + 3], S[q + 1, c + 4], S[q + 1, c + 5] = s13, s14, s15
        S[q + 2, c], S[q + 2, c + 1], S[q + 2, c + 2] = s20, s21, s22
        S[q + 2, c + 3], S[q + 2, c + 4], S[q + 2, c + 5] = s23, s24, s25
        S[q + 3, c], S[q + 3, c + 1], S[q + 3, c + 2] = s30, s31, s32
        S[q + 3, c + 3], S[q + 3, c + 4], S[q + 3, c + 5] = s33, s34, s35

    return njit(fastmath=FASTMATH, cache=True)(block)


def _block43_loop(conv):
    def block(X, G, q, r, S, c):
        """``S[q + a, c + b] = X[q + a] . conv(G[r + b])`` for a < 4, b < 3."""
        x0, x1, x2, x3 = X[q], X[q + 1], X[q + 2], X[q + 3]
        g0, g1, g2 = G[r], G[r + 1], G[r + 2]
        s00 = s01 = s02 = s10 = s11 = s12 = np.float32(0.0)
        s20 = s21 = s22 = s30 = s31 = s32 = np.float32(0.0)
        for j in range(X.shape[1]):
            a0, a1, a2, a3 = x0[j], x1[j], x2[j], x3[j]
            b0, b1, b2 = conv(g0[j]), conv(g1[j]), conv(g2[j])
            s00 += a0 * b0
            s01 += a0 * b1
            s02 += a0 * b2
            s10 += a1 * b0
            s11 += a1 * b1
            s12 += a1 * b2
            s20 += a2 * b0
            s21 += a2 * b1
            s22 += a2 * b2
            s30 += a3 * b0
            s31 += a3 * b1
            s32 += a3 * b2
        S[q, c], S[q, c + 1], S[q, c + 2] = s00, s01, s02
        S[q + 1, c], S[q + 1, c + 1], S[q + 1, c + 2] = s10, s11, s12
        S[q + 2, c], S[q + 2, c + 1], S[q + 2, c + 2] = s20, s21, s22
        S[q + 3, c], S[q + 3, c + 1], S[q + 3, c + 2] = s30, s31, s32

    return njit(fastmath=FASTMATH, cache=True)(block)


def _block41_loop(conv):
    def block(X, G, q, r, S, c):
        """``S[q + a, c] = X[q + a] . conv(G[r])`` for a < 4 (the tail rows of a sub-tile)."""
        x0, x1, x2, x3 = X[q], X[q + 1], X[q + 2], X[q + 3]
        g = G[r]
        s0 = s1 = s2 = s3 = np.float32(0.0)
        for j in range(X.shape[1]):
            b = conv(g[j])
            s0 += x0[j] * b
            s1 += x1[j] * b
            s2 += x2[j] * b
            s3 += x3[j] * b
        S[q, c], S[q + 1, c], S[q + 2, c], S[q + 3, c] = s0, s1, s2, s3

    return njit(fastmath=FASTMATH, cache=True)(block)


_block = _block46_loop if RB == 6 else _block43_loop  # the 4 x RB block of this CPU
_b4r_f32, _b4r_f16, _b4r_bf16, _b4r_i8 = (_block(conv) for conv in (_same, f16_to_f32, bf16_to_f32, i8_to_f32))
_b41_f32, _b41_f16, _b41_bf16, _b41_i8 = (_block41_loop(conv) for conv in (_same, f16_to_f32, bf16_to_f32, i8_to_f32))


def sweep(X, G, kind, lo, hi, S):  # pragma: no cover - replaced by the overload in numba code
    raise NotImplementedError


@overload(sweep)
def _sweep(X, G, kind, lo, hi, S):
    """``S[:, :hi-lo] = X @ float32(G[lo:hi]).T`` (serial): every query block sweeps the rows ``lo..hi``.

    ``kind`` 0 float32 data, 1 float16 bits, 2 bfloat16 bits (``G`` uint16 for 1 and 2), 3 int8
    codes (``G`` int8: the products of the unscaled codes; :func:`scale_columns` applies the row
    scales)."""
    if G.dtype in (types.int8, types.float32):  # one block pair per gallery dtype, chosen at typing time
        b4r, b41 = (_b4r_i8, _b41_i8) if G.dtype == types.int8 else (_b4r_f32, _b41_f32)

        def impl(X, G, kind, lo, hi, S):
            for q in range(0, X.shape[0], QB):
                r = lo
                while r + RB <= hi:
                    b4r(X, G, q, r, S, r - lo)
                    r += RB
                while r < hi:
                    b41(X, G, q, r, S, r - lo)
                    r += 1

        return impl

    def impl_half(X, G, kind, lo, hi, S):
        for q in range(0, X.shape[0], QB):
            r = lo
            while r + RB <= hi:
                if kind == 1:
                    _b4r_f16(X, G, q, r, S, r - lo)
                else:
                    _b4r_bf16(X, G, q, r, S, r - lo)
                r += RB
            while r < hi:
                if kind == 1:
                    _b41_f16(X, G, q, r, S, r - lo)
                else:
                    _b41_bf16(X, G, q, r, S, r - lo)
                r += 1

    return impl_half


@njit(inline="always", cache=True)
def scale_columns(S, rows, scales, lo, hi):
    """``S[:rows, j] *= scales[lo + j]`` for ``j < hi - lo`` (int8 tiles; no-op when ``scales`` is empty)."""
    if scales.shape[0]:
        for q in range(rows):
            for j in range(hi - lo):
                S[q, j] *= scales[lo + j]


def no_scales() -> np.ndarray:
    """The ``scales`` argument of a kernel on a float gallery: an empty float32 array."""
    return np.empty(0, dtype=np.float32)


def chunk_count(N: int, sub: int) -> int:
    """Chunks of a fused kernel over ``N`` gallery rows in sub-tiles of ``sub`` rows:
    ``CHUNKS_PER_THREAD`` per numba thread, at most one per sub-tile, at least one."""
    return max(1, min(numba.get_num_threads() * CHUNKS_PER_THREAD, -(-N // sub)))


@njit(inline="always", cache=True)
def chunk_span(c, n_chunks, N):
    """Rows ``[lo, end)`` of chunk ``c`` of ``n_chunks`` equal chunks of ``N`` rows (the fused kernels' unit)."""
    chunk = (N + n_chunks - 1) // n_chunks
    lo = min(N, c * chunk)
    return lo, min(N, lo + chunk)


def product(X, G, kind, start, stop, sub, S, scales=None):
    """``S[:, :stop-start] = X @ float32(G[start:stop]).T``, sub-tiles of ``sub`` rows in parallel
    (int8 codes: times the row ``scales``)."""
    _product(X, G, kind, start, stop, sub, S, no_scales() if scales is None else scales)


@njit(parallel=True, cache=True)
def _product(X, G, kind, start, stop, sub, S, scales):
    n = (stop - start + sub - 1) // sub
    for b in prange(n):
        lo = start + b * sub
        hi = min(stop, lo + sub)
        sweep(X, G, kind, lo, hi, S[:, lo - start :])
        scale_columns(S[:, lo - start :], X.shape[0], scales, lo, hi)
