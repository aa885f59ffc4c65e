"""cosine_topk, numba: streamed inner-product top-k with a running heap per query.

Two product paths, chosen per CPU, dtype and Q by :func:`agentcir.kernels.tune.choose`, both
exact float32 arithmetic on the stored gallery values: ``blas`` (:func:`blas_topk`: the blocked
kernel below with a ``cblas_sgemm`` call per sub-tile, :mod:`._sgemm`) and ``loop``, the numba
kernels of this module in two launch shapes:

* few queries (``Q <= DIRECT_MAX_Q``): one pass of ``_direct_kernel`` over the gallery,
  which is memory-bound: each row is read (and widened from fp16/bf16 bits or int8 codes)
  once, in order, dotted with every query and offered to the heaps of the thread that
  scans it (:func:`._common.thread_heaps`); they are merged at the end. Half-precision
  galleries read half the bytes. An int8 gallery reads a quarter (``_direct_kernel_i8``): each query is rounded to int16 (:func:`int16_queries`), dotted
  with the int8 codes in exact int32 sums (:func:`_idot_blocks`: multiply-add pairs over whole
  vector registers, twice the rate of widening to float32), and the sum multiplied by the query's
  and the row's scales once per row. Rows are
  also requested ``PREFETCH_BYTES`` ahead.
* many queries: ``_blocked_kernel``, one parallel pass over gallery chunks (dynamically
  scheduled, :mod:`._threads`): each chunk walks L2-sized sub-tiles, scores them with the
  register-tiled product of :mod:`._gemm` (no ``[Q, N]`` buffer: a ``[Q, sub]`` block per
  thread) and offers each row of scores to its thread's heaps with
  the running threshold (the heap root); the thread heaps are merged at the end.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir as _ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from .. import tune
from .._inputs import Gallery, read_only, to_backend_float
from . import _blas, _sgemm
from ._common import (
    dot,
    empty_exclude,
    exclusion_value,
    heap_push,
    heap_slot,
    merged_heaps,
    patch_excluded,
    prefetch_row,
    row_dot,
    row_f32,
    select_row,
    target_has,
    thread_heaps,
)
from ._gemm import (
    buffer_rows,
    chunk_count,
    chunk_span,
    fused_sub_rows,
    gallery_args,
    pack_rows,
    panel_rows,
    scale_columns,
    tile,
    tile_buffer,
)
from ._threads import balanced

#: at most this many queries use the direct (BLAS-free, memory-bound) kernel
DIRECT_MAX_Q = 4
#: gallery rows per parallel chunk of the direct kernel, at least (tests lower it)
DIRECT_CHUNK_ROWS = 1024
#: the direct kernel requests rows this many bytes ahead of the row it scores
PREFETCH_BYTES = 8192


@njit(inline="always", cache=True)
def _offer(s, r, q, t, excl, ex_value, hs, hi, cnt):
    """Offer row ``r``'s score ``s`` to query ``q``'s heap of thread ``t`` (ties: as :func:`select_row`)."""
    for m in range(excl.shape[1]):
        if excl[q, m] == r:
            s = ex_value
    n = cnt[t, q]
    if n == hs.shape[2]:
        if s < hs[t, q, 0]:
            return
    elif s == -np.inf:
        return
    cnt[t, q] = heap_push(hs[t, q], hi[t, q], n, s, r)


@njit(parallel=True, cache=True)
def _direct_kernel(X, G, kind, scales, excl, ex_value, n_chunks, pf, hs, hi, cnt):
    N = G.shape[0]
    Q = X.shape[0]
    scaled = scales.shape[0] > 0  # int8 codes: each dot times the row's scale
    chunk = (N + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        t = heap_slot(c, n_chunks, hs)
        buf = np.empty(G.shape[1], dtype=np.float32)
        for r in range(c * chunk, min(N, (c + 1) * chunk)):
            if r + pf < N:
                prefetch_row(G, r + pf)
            sr = scales[r] if scaled else np.float32(1.0)
            if Q == 1:  # one fused decode + dot pass over the row
                s = row_dot(X[0], G, r, kind)
                _offer(s * sr if scaled else s, r, 0, t, excl, ex_value, hs, hi, cnt)
            else:  # decode the row once, dot it with every query
                row = row_f32(G, r, kind, buf)
                for q in range(Q):
                    s = dot(X[q], row)
                    _offer(s * sr if scaled else s, r, q, t, excl, ex_value, hs, hi, cnt)


#: int16 lanes of one multiply-add-pairs step of :func:`_idot_blocks` on the CPU numba compiles for
IDOT_LANES, _PMADD = (
    (32, "llvm.x86.avx512.pmaddw.d.512")
    if target_has("avx512bw")
    else (16, "llvm.x86.avx2.pmadd.wd")
    if target_has("avx2")
    else (8, None)
)


#: independent accumulators of :func:`_idot_blocks` (a multiply-add-pairs step has a latency of several cycles)
IDOT_CHAINS = 4


@intrinsic
def _idot_blocks(typingctx, xq, c):
    """``sum_j int32(xq[j]) * int32(c[j])`` over the first ``len // IDOT_LANES * IDOT_LANES`` elements of
    an int16 query and an int8 row (both C-contiguous): per step the codes are sign-extended to int16 and
    multiplied with the query in adjacent pairs summed to int32 (``vpmaddwd`` on x86; elsewhere the
    same sums in plain vector IR). Exact: :func:`int16_queries` bounds every int32 sum."""
    if not all(
        isinstance(a, types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == t
        for a, t in ((xq, types.int16), (c, types.int8))
    ):
        return None
    W = IDOT_LANES
    v16, v32 = _ir.VectorType(_ir.IntType(16), W), _ir.VectorType(_ir.IntType(32), W // 2)
    i32 = _ir.IntType(32)

    def codegen(context, builder, sig, args):
        xa, ca = (context.make_array(t)(context, builder, v) for t, v in zip(sig.args, args))
        intp = context.get_value_type(types.intp)
        zero = _ir.Constant(v32, [0] * (W // 2))
        accs = [cgutils.alloca_once_value(builder, zero) for _ in range(IDOT_CHAINS)]

        def step(j, acc):
            x = builder.load(builder.bitcast(builder.gep(xa.data, [j]), v16.as_pointer()), align=2)
            codes = builder.bitcast(builder.gep(ca.data, [j]), _ir.VectorType(_ir.IntType(8), W).as_pointer())
            cw = builder.sext(builder.load(codes, align=1), v16)
            if _PMADD:
                fn = cgutils.get_or_insert_function(builder.module, _ir.FunctionType(v32, [v16, v16]), _PMADD)
                pairs = builder.call(fn, [x, cw])
            else:

                def lanes(v, first):
                    idx = _ir.Constant(_ir.VectorType(i32, W // 2), list(range(first, W, 2)))
                    return builder.sext(builder.shuffle_vector(v, _ir.Constant(v16, _ir.Undefined), idx), v32)

                pairs = builder.add(builder.mul(lanes(x, 0), lanes(cw, 0)), builder.mul(lanes(x, 1), lanes(cw, 1)))
            builder.store(builder.add(builder.load(acc), pairs), acc)

        n = builder.extract_value(xa.shape, 0)
        rounds = builder.udiv(n, intp(W * IDOT_CHAINS))
        with cgutils.for_range(builder, rounds) as loop:  # independent accumulators: no serial chain
            base = builder.mul(loop.index, intp(W * IDOT_CHAINS))
            for u, acc in enumerate(accs):
                step(builder.add(base, intp(u * W)), acc)
        done = builder.mul(rounds, intp(W * IDOT_CHAINS))
        with cgutils.for_range(builder, builder.udiv(builder.sub(n, done), intp(W))) as loop:
            step(builder.add(done, builder.mul(loop.index, intp(W))), accs[0])
        total = builder.load(accs[0])
        for acc in accs[1:]:
            total = builder.add(total, builder.load(acc))
        reduce = cgutils.get_or_insert_function(
            builder.module, _ir.FunctionType(i32, [v32]), f"llvm.vector.reduce.add.v{W // 2}i32"
        )
        return builder.call(reduce, [total])

    return types.int32(xq, c), codegen


def _idot(xq, c):  # pragma: no cover - replaced by the overload in numba code
    raise NotImplementedError


@overload(_idot)
def _idot_impl(xq, c):
    """``sum_j int32(xq[j]) * int32(c[j])`` of an int16 query and an int8 row (exact): the vector steps of
    :func:`_idot_blocks` and a scalar tail; rows that are not C-contiguous take the scalar loop."""
    contiguous = xq.layout == "C" and c.layout == "C"

    def impl(xq, c):
        s = np.int32(0)
        start = 0
        if contiguous:
            s = _idot_blocks(xq, c)
            start = xq.shape[0] // IDOT_LANES * IDOT_LANES
        for j in range(start, xq.shape[0]):
            s = np.int32(s + np.int32(xq[j]) * np.int32(c[j]))
        return s

    return impl


@njit(parallel=True, cache=True)
def _direct_kernel_i8(Xq, xs, C, scales, excl, ex_value, n_chunks, pf, hs, hi, cnt):
    """The direct scan of an int8 gallery: integer dots of the int16-rounded queries with the codes
    (1 byte per element read), times ``xs[q] * scales[r]`` once per row."""
    N = C.shape[0]
    Q = Xq.shape[0]
    chunk = (N + n_chunks - 1) // n_chunks
    for c in prange(n_chunks):
        t = heap_slot(c, n_chunks, hs)
        for r in range(c * chunk, min(N, (c + 1) * chunk)):
            if r + pf < N:
                prefetch_row(C, r + pf)
            row = C[r]
            sr = scales[r]
            for q in range(Q):
                s = np.float32(_idot(Xq[q], row)) * (xs[q] * sr)
                _offer(s, r, q, t, excl, ex_value, hs, hi, cnt)


def int16_queries(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Xq, xs)``: each query row rounded to int16 with its scale ``xs = max|x| / m``, ``m =
    min(32767, (2^31 - 1) // (127 d))`` so that an int32 sum of ``d`` products with int8 codes is exact."""
    d = X.shape[1]
    m = np.float32(min(32767, (2**31 - 1) // (127 * max(d, 1))))
    xs = (np.abs(X).max(axis=1) / m).astype(np.float32)
    inv = np.divide(np.float32(1.0), xs, out=np.zeros_like(xs), where=xs > 0)
    Xq = np.clip(np.rint(X * inv[:, None]), -m, m).astype(np.int16)
    return Xq, xs


@njit(parallel=True, cache=True)
def _blocked_kernel(blas, X, Xp, Q, G, kind, scales, excl, ex_value, n_chunks, sub, hs, hi, cnt):
    for c in prange(n_chunks):
        t = heap_slot(c, n_chunks, hs)
        S = np.empty((panel_rows(Xp), sub), dtype=np.float32)
        W = tile_buffer(G, buffer_rows(blas, sub))
        lo, end = chunk_span(c, n_chunks, G.shape[0])
        for t0 in range(lo, end, sub):
            t1 = min(end, t0 + sub)
            tile(blas, X, Xp, G, kind, t0, t1, S, W)
            scale_columns(S, Q, scales, t0, t1)
            for q in range(Q):
                row = S[q, : t1 - t0]
                if excl.shape[1]:
                    patch_excluded(row, q, t0, excl, ex_value)
                cnt[t, q] = select_row(row, t0, hs[t, q], hi[t, q], cnt[t, q])


def direct_topk(X: np.ndarray, gallery: Gallery, k: int, excl: np.ndarray, ex_value: np.float32):
    """Top-k of ``X @ G.T`` in one memory-bound pass (few queries)."""
    Q = X.shape[0]
    G, kind, scales = gallery_args(gallery)
    n_chunks = max(1, min(numba.get_num_threads() * 4, gallery.shape[0] // DIRECT_CHUNK_ROWS))
    hs, hi, cnt = thread_heaps(Q, k, n_chunks)
    pf = max(1, -(-PREFETCH_BYTES // (gallery.shape[1] * G.itemsize)))  # rows
    if gallery.kind == "int8":
        Xq, xs = int16_queries(X)
        with balanced():
            _direct_kernel_i8(Xq, xs, G, scales, read_only(excl), ex_value, n_chunks, pf, hs, hi, cnt)
        return merged_heaps(hs, hi, cnt, Q)
    with balanced():
        _direct_kernel(
            to_backend_float(X, "numpy"), G, kind, scales, read_only(excl), ex_value, n_chunks, pf, hs, hi, cnt
        )
    return merged_heaps(hs, hi, cnt, Q)


def blocked_topk(
    X: np.ndarray, gallery: Gallery, k: int, excl: np.ndarray, ex_value: np.float32, blas: _sgemm.Sgemm = _sgemm.LOOP
):
    """Top-k of ``X @ G.T``: a product per sub-tile (the microkernels, or ``cblas_sgemm`` with ``blas``),
    fused with the selection."""
    Q = X.shape[0]
    N, d = gallery.shape
    sub = fused_sub_rows(Q, d, bool(blas.address))
    n_chunks = chunk_count(N, sub)
    hs, hi, cnt = thread_heaps(Q, k, n_chunks)
    with balanced(), _sgemm.calling(blas):
        _blocked_kernel(
            blas,
            to_backend_float(X, "numpy"),
            pack_rows(X),
            Q,
            *gallery_args(gallery),
            read_only(excl),
            ex_value,
            n_chunks,
            min(sub, max(1, N)),
            hs,
            hi,
            cnt,
        )
    return merged_heaps(hs, hi, cnt, Q)


def blas_topk(X: np.ndarray, gallery: Gallery, k: int, excl: np.ndarray, ex_value: np.float32):
    """The ``blas`` path: the blocked kernel on the library's ``cblas_sgemm`` (:mod:`._sgemm`), or whole
    numpy tiles folded in serially where no library is callable (:mod:`._blas`)."""
    blas = _sgemm.for_path("blas")
    if blas is None:
        return _blas.topk(X, gallery, k, excl, ex_value)
    return blocked_topk(X, gallery, k, excl, ex_value, blas)


def loop_topk(X: np.ndarray, gallery: Gallery, k: int, excl: np.ndarray, ex_value: np.float32):
    """The ``loop`` path: the direct scan for at most ``DIRECT_MAX_Q`` queries, else the blocked kernel."""
    if X.shape[0] <= DIRECT_MAX_Q:
        return direct_topk(X, gallery, k, excl, ex_value)
    return blocked_topk(X, gallery, k, excl, ex_value)


def cosine_topk(queries: np.ndarray, gallery: Gallery, k: int, exclude: np.ndarray | None, exclude_score: float | None):
    """Top-k inner products; see :func:`agentcir.kernels.cosine_topk`. The product path (numba
    ``loop`` or ``blas`` tiles) is :func:`agentcir.kernels.tune.choose`'s for this dtype and Q."""
    excl = empty_exclude() if exclude is None else exclude
    ex_value = exclusion_value(exclude_score)
    if tune.choose(gallery.kind, queries.shape[0]) == "blas":
        return blas_topk(queries, gallery, k, excl, ex_value)
    return loop_topk(queries, gallery, k, excl, ex_value)
