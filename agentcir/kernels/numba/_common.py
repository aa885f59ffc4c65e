"""Numba building blocks shared by the numba ops: running top-k heaps, half->float decoding,
exclusion patches and the streamed softmax entropy.

Threads: the tile products run on numba's pool (the microkernels of :mod:`._gemm`, or a
``cblas_sgemm`` call per sub-tile from each numba thread, :mod:`._sgemm`), so the per-tile passes
after them run parallel on the same pool. Only a pass after a torch product (the bfloat16
``coarse_tiles`` of the OCTOPUS weights) runs serial: a numba parallel region right after a
torch (OpenMP) call would wait for torch's spinning threads to yield, which on an
oversubscribed machine costs a scheduler tick (measured: ~8 ms per launch instead of
~10 us). The list fusions go parallel above ``PARALLEL_MIN_WORK`` elements;
:class:`DualKernel` compiles both variants.

Heaps: one bounded min-heap per query, ``hs[k]`` scores and ``hi[k]`` ids, whose root is
the *worst* kept item (lowest score; among equal scores the highest id). Gallery tiles
are visited in increasing id order, so inside a tile loop a candidate equal to the root
is always worse than it (its id is larger) and the cheap test ``s <= root`` rejects it.
"""

from __future__ import annotations

import types as _pytypes

import numba
import numpy as np
from llvmlite import binding as _llvm
from llvmlite import ir as _ir
from numba import njit, types
from numba.extending import intrinsic, overload

KIND_CODES = {"float32": 0, "float16": 1, "bfloat16": 2, "int8": 3}
#: list-op kernels go parallel from this many input elements (below it a launch costs more than it saves)
PARALLEL_MIN_WORK = 2_000_000


class DualKernel:
    """One kernel body compiled twice: ``parallel=True`` (prange runs on the thread pool) and serial.

    The serial twin is a copy of the Python function under another name, so numba's disk
    cache keeps the two compilations apart.
    """

    def __init__(self, py_func, **options):
        twin = _pytypes.FunctionType(
            py_func.__code__,
            py_func.__globals__,
            py_func.__name__ + "_serial",
            py_func.__defaults__,
            py_func.__closure__,
        )
        twin.__qualname__ = py_func.__qualname__ + "_serial"
        twin.__module__ = py_func.__module__
        self.parallel = njit(parallel=True, cache=True, **options)(py_func)
        self.serial = njit(cache=True, **options)(twin)

    def __call__(self, *args, work: int):
        """Run the parallel variant when ``work`` (input elements) is at least ``PARALLEL_MIN_WORK``."""
        return (self.parallel if work >= PARALLEL_MIN_WORK else self.serial)(*args)


def dual(**options):
    """Decorator form of :class:`DualKernel`."""
    return lambda py_func: DualKernel(py_func, **options)


NEG_INF = np.float32(-np.inf)


@njit(inline="always", cache=True)
def worse(s1, i1, s2, i2):
    """Is (s1, i1) ranked after (s2, i2)? (score descending, then lower id first)."""
    return s1 < s2 or (s1 == s2 and i1 > i2)


@njit(cache=True)
def heap_push(hs, hi, n, s, i):
    """Offer (s, i) to the heap of capacity ``len(hs)`` holding ``n`` items; returns the new size."""
    k = hs.shape[0]
    if n < k:
        pos = n
        while pos > 0:
            par = (pos - 1) >> 1
            if worse(s, i, hs[par], hi[par]):
                hs[pos] = hs[par]
                hi[pos] = hi[par]
                pos = par
            else:
                break
        hs[pos] = s
        hi[pos] = i
        return n + 1
    if not worse(hs[0], hi[0], s, i):
        return n
    _sift_down(hs, hi, k, s, i)
    return n


@njit(inline="always", cache=True)
def _sift_down(hs, hi, m, s, i):
    pos = 0
    while True:
        c = 2 * pos + 1
        if c >= m:
            break
        if c + 1 < m and worse(hs[c + 1], hi[c + 1], hs[c], hi[c]):
            c += 1
        if worse(hs[c], hi[c], s, i):
            hs[pos] = hs[c]
            hi[pos] = hi[c]
            pos = c
        else:
            break
    hs[pos] = s
    hi[pos] = i


@njit(cache=True)
def heap_to_sorted(hs, hi, n, out_s, out_i):
    """Write the heap best-first into ``out_s/out_i`` (padding ``(-inf, -1)``); consumes the heap."""
    k = out_s.shape[0]
    for j in range(n, k):
        out_s[j] = -np.inf
        out_i[j] = -1
    m = n
    while m > 0:
        out_s[m - 1] = hs[0]
        out_i[m - 1] = hi[0]
        m -= 1
        if m > 0:
            _sift_down(hs, hi, m, hs[m], hi[m])


@njit(cache=True)
def finish_heaps(hs, hi, cnt, out_s, out_i):
    for q in range(hs.shape[0]):
        heap_to_sorted(hs[q], hi[q], cnt[q], out_s[q], out_i[q])


def new_heaps(Q: int, k: int):
    return (
        np.full((Q, k), -np.inf, dtype=np.float32),
        np.full((Q, k), -1, dtype=np.int32),
        np.zeros(Q, dtype=np.int64),
    )


def sorted_from_heaps(hs, hi, cnt):
    Q, k = hs.shape
    out_s = np.empty((Q, k), dtype=np.float32)
    out_i = np.empty((Q, k), dtype=np.int32)
    finish_heaps(hs, hi, cnt, out_s, out_i)
    return out_s, out_i


#: bytes between the heap sets of two threads (:func:`thread_heaps`): two cache lines, so that one
#: thread's pushes do not invalidate the line another thread reads its threshold from
HEAP_GAP = 128


def thread_heaps(Q: int, k: int, n_chunks: int):
    """The running top-k of a parallel pass over ``n_chunks`` chunks, ``(scores, ids, sizes)``: one per
    (worker thread, query), or per (chunk, query) when there are no more chunks than threads
    (:func:`heap_slot`), so never more heaps than either. A heap then fills and warms up once per
    thread, not once per chunk (at several hundred queries that warm-up cost more than the selection
    itself), and as the offers order ties by id (:func:`select_row`) the top-k does not depend on which
    thread ran which chunk.

    Each set has unused rows past ``Q`` (so that one set's last line is not the next's); the arrays are
    whole (C-contiguous at any thread count: one compiled kernel variant) and the kernels use rows
    ``< Q``."""
    n = max(1, min(numba.get_num_threads(), n_chunks))
    pad, cpad = -(-HEAP_GAP // (4 * k)), HEAP_GAP // 8
    return (
        np.full((n, Q + pad, k), -np.inf, dtype=np.float32),
        np.full((n, Q + pad, k), -1, dtype=np.int32),
        np.zeros((n, Q + cpad), dtype=np.int64),
    )


@njit(inline="always", cache=True)
def heap_slot(c, n_chunks, hs):
    """The heaps (of :func:`thread_heaps`) chunk ``c`` offers to: its own when there is a set per chunk,
    else those of the thread running it (``numba.get_thread_id()``, below ``numba.get_num_threads()``)."""
    if hs.shape[0] >= n_chunks:
        return np.int64(c)
    return np.int64(numba.get_thread_id())


@njit(cache=True)
def _merge_threads(hs, hi, cnt, out_hs, out_hi, out_cnt):
    for q in range(out_hs.shape[0]):
        n = 0
        for c in range(hs.shape[0]):
            for j in range(cnt[c, q]):
                n = heap_push(out_hs[q], out_hi[q], n, hs[c, q, j], hi[c, q, j])
        out_cnt[q] = n


def merged_heaps(hs, hi, cnt, Q):
    """The sorted top-k per query of the first ``Q`` rows of the per-thread heaps of :func:`thread_heaps`
    (ties: lower id first)."""
    mh, mi, mc = new_heaps(Q, hs.shape[2])
    _merge_threads(hs, hi, cnt, mh, mi, mc)
    return sorted_from_heaps(mh, mi, mc)


@njit(inline="always", cache=True)
def select_row(vals, start, hs, hi, n):
    """Offer ``vals[j]`` as item ``start + j``; ``-inf`` = removed. Returns the new size. A score equal to
    the heap's worst goes on to :func:`heap_push`, which keeps the lower id: the result does not depend on
    the order in which rows are offered."""
    k = hs.shape[0]
    for j in range(vals.shape[0]):
        s = vals[j]
        if n == k:
            if s < hs[0]:
                continue
        elif s == -np.inf:
            continue
        n = heap_push(hs, hi, n, s, start + j)
    return n


# -- software prefetch ------------------------------------------------------------------
def emit_prefetch(builder, address, locality: int) -> None:
    """Emit LLVM ``llvm.prefetch`` of the cache line at ``address`` (any pointer): a read, kept in every
    cache level (``locality`` 3) or in L2 and beyond (2). A hint only: it never faults, changes no result."""
    i8p, i32 = _ir.IntType(8).as_pointer(), _ir.IntType(32)
    fn = builder.module.declare_intrinsic("llvm.prefetch", (), _ir.FunctionType(_ir.VoidType(), [i8p, i32, i32, i32]))
    builder.call(fn, [builder.bitcast(address, i8p), i32(0), i32(locality), i32(1)])


@intrinsic
def prefetch(typingctx, row, j):
    """Ask the CPU to start loading the cache line holding ``row[j]`` (``row`` 1-d) into every cache
    level (:func:`emit_prefetch`)."""
    if not isinstance(row, types.Array) or row.ndim != 1 or not isinstance(j, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        emit_prefetch(builder, builder.gep(data, [args[1]]), 3)
        return context.get_dummy_value()

    return types.void(row, j), codegen


@njit(inline="always", cache=True)
def prefetch_row(G, r):
    """Prefetch every 64-byte line of row ``r`` of ``G``.

    The few-query scan reads rows in order and the hardware prefetchers follow it; requesting
    rows ``cosine.PREFETCH_BYTES`` ahead on top helps when memory is fast (measured on an
    EPYC, 1M x 512, without -> with: fp16 18.7 -> 14.6 ms, fp32 37.0 -> 33.7 ms) and matters
    little when the host's memory is busy (fp16 24.0 -> 23.2 ms, fp32 46.4 -> 50.3 ms;
    README.md "Few queries")."""
    row = G[r]
    for j in range(0, row.shape[0], max(1, 64 // G.itemsize)):
        prefetch(row, j)


# -- half precision ---------------------------------------------------------------------
@intrinsic
def _f16_to_f32_hw(typingctx, h):
    """binary16 bits -> float32 by LLVM ``fpext half`` (one vcvtph2ps with F16C)."""

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], _ir.HalfType()), _ir.FloatType())

    return types.float32(types.uint16), codegen


@njit(inline="always", cache=True)
def _f16_to_f32_sw(h):
    """IEEE binary16 bits -> float32 (exact, subnormals included; branch-free so it vectorises)."""
    hu = np.uint32(h)
    mag = np.uint32((hu & np.uint32(0x7FFF)) << np.uint32(13))
    f = np.float32(mag.view(np.float32) * np.float32(5.192296858534828e33))  # 2**112 rebiases the exponent
    bits = np.float32(f).view(np.uint32)
    bits = np.uint32(bits | np.uint32(0x7F800000)) if (hu & np.uint32(0x7C00)) == np.uint32(0x7C00) else bits
    return np.uint32(bits | np.uint32((hu & np.uint32(0x8000)) << np.uint32(16))).view(np.float32)


def target_has(feature: str) -> bool:
    """Whether the CPU numba compiles for has ``feature`` (an LLVM name, e.g. ``f16c``,
    ``avx512f``): from ``NUMBA_CPU_FEATURES`` when set (a lower ISA forced on this host), else the host's."""
    forced = numba.config.CPU_FEATURES
    if forced:
        return f"+{feature}" in forced.split(",")
    try:
        return bool(_llvm.get_host_cpu_features().get(feature, False))
    except Exception:  # pragma: no cover - exotic hosts
        return False


#: binary16 bits -> float32: the F16C instruction where the CPU has it (without it LLVM would
#: need a runtime helper numba may not link), else the exact bit-manipulation version
f16_to_f32 = _f16_to_f32_hw if target_has("f16c") else _f16_to_f32_sw


@njit(inline="always", cache=True)
def bf16_to_f32(h):
    """bfloat16 bits -> float32 (exact)."""
    return np.uint32(np.uint32(h) << np.uint32(16)).view(np.float32)


@njit(inline="always", cache=True)
def i8_to_f32(c):
    """An int8 code as float32 (exact; the row scale is applied once per row, after the dot)."""
    return np.float32(c)


def row_f32(G, r, kind, buf):  # pragma: no cover - replaced by the overload in numba code
    raise NotImplementedError


@overload(row_f32, inline="always")
def _row_f32(G, r, kind, buf):
    """Row ``r`` of a gallery as float32: a view for float32 data, decoded into ``buf`` for half bits
    and int8 codes (unscaled: the caller multiplies its dots by the row scale)."""
    if G.dtype == types.float32:

        def impl(G, r, kind, buf):
            return G[r]

        return impl

    if G.dtype == types.int8:

        def impl_i8(G, r, kind, buf):
            row = G[r]
            for j in range(row.shape[0]):
                buf[j] = i8_to_f32(row[j])
            return buf

        return impl_i8

    def impl_half(G, r, kind, buf):
        row = G[r]
        if kind == 1:
            for j in range(row.shape[0]):
                buf[j] = f16_to_f32(row[j])
        else:
            for j in range(row.shape[0]):
                buf[j] = bf16_to_f32(row[j])
        return buf

    return impl_half


def score_f32(S, r, j):  # pragma: no cover - replaced by the overload in numba code
    raise NotImplementedError


@overload(score_f32, inline="always")
def _score_f32(S, r, j):
    """Element of a score tile as float32 (float32 data, or bfloat16 bits from a coarse matmul)."""
    if S.dtype == types.float32:
        return lambda S, r, j: S[r, j]
    return lambda S, r, j: bf16_to_f32(S[r, j])


#: fast-math flags of kernels with float reductions: reassociation (vectorised sums) and
#: fused multiply-add only; never ``nnan``/``ninf`` (``-inf`` marks removed items)
FASTMATH = {"reassoc", "contract"}


@njit(fastmath=FASTMATH, cache=True)
def dot(a, b):
    """float32 dot product (reassociation allowed, so LLVM vectorises the reduction).

    Not numba-inlined on purpose: numba's IR inlining would drop these fast-math flags.
    """
    s = np.float32(0.0)
    for j in range(a.shape[0]):
        s += a[j] * b[j]
    return s


def row_dot(x, G, r, kind):  # pragma: no cover - replaced by the overload in numba code
    raise NotImplementedError


def _dot_loop(conv, name: str):
    def loop(x, g):
        s = np.float32(0.0)
        for j in range(x.shape[0]):
            s += x[j] * conv(g[j])
        return s

    # its own name: numba names a compiled function by its qualified name and argument types, which
    # the float16 and bfloat16 loops (both over uint16 bits) would otherwise share
    loop.__name__ = loop.__qualname__ = name
    return njit(fastmath=FASTMATH, cache=True)(loop)


@njit(inline="always", cache=True)
def _same(v):
    return v


_dot_f16 = _dot_loop(f16_to_f32, "dot_f16")
_dot_bf16 = _dot_loop(bf16_to_f32, "dot_bf16")
_dot_i8 = _dot_loop(i8_to_f32, "dot_i8")


@overload(row_dot)
def _row_dot(x, G, r, kind):
    """``x . float32(G[r])`` in one pass over the row, each element widened as it is read.

    One row at a time on purpose: the row is one sequential stream, which the hardware
    prefetchers follow. Interleaving four rows 1-2 KB apart in one loop (to share the loads
    of ``x``) left a half-precision scan 20-25% short of the read bound here; one row at a
    time reaches it (README.md "Few queries")."""
    if G.dtype == types.float32:
        return lambda x, G, r, kind: dot(x, G[r])
    if G.dtype == types.int8:  # the unscaled dot ``x . codes[r]`` (1 byte per element read)
        return lambda x, G, r, kind: _dot_i8(x, G[r])

    def impl_half(x, G, r, kind):
        if kind == 1:
            return _dot_f16(x, G[r])
        return _dot_bf16(x, G[r])

    return impl_half


# -- exclusions -------------------------------------------------------------------------
@njit(cache=True)
def patch_excluded(vals, q, start, excl, value):
    """Set the entries of ``vals`` (items ``start..start+len``) excluded for query ``q`` to ``value``."""
    stop = start + vals.shape[0]
    for m in range(excl.shape[1]):
        e = excl[q, m]
        if e >= start and e < stop:
            vals[e - start] = value


# -- streamed softmax entropy -----------------------------------------------------------
@njit(inline="always", cache=True)
def exp_f32(x):
    """float32 ``exp(x)`` that vectorises (no libm call): Cody-Waite reduction + degree-6 polynomial.

    Relative error ~1e-7 for x in [-87, 88] (clamped outside).
    """
    x = min(max(x, np.float32(-87.0)), np.float32(88.0))
    n = np.float32(np.floor(x * np.float32(1.4426950408889634) + np.float32(0.5)))
    r = x - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)
    p = np.float32(1.0 / 720.0)
    p = p * r + np.float32(1.0 / 120.0)
    p = p * r + np.float32(1.0 / 24.0)
    p = p * r + np.float32(1.0 / 6.0)
    p = p * r + np.float32(0.5)
    p = p * r + np.float32(1.0)
    p = p * r + np.float32(1.0)
    return p * np.int32(np.int32(np.int32(n) + np.int32(127)) << np.int32(23)).view(np.float32)


@njit(fastmath=FASTMATH, cache=True)
def entropy_update(vals, inv_tau, state):
    """Fold ``vals`` (``-inf`` = removed) into ``state = [max x, sum e, sum e*(x - max)]``, x = v / tau.

    ``e = exp(x - max)`` in float32 (:func:`exp_f32`), sums in float64.
    """
    it = np.float32(inv_tau)
    m = -np.inf
    for j in range(vals.shape[0]):
        v = vals[j]
        if v != -np.inf:
            m = max(m, np.float64(v * it))
    if m == -np.inf:
        return
    if m > state[0]:
        if state[0] != -np.inf:
            scale = np.exp(state[0] - m)
            state[2] = scale * (state[2] + (state[0] - m) * state[1])
            state[1] = scale * state[1]
        state[0] = m
    mf = np.float32(state[0])
    z = 0.0
    a = 0.0
    for j in range(vals.shape[0]):
        v = vals[j]
        x = v * it - mf
        e = exp_f32(x) if v != -np.inf else np.float32(0.0)
        z += e
        a += e * x if v != -np.inf else np.float32(0.0)
    state[1] += z
    state[2] += a


def merged_entropy_states(states: np.ndarray) -> np.ndarray:
    """One ``[Q, 3]`` state from per-chunk states ``[C, Q, 3]`` of :func:`entropy_update`: the sums
    rescaled to the largest max, ``A`` shifted by ``(m_c - M) Z_c`` as in the update."""
    m = states[:, :, 0]
    M = m.max(axis=0)
    out = new_entropy_state(states.shape[1])
    seen = np.isfinite(M)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.where(np.isfinite(m), np.exp(m - M), 0.0)
        shift = np.where(np.isfinite(m), m - M, 0.0)
    out[seen, 0] = M[seen]
    out[seen, 1] = (scale * states[:, :, 1]).sum(axis=0)[seen]
    out[seen, 2] = (scale * (states[:, :, 2] + shift * states[:, :, 1])).sum(axis=0)[seen]
    return out


def entropy_from_state(state: np.ndarray) -> np.ndarray:
    """``H = log Z - A / Z`` per query (0 for a query with no items)."""
    z = state[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(z > 0, np.log(np.where(z > 0, z, 1.0)) - state[:, 2] / np.where(z > 0, z, 1.0), 0.0)
    return h.astype(np.float32)


def log_partition_from_state(state: np.ndarray) -> np.ndarray:
    """``log Z = max x + log(sum e)`` per query (``-inf`` for a query with no items)."""
    z = state[:, 1]
    with np.errstate(divide="ignore"):
        return np.where(z > 0, state[:, 0] + np.log(np.where(z > 0, z, 1.0)), -np.inf).astype(np.float32)


def new_entropy_state(Q: int) -> np.ndarray:
    s = np.zeros((Q, 3), dtype=np.float64)
    s[:, 0] = -np.inf
    return s


def exclusion_value(exclude_score: float | None) -> np.float32:
    return NEG_INF if exclude_score is None else np.float32(exclude_score)


def empty_exclude() -> np.ndarray:
    return np.full((1, 0), -1, dtype=np.int32)
