"""Register-tiled tile products in numba: ``S = X @ float32(G[a:b]).T`` without BLAS (the ``loop``
product path; the other, ``blas``, is :mod:`._blas`; :mod:`agentcir.kernels.tune` measures which is
faster per CPU, dtype and shape class).

The microkernel is the one of an optimised sgemm, written as LLVM vector IR (:func:`_microkernel`)
so that its register tile does not depend on what LLVM's auto-vectoriser makes of a loop:

* the query rows are packed once per call into panels of ``w`` rows, transposed
  (:func:`pack_rows`: ``Xp[p, k, j] = X[w p + j, k]``, zero rows pad the last panel); ``w`` is 16,
  or 8 / 4 for at most 8 / 4 rows (:func:`panel_width`: one OCTOPUS query is not padded to 16);
* one call scores ``MR`` gallery rows against one panel: per element ``k`` it loads the panel's
  ``w`` values as vectors, broadcasts each gallery row's ``G[r + i, k]`` and adds the products into
  ``MR x w`` accumulators that stay in vector registers for the whole loop over ``d``; then it
  stores them into ``S[w p + j, c + i]``;
* the gallery is taken in sub-tiles of ``SUB_BYTES`` (:func:`sub_rows`) and each sub-tile in blocks
  of ``BLOCK_ROWS`` rows; every panel sweeps a block in turn, so the block stays in L1 and the
  panels stream from L2 (a float16 / bfloat16 / int8 block is first widened exactly into a float32
  buffer, once, not once per panel: a half gallery reads half the bytes and runs the same product);
* while a sub-tile is swept, its calls prefetch the next sub-tile's rows of the gallery (its own
  bytes: half or int8 rows before they are widened) into L2 (LLVM locality 2, x86 ``prefetcht1``),
  a few cache lines per call, so that the memory read overlaps the products instead of preceding
  them.

The 16-row tile follows the vector registers of the CPU numba compiles for (:func:`wide_registers`,
:data:`TILES`): AVX-512 (32 registers of 16 floats): ``MR = 12`` rows x one 16-lane vector: 12
accumulators, 13 loads per 12 fused multiply-adds, 12 independent chains to cover the FMA latency
of two ports; AVX2 / NEON (16 registers of 8 floats, or 32 of 4): ``MR = 6`` rows x two 8-lane
vectors: 12 accumulators, 8 loads per 12 fused multiply-adds. The 8- and 4-row panels use 12
rows x one 8- / 4-lane vector.

Arithmetic: each score is ``sum_k G[r, k] * X[q, k]`` accumulated in float32 in the order of
``k`` with fused multiply-adds (``llvm.fmuladd``), the same order for every row and query, so
two equal gallery rows score exactly alike wherever they sit in a tile; a score differs from a
BLAS or float64 score by rounding only (~1e-6 relative).

``X`` is passed packed (:func:`pack_rows`); ``S`` has ``panel_rows(Xp)`` rows, of which the rows
past the real queries score zero.
"""

from __future__ import annotations

import os

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from .. import _tiling
from .._inputs import read_only
from ._common import KIND_CODES, emit_prefetch, row_f32, target_has
from ._sgemm import LOOP, sgemm_nt


def wide_registers() -> bool:
    """Whether the CPU numba compiles for has AVX-512's 32 wide vector registers
    (:func:`._common.target_has`: AVX2 forced on an AVX-512 host has not)."""
    return target_has("avx512f")


#: per packed panel width (query rows, :func:`panel_width`): (lanes of one vector, gallery rows, vectors
#: per row) of its microkernel
TILES = {
    16: (16, 12, 1) if wide_registers() else (8, 6, 2),
    8: (8, 12, 1),
    4: (4, 12, 1),
}
#: sub-tiles are a multiple of this many rows (every tile's row count divides it)
ROW_STEP = 12


def l2_bytes() -> int:
    """One core's L2 cache in bytes as the C library reports it; 0 where it does not (not Linux, or a
    VM that hides it)."""
    try:
        return max(0, os.sysconf("SC_LEVEL2_CACHE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return 0


def sub_bytes(l2: int) -> int:
    """Bytes of float32 gallery rows that one panel sweep keeps in an L2 of ``l2`` bytes: a quarter
    (1 MB when unknown, 0), so that the sub-tile, the next one being prefetched, the score block and the
    panels fit together; between 64 KB and 1 MB."""
    return min(1 << 20, max(64 << 10, (l2 or 1 << 20) // 4))


#: :func:`sub_bytes` of this CPU
SUB_BYTES = sub_bytes(l2_bytes())
#: gallery chunks per thread of the fused kernels (dynamic scheduling evens out a busy core)
CHUNKS_PER_THREAD = 8
#: bytes of a thread's score block per ``cblas_sgemm`` call of the ``blas`` path, and its row bounds
BLAS_SCORE_BYTES = 1 << 20
BLAS_SUB_ROWS = (256, 2048)
#: elements of ``d`` per iteration of the microkernel's loop
UNROLL = 2
#: gallery rows every query panel sweeps in turn, from L1 (half / int8 rows: widened this many at a time)
BLOCK_ROWS = ROW_STEP
#: bytes of one prefetched cache line
LINE = 64

_F32 = ir.FloatType()
_I32 = ir.IntType(32)


def panel_width(rows: int) -> int:
    """Query rows per packed panel for ``rows`` rows: 16, or 8 / 4 for at most 8 / 4 rows, so that few
    rows (one OCTOPUS query, a handful of proxies) are not padded to 16."""
    return 16 if rows > 8 else 8 if rows > 4 else 4


def _microkernel(lanes: int, rows: int, nv: int):
    """The intrinsic ``mk(P, F, r, S, c, q0, A, a0, lines)``: ``S[q0 + j, c + i] = sum_k F[r + i, k] * P[k, j]``
    for ``i < rows``, ``j < lanes * nv`` (``P`` one packed panel ``[d, lanes * nv]``, ``F`` float32 rows
    ``[n, d]``, both C-contiguous; ``S`` float32 2-d, any strides). Along the way it prefetches ``lines``
    cache lines of the C-contiguous array ``A`` from byte ``a0`` on, one per element ``k`` (at most ``d``
    lines; a prefetch never faults and changes no result)."""
    width = lanes * nv
    vec = ir.VectorType(_F32, lanes)
    splat = ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes)
    bytes_ptr = ir.IntType(8).as_pointer()

    @intrinsic
    def mk(typingctx, P, F, r, S, c, q0, A, a0, lines):
        arrays = (P, F, S)
        if not all(isinstance(a, types.Array) and a.ndim == 2 and a.dtype == types.float32 for a in arrays):
            return None
        if P.layout != "C" or F.layout != "C" or not isinstance(A, types.Array) or A.layout != "C":
            return None

        def codegen(context, builder, sig, args):
            pa, fa, sa, aa = (context.make_array(sig.args[i])(context, builder, args[i]) for i in (0, 1, 3, 6))
            intp = context.get_value_type(types.intp)
            r0, c0, q, pf0, pfn = (context.cast(builder, args[i], sig.args[i], types.intp) for i in (2, 4, 5, 7, 8))
            abytes = builder.bitcast(aa.data, bytes_ptr)
            d = builder.extract_value(fa.shape, 1)
            fstride, (s0, s1) = builder.extract_value(fa.strides, 0), cgutils.unpack_tuple(builder, sa.strides, 2)
            fbytes = builder.bitcast(fa.data, bytes_ptr)
            grow = [
                builder.bitcast(
                    builder.gep(fbytes, [builder.mul(builder.add(r0, intp(i)), fstride)]), _F32.as_pointer()
                )
                for i in range(rows)
            ]
            acc = [
                [cgutils.alloca_once_value(builder, ir.Constant(vec, [0.0] * lanes)) for _ in range(nv)]
                for _ in range(rows)
            ]
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vec, [vec] * 3), f"llvm.fmuladd.v{lanes}f32"
            )

            def step(k, fetch=False):  # element k of every row into the accumulators, in the order of k
                if fetch:  # line min(k, lines - 1) of the prefetch (the loop below runs ceil(lines / UNROLL) times)
                    line = builder.select(builder.icmp_signed("<", k, pfn), k, builder.sub(pfn, intp(1)))
                    emit_prefetch(builder, builder.gep(abytes, [builder.add(pf0, builder.mul(line, intp(LINE)))]), 2)
                prow = builder.gep(pa.data, [builder.mul(k, intp(width))])
                xs = [
                    builder.load(builder.bitcast(builder.gep(prow, [intp(v * lanes)]), vec.as_pointer()), align=4)
                    for v in range(nv)
                ]
                for i in range(rows):
                    g = builder.insert_element(
                        ir.Constant(vec, ir.Undefined), builder.load(builder.gep(grow[i], [k])), _I32(0)
                    )
                    g = builder.shuffle_vector(g, ir.Constant(vec, ir.Undefined), splat)
                    for v in range(nv):
                        builder.store(builder.call(fma, [g, xs[v], builder.load(acc[i][v])]), acc[i][v])

            iters = builder.udiv(d, intp(UNROLL))  # UNROLL elements per iteration: fewer loop instructions
            fetching = builder.udiv(builder.add(pfn, intp(UNROLL - 1)), intp(UNROLL))
            fetching = builder.select(builder.icmp_signed("<", fetching, iters), fetching, iters)
            with cgutils.for_range(builder, fetching) as loop:
                for u in range(UNROLL):
                    step(builder.add(builder.mul(loop.index, intp(UNROLL)), intp(u)), fetch=True)
            with cgutils.for_range(builder, builder.sub(iters, fetching)) as loop:
                for u in range(UNROLL):
                    step(builder.add(builder.mul(builder.add(fetching, loop.index), intp(UNROLL)), intp(u)))
            done = builder.mul(iters, intp(UNROLL))
            with cgutils.for_range(builder, builder.sub(d, done)) as loop:
                step(builder.add(done, loop.index))
            sbytes = builder.bitcast(sa.data, bytes_ptr)
            for i in range(rows):
                col = builder.mul(builder.add(c0, intp(i)), s1)
                for v in range(nv):
                    a = builder.load(acc[i][v])
                    for lane in range(lanes):
                        off = builder.add(builder.mul(builder.add(q, intp(v * lanes + lane)), s0), col)
                        builder.store(
                            builder.extract_element(a, _I32(lane)),
                            builder.bitcast(builder.gep(sbytes, [off]), _F32.as_pointer()),
                        )
            return context.get_dummy_value()

        return types.void(P, F, r, S, c, q0, A, a0, lines), codegen

    return mk


@njit(inline="always", cache=True)
def line_share(lines, parts):
    """Prefetch lines per part when ``parts`` (at least one) share ``lines`` in order (the last get fewer)."""
    return (lines + parts - 1) // max(parts, 1)


def _panel_sweep(width: int):
    """``sweep(P, F, a, b, S, q0, A, a0, lines)``: ``S[q0 + j, r - a] = P[:, j] . F[r]`` for ``a <= r < b``,
    ``P`` one packed panel of ``width`` rows: the panel's microkernel on ``MR`` rows at a time, then one row
    at a time; the calls share the prefetch of ``lines`` cache lines of ``A`` from byte ``a0``."""
    lanes, mr, nv = TILES[width]
    tile, row = _microkernel(lanes, mr, nv), _microkernel(lanes, 1, nv)

    def sweep(P, F, a, b, S, q0, A, a0, lines):
        calls = (b - a) // mr + (b - a) % mr
        per = line_share(lines, calls)
        r = a
        while r + mr <= b:
            tile(P, F, r, S, r - a, q0, A, a0, max(0, min(per, lines)))
            a0 += per * LINE
            lines -= per
            r += mr
        while r < b:
            row(P, F, r, S, r - a, q0, A, a0, max(0, min(per, lines)))
            a0 += per * LINE
            lines -= per
            r += 1

    # one name per width: numba names a compiled function and its cache entry by its qualified name
    # and argument types, which the three widths would otherwise share (a cached caller then linked
    # one width's sweep in place of another's)
    sweep.__name__ = sweep.__qualname__ = f"sweep{width}"
    return njit(cache=True)(sweep)


_sweep16, _sweep8, _sweep4 = (_panel_sweep(w) for w in (16, 8, 4))


def sub_rows(d: int) -> int:
    """Gallery rows of an L2-resident sub-tile: ``SUB_BYTES`` of float32 rows, a multiple of ``ROW_STEP``, at
    least ``ROW_STEP`` (``_tiling.TILE_OVERRIDE``, set by the tests, forces odd sub-tiles too)."""
    if _tiling.TILE_OVERRIDE:
        return _tiling.TILE_OVERRIDE
    return max(ROW_STEP, SUB_BYTES // max(1, 4 * d) // ROW_STEP * ROW_STEP)


def fused_sub_rows(rows: int, d: int, blas: bool = False) -> int:
    """Sub-tile rows of a fused kernel that also holds a ``[rows, sub]`` float32 score block:
    :func:`sub_rows`, lowered so that the block stays within ``SUB_BYTES / 2``. With ``blas`` (a
    ``cblas_sgemm`` call per sub-tile, :mod:`._sgemm`) the block is ``BLAS_SCORE_BYTES``, between
    ``BLAS_SUB_ROWS`` rows: a call then packs the query rows once for hundreds of gallery rows."""
    if _tiling.TILE_OVERRIDE:
        return _tiling.TILE_OVERRIDE
    if blas:
        lo, hi = BLAS_SUB_ROWS
        return max(lo, min(hi, BLAS_SCORE_BYTES // (4 * max(rows, 1)))) // 16 * 16  # rows start on cache lines
    sub = sub_rows(d)
    return max(ROW_STEP, min(sub, (SUB_BYTES // 2) // (4 * max(rows, 1)) // ROW_STEP * ROW_STEP))


def pack_rows(X: np.ndarray) -> np.ndarray:
    """``X`` (float32 ``[R, d]``) as transposed panels ``Xp[p, k, j] = X[w p + j, k]`` (``[P, d, w]``, ``w =
    panel_width(R)``, zeros past row ``R``)."""
    R, d = X.shape
    w = panel_width(R)
    P = max(1, -(-R // w))
    padded = np.zeros((P * w, d), dtype=np.float32)
    padded[:R] = X
    return np.ascontiguousarray(padded.reshape(P, w, d).transpose(0, 2, 1))


@njit(inline="always", cache=True)
def panel_rows(Xp):
    """Rows of the score block of packed queries ``Xp`` (the real ones and the padding)."""
    return Xp.shape[0] * Xp.shape[2]


def tile_buffer(G, rows):  # pragma: no cover - replaced by the overload in numba code
    raise NotImplementedError


@overload(tile_buffer, inline="always")
def _tile_buffer(G, rows):
    """The float32 buffer rows of ``G`` are widened into: ``[rows, d]``, empty for float32 data."""
    if G.dtype == types.float32:
        return lambda G, rows: np.empty((0, G.shape[1]), dtype=np.float32)
    return lambda G, rows: np.empty((rows, G.shape[1]), dtype=np.float32)


@njit(inline="always", cache=True)
def buffer_rows(blas, sub):
    """Rows of a thread's widening buffer (:func:`tile_buffer`): a block of the microkernels, or a whole
    sub-tile for ``cblas_sgemm``."""
    return sub if blas.address else BLOCK_ROWS


@njit(cache=True)
def _panels(Xp, F, a, b, S, A, a0, lines):
    """``S[:, r - a] = Xp @ F[r]`` for ``a <= r < b`` (every packed panel sweeps the rows); the sweeps share
    the prefetch of ``lines`` cache lines of ``A`` from byte ``a0``."""
    w = Xp.shape[2]
    per = line_share(lines, Xp.shape[0])
    for p in range(Xp.shape[0]):
        n = max(0, min(per, lines - p * per))
        if w == 16:
            _sweep16(Xp[p], F, a, b, S, p * w, A, a0 + p * per * LINE, n)
        elif w == 8:
            _sweep8(Xp[p], F, a, b, S, p * w, A, a0 + p * per * LINE, n)
        else:
            _sweep4(Xp[p], F, a, b, S, p * w, A, a0 + p * per * LINE, n)


@njit(inline="always", cache=True)
def next_rows(G, lo, hi):
    """``(a0, lines)``: the cache lines of ``G``'s next sub-tile after rows ``[lo, hi)`` (the next ``hi - lo``
    rows, within ``G``), as a byte offset into its data and a count."""
    step = G.strides[0]
    return hi * step, (min(G.shape[0], 2 * hi - lo) - hi) * step // LINE


def block(G, kind, b, e, W):  # pragma: no cover - replaced by the overload in numba code
    raise NotImplementedError


@overload(block, inline="always")
def _block(G, kind, b, e, W):
    """``(F, f)``: rows ``[b, e)`` of ``G`` as float32 rows ``F[f : f + e - b]``: ``G`` itself for float32
    data, else decoded into ``W`` (:func:`tile_buffer`)."""
    if G.dtype == types.float32:
        return lambda G, kind, b, e, W: (G, b)

    def impl(G, kind, b, e, W):
        for r in range(b, e):
            row_f32(G, r, kind, W[r - b])
        return W, 0

    return impl


def sweep(Xp, G, kind, lo, hi, S, W):  # pragma: no cover - replaced by the overload in numba code
    raise NotImplementedError


@overload(sweep)
def _sweep(Xp, G, kind, lo, hi, S, W):
    """``S[:, :hi-lo] = X @ float32(G[lo:hi]).T`` (serial) for packed queries ``Xp``.

    ``kind`` 0 float32 data, 1 float16 bits, 2 bfloat16 bits (``G`` uint16 for 1 and 2), 3 int8
    codes (``G`` int8: the products of the unscaled codes; :func:`scale_columns` applies the row
    scales). ``BLOCK_ROWS`` rows at a time (other than float32 rows widened into ``W``,
    :func:`block`), every panel sweeps them while they are in L1; meanwhile the calls prefetch
    ``G``'s next ``hi - lo`` rows (:func:`next_rows`)."""

    def impl(Xp, G, kind, lo, hi, S, W):
        a0, lines = next_rows(G, lo, hi)
        per = line_share(lines, (hi - lo + BLOCK_ROWS - 1) // BLOCK_ROWS)
        for b in range(lo, hi, BLOCK_ROWS):
            e = min(hi, b + BLOCK_ROWS)
            F, f = block(G, kind, b, e, W)
            _panels(Xp, F, f, f + e - b, S[:, b - lo :], G, a0, max(0, min(per, lines)))
            a0 += per * LINE
            lines -= per

    return impl


def tile(blas, X, Xp, G, kind, lo, hi, S, W):  # pragma: no cover - replaced by the overload in numba code
    raise NotImplementedError


@overload(tile)
def _tile(blas, X, Xp, G, kind, lo, hi, S, W):
    """``S[:, :hi-lo] = X @ float32(G[lo:hi]).T`` (serial) by the path ``blas`` names (:mod:`._sgemm`):
    the microkernels on the packed rows ``Xp`` (:func:`sweep`; ``address`` 0), or one ``cblas_sgemm`` on
    the rows ``X``, other than float32 rows first widened into ``W`` (``[hi - lo, d]`` at least; int8:
    the unscaled codes, as :func:`sweep`)."""

    def impl(blas, X, Xp, G, kind, lo, hi, S, W):
        if blas.address == 0:
            sweep(Xp, G, kind, lo, hi, S, W)
        else:
            F, f = block(G, kind, lo, hi, W)
            sgemm_nt(blas, X, F[f : f + hi - lo], S, X.shape[0], hi - lo)

    return impl


@njit(inline="always", cache=True)
def scale_columns(S, rows, scales, lo, hi):
    """``S[:rows, j] *= scales[lo + j]`` for ``j < hi - lo`` (int8 tiles; no-op when ``scales`` is empty)."""
    if scales.shape[0]:
        for q in range(rows):
            for j in range(hi - lo):
                S[q, j] *= scales[lo + j]


def no_scales() -> np.ndarray:
    """The ``scales`` argument of a kernel on a float gallery: an empty float32 array (read-only, as
    every kernel input: :func:`.._inputs.read_only`)."""
    return read_only(np.empty(0, dtype=np.float32))


def row_scales(gallery) -> np.ndarray:
    """The ``scales`` argument of a kernel on ``gallery`` (an ``_inputs.Gallery``): its row scales if int8,
    else :func:`no_scales`; read-only."""
    if gallery.kind != "int8":
        return no_scales()
    return read_only(np.ascontiguousarray(gallery.scales, dtype=np.float32))


def gallery_args(gallery) -> tuple[np.ndarray, int, np.ndarray]:
    """``(data, kind code, scales)``: ``gallery`` (an ``_inputs.Gallery``, its arrays read-only) as the
    kernels take it."""
    return gallery.data, KIND_CODES[gallery.kind], row_scales(gallery)


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


def product(Xp, G, kind, start, stop, sub, S, scales=None, X=None, blas=None):
    """``S[:, :stop-start] = X @ float32(G[start:stop]).T`` for packed queries ``Xp`` (:func:`pack_rows`),
    sub-tiles of ``sub`` rows in parallel (int8 codes: times the row ``scales``); with ``blas`` (an
    ``_sgemm.Sgemm`` other than ``LOOP``) each sub-tile is one ``cblas_sgemm`` on the rows ``X``."""
    if blas is None:
        blas, X = LOOP, np.empty((0, G.shape[1]), dtype=np.float32)
    scales = no_scales() if scales is None else scales
    _product(blas, read_only(X), Xp, read_only(G), kind, start, stop, sub, S, read_only(scales))


@njit(parallel=True, cache=True)
def _product(blas, X, Xp, G, kind, start, stop, sub, S, scales):
    n = (stop - start + sub - 1) // sub
    for b in prange(n):
        lo = start + b * sub
        hi = min(stop, lo + sub)
        tile(blas, X, Xp, G, kind, lo, hi, S[:, lo - start :], tile_buffer(G, buffer_rows(blas, sub)))
        scale_columns(S[:, lo - start :], panel_rows(Xp), scales, lo, hi)
