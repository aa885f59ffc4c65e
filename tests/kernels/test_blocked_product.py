"""The numba backend's register-tiled tile product (``numba/_gemm.py``), its fused blocked
cosine top-k (thread heaps merged, odd sub-tiles, exclusions, exact ties across chunks) and the
thread policy (``numba/_threads.py``, ``agentcir/_threads.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from kernel_checks import AVX2_FEATURES, KINDS, TOL, as_kind, check_exact, check_topk, unit_rows

from agentcir import kernels as K
from agentcir.kernels._inputs import Gallery, to_backend_gallery

pytest.importorskip("numba")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "R,T,sub", [(1, 1, 6), (3, 5, 6), (4, 6, 6), (5, 13, 7), (9, 37, 12), (8, 100, 37), (17, 40, 25), (33, 29, 29)]
)
def test_product_matches_float64(kind, R, T, sub):
    """Every row count (padded to a panel), every tail (not a multiple of the microkernel's rows), every
    sub-tile split."""
    from agentcir.kernels.numba import _gemm
    from agentcir.kernels.numba._common import KIND_CODES

    rng = np.random.default_rng(R * 100 + T)
    d = 37
    X = rng.standard_normal((R, d)).astype(np.float32)
    G = as_kind(rng.standard_normal((T + 9, d)).astype(np.float32), kind)
    g = to_backend_gallery(G, "numpy")
    start, stop = 4, 4 + T
    P = _gemm.pack_rows(X)
    w = _gemm.panel_width(R)
    assert P.shape == (-(-R // w), d, w) and w == (16 if R > 8 else 8 if R > 4 else 4)
    np.testing.assert_array_equal(P.transpose(0, 2, 1).reshape(-1, d)[:R], X)
    S = np.full((P.shape[0] * w, T), np.nan, dtype=np.float32)
    _gemm.product(P, g.data, KIND_CODES[g.kind], start, stop, sub, S)
    want = X.astype(np.float64) @ np.asarray(G, dtype=np.float64)[start:stop].T
    np.testing.assert_allclose(S[:R], want, rtol=0, atol=1e-5)
    assert not S[R:].any(), "padding rows must score zero"


@pytest.mark.parametrize("dtype", [np.float32, np.uint16, np.int8])
def test_the_prefetched_region_is_the_next_sub_tile_within_the_gallery(dtype):
    """A sweep of rows ``[lo, hi)`` prefetches the next ``hi - lo`` rows' own bytes (half and int8 rows
    before they are widened), cut at the gallery's end: never a byte past it."""
    from numba import njit

    from agentcir.kernels.numba import _gemm

    region = njit(lambda G, lo, hi: _gemm.next_rows(G, lo, hi))
    G = np.zeros((100, 48), dtype=dtype)
    row = 48 * G.itemsize
    assert region(G, 10, 30) == (30 * row, 20 * row // _gemm.LINE)
    assert region(G, 80, 95) == (95 * row, 5 * row // _gemm.LINE)
    assert region(G, 90, 100)[1] == 0
    for lo, hi in [(0, 12), (50, 80), (70, 99)]:
        a0, lines = region(G, lo, hi)
        assert a0 + lines * _gemm.LINE <= G.nbytes


def test_sub_tiles_follow_the_l2_cache(monkeypatch):
    """A quarter of the L2 the C library reports (the sub-tile, the prefetched next one and the score
    block fit), 1 MB assumed where it reports none, within 64 KB .. 1 MB."""
    from agentcir.kernels.numba import _gemm

    assert _gemm.sub_bytes(1 << 20) == 256 << 10 and _gemm.sub_bytes(512 << 10) == 128 << 10
    assert _gemm.sub_bytes(0) == 256 << 10 and _gemm.sub_bytes(128 << 10) == 64 << 10
    assert _gemm.sub_bytes(64 << 20) == 1 << 20
    monkeypatch.setattr(os, "sysconf", lambda name: 2 << 20 if name == "SC_LEVEL2_CACHE_SIZE" else 0)
    assert _gemm.l2_bytes() == 2 << 20
    monkeypatch.setattr(os, "sysconf", lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert _gemm.l2_bytes() == 0
    assert _gemm.sub_rows(512) * 4 * 512 <= _gemm.SUB_BYTES


@pytest.mark.parametrize("kind", KINDS)
def test_blocked_cosine_many_chunks_and_exclusions(kind):
    """Q > 4 (blocked path), 37-row sub-tiles, chunks of odd sizes, exclusions removed or re-scored."""
    rng = np.random.default_rng(11)
    Q, N, d = 9, 1001, 21
    G = as_kind(unit_rows(rng, N, d), kind)
    X = unit_rows(rng, Q, d)
    ex = rng.integers(-1, N, size=(Q, 3))
    ref_all = K.cosine_topk(X, G, N, exclude=ex, backend="reference")
    check_topk(K.cosine_topk(X, G, 17, exclude=ex, backend="numba"), ref_all, 17, TOL[kind])
    ref_all = K.cosine_topk(X, G, N + 5, exclude=ex, exclude_score=-3.0, backend="reference")
    check_topk(K.cosine_topk(X, G, N + 5, exclude=ex, exclude_score=-3.0, backend="numba"), ref_all, N + 5, TOL[kind])


def test_blocked_cosine_ties_across_chunks(monkeypatch):
    """Duplicates of one row spread over every chunk: merged heaps keep the lower ids, exactly."""
    from agentcir.kernels.numba import _gemm

    monkeypatch.setattr(_gemm, "CHUNKS_PER_THREAD", 50)
    rng = np.random.default_rng(12)
    N, d = 400, 8
    G = rng.integers(-2, 3, size=(N, d)).astype(np.float32) / 4
    G[::13] = G[5]
    X = rng.integers(-2, 3, size=(6, d)).astype(np.float32) / 4
    X[:] = G[5]
    for k in (1, 7, 40):
        ref = K.cosine_topk(X, G, k, backend="reference")
        check_exact(K.cosine_topk(X, G, k, backend="numba"), ref)


def test_heap_offers_keep_the_lower_id_in_any_order():
    """A thread's heap receives its chunks in whatever order the scheduler hands them out: a score equal
    to the heap's worst, offered later with a lower id, still replaces it (the top-k is the lower ids)."""
    from agentcir.kernels.numba._common import new_heaps, select_row

    hs, hi, cnt = new_heaps(1, 3)
    vals = np.full(5, 0.5, dtype=np.float32)
    n = select_row(vals, 10, hs[0], hi[0], 0)  # ids 10..14 first
    n = select_row(vals, 0, hs[0], hi[0], n)  # then ids 0..4, equal scores
    assert n == 3 and sorted(hi[0]) == [0, 1, 2]


def test_blocked_pass_uses_one_heap_per_thread(monkeypatch):
    """Many chunks, few threads: the heaps are the threads' (the warm-up is paid once per thread), and the
    result is the reference's whatever thread ran which chunk; no more chunks than threads: one set per
    chunk (never more heaps than chunks)."""
    import numba

    import agentcir.kernels.numba.cosine as cos
    from agentcir.kernels import _tiling
    from agentcir.kernels.numba import _common

    monkeypatch.setattr(_tiling, "TILE_OVERRIDE", 12)  # 12-row sub-tiles: up to 8 chunks per thread
    made = []
    real = _common.thread_heaps

    def spy(Q, k, n_chunks):
        made.append((n_chunks, real(Q, k, n_chunks)))
        return made[-1][1]

    monkeypatch.setattr(cos, "thread_heaps", spy)
    rng = np.random.default_rng(3)
    for n in (3000, 12):
        G, X = unit_rows(rng, n, 24), unit_rows(rng, 20, 24)
        ref = K.cosine_topk(X, G, n, backend="reference")
        check_topk(K.cosine_topk(X, G, 9, backend="numba"), ref, 9, TOL["float32"])
    (many, (hs, _, cnt)), (one, (hs1, _, _)) = made
    assert many > numba.get_num_threads() and hs.shape[0] == numba.get_num_threads()
    assert cnt[:, :20].sum(axis=0).min() >= 9 and not cnt[:, 20:].any()  # rows past Q stay unused
    assert one == 1 and hs1.shape[0] == 1
    # two threads' heap sets never share a cache line (the threshold read against the other's pushes)
    hs, hi, cnt = real(1, 10, 8)
    assert hs.shape[::2] == hi.shape[::2] == (numba.get_num_threads(), 10) and cnt.shape[0] == numba.get_num_threads()
    assert hs.strides[0] >= 40 + _common.HEAP_GAP and hi.strides[0] >= 40 + _common.HEAP_GAP
    assert cnt.strides[0] >= 8 + _common.HEAP_GAP
    assert all(a.flags.c_contiguous for a in (hs, hi, cnt))  # whole arrays at any thread count


def test_one_compiled_variant_whatever_the_arrays_writability_and_the_thread_count():
    """A fused kernel compiles once per gallery dtype: writable or read-only queries, gallery and scales
    (a memory-mapped gallery is read-only) and the heaps at one or more threads give the same
    argument types (each new variant would cost seconds of compilation)."""
    import numba

    from agentcir.kernels.numba import cosine, octopus
    from agentcir.kernels.numba._common import empty_exclude, exclusion_value

    rng = np.random.default_rng(5)
    X, G = unit_rows(rng, 20, 24), unit_rows(rng, 300, 24)
    ex, ev = empty_exclude(), exclusion_value(None)

    def frozen(a):
        a = a.copy()
        a.flags.writeable = False
        return a

    cosine.blocked_topk(X, Gallery(G, "float32"), 5, ex, ev)
    cosine.direct_topk(X[:2], Gallery(G, "float32"), 5, ex, ev)
    kernels = (cosine._blocked_kernel, cosine._direct_kernel)
    seen = [len(k.signatures) for k in kernels]
    threads = numba.get_num_threads()
    try:
        for n in {1, threads}:
            numba.set_num_threads(n)
            for x, g in ((X, G), (frozen(X), frozen(G))):
                ref = cosine.blocked_topk(X, Gallery(G, "float32"), 5, ex, ev)
                got = cosine.blocked_topk(x, Gallery(g, "float32"), 5, ex, ev)
                np.testing.assert_array_equal(got[1], ref[1])
                cosine.direct_topk(x[:2], Gallery(g, "float32"), 5, ex, ev)
    finally:
        numba.set_num_threads(threads)
    assert [len(k.signatures) for k in kernels] == seen
    I, R, T, V, P = unit_rows(rng, 300, 24), *(unit_rows(rng, 2, 24) for _ in "RTV"), unit_rows(rng, 2, 3, 24)
    ref = octopus.octopus_topk(R, P, T, V, Gallery(I, "float32"), Gallery(I, "float32"), 4, 0.2, 0.04, 0.02, None, None)
    seen = len(octopus._fused_kernel.signatures)
    got = octopus.octopus_topk(
        frozen(R), frozen(P), frozen(T), frozen(V), Gallery(frozen(I), "float32"), Gallery(frozen(I), "float32"),
        4, 0.2, 0.04, 0.02, None, None,
    )  # fmt: skip
    np.testing.assert_array_equal(got[1], ref[1])
    assert len(octopus._fused_kernel.signatures) == seen


def test_avx2_gets_the_narrow_tile_and_exact_products(tmp_path):
    """With AVX2's 16 vector registers (forced here through NUMBA_CPU_FEATURES, as the benchmarks
    force a lower ISA) the 16-row panel's microkernel is 6 rows x two 8-lane vectors, and its products
    are exact; the host's own tile (12 x 16 lanes with AVX-512) is the one every other kernel test runs."""
    from agentcir.kernels.numba import _gemm

    assert _gemm.TILES[16] == ((16, 12, 1) if _gemm.wide_registers() else (8, 6, 2))
    code = (
        "import numpy as np\n"
        "from agentcir.kernels.numba import _gemm\n"
        "rng = np.random.default_rng(0)\n"
        "X = rng.standard_normal((19, 40)).astype(np.float32)\n"
        "G = rng.standard_normal((50, 40)).astype(np.float32)\n"
        "S = np.zeros((32, 47), np.float32)\n"
        "_gemm.product(_gemm.pack_rows(X), G, 0, 2, 49, 13, S)\n"
        "err = np.abs(S[:19] - X.astype(np.float64) @ G[2:49].astype(np.float64).T).max()\n"
        "print(*_gemm.TILES[16], err < 1e-4, not S[19:].any())\n"
    )
    env = {
        **os.environ,
        "NUMBA_CACHE_DIR": str(tmp_path),
        "NUMBA_CPU_NAME": "haswell",
        "NUMBA_CPU_FEATURES": AVX2_FEATURES,
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["8", "6", "2", "True", "True"], out.stderr[-2000:]


def test_equal_rows_score_alike_anywhere_and_half_rows_as_their_float32_values(monkeypatch):
    """Each score is accumulated in the order of ``k`` whatever the row's place in a tile, so equal
    gallery rows (and equal queries) get bit-identical scores; a half / int8 sub-tile is widened and
    multiplied as float32, so its scores are bit-identical to those of its float32 values."""
    from agentcir.kernels import tune
    from agentcir.kernels.numba import _gemm
    from agentcir.kernels.numba._common import KIND_CODES

    monkeypatch.setattr(tune, "choose", lambda kind, rows: "loop")
    rng = np.random.default_rng(3)
    d, N = 45, 301
    X = rng.standard_normal((21, d)).astype(np.float32)
    X[17] = X[2]
    G = rng.standard_normal((N, d)).astype(np.float32)
    G[[7, 100, 288, 299]] = G[41]  # tile heads, middles and row tails
    S = np.empty((32, N), np.float32)
    _gemm.product(_gemm.pack_rows(X), G, 0, 0, N, 37, S)
    assert (S[:, [7, 100, 288, 299]] == S[:, [41]]).all()
    np.testing.assert_array_equal(S[17], S[2])
    for kind in ("float16", "bfloat16"):
        H = as_kind(G, kind)
        g = to_backend_gallery(H, "numpy")
        Sh = np.empty_like(S)
        _gemm.product(_gemm.pack_rows(X), g.data, KIND_CODES[kind], 0, N, 37, Sh)
        _gemm.product(_gemm.pack_rows(X), np.asarray(H, dtype=np.float32), 0, 0, N, 37, S)
        np.testing.assert_array_equal(Sh, S)
        a = K.cosine_topk(X, H, 9, backend="numba")
        b = K.cosine_topk(X, np.asarray(H, dtype=np.float32), 9, backend="numba")
        np.testing.assert_array_equal(a.scores, b.scores)
        np.testing.assert_array_equal(a.ids, b.ids)


def test_balanced_restores_the_chunk_size():
    import numba

    from agentcir.kernels.numba._threads import balanced

    before = numba.get_parallel_chunksize()
    with balanced():
        assert numba.get_parallel_chunksize() == 1
    assert numba.get_parallel_chunksize() == before
    with pytest.raises(RuntimeError):
        with balanced():
            raise RuntimeError("boom")
    assert numba.get_parallel_chunksize() == before


def _policy_env(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_THREAD_TIMEOUT", "AGENTCIR_THREAD_POLICY")}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout.strip()


def test_thread_policy_sets_openblas_idle_timeout():
    code = "import agentcir, os; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'), agentcir._threads.applied())"
    assert _policy_env(code) == "20 True"
    assert _policy_env(code, OPENBLAS_THREAD_TIMEOUT="7") == "7 True"  # the user's value is kept
    assert _policy_env(code, AGENTCIR_THREAD_POLICY="off") == "None False"
    # numpy first: its OpenBLAS read its environment already, so agentcir makes it read it again
    late = (
        "import ctypes, numpy, agentcir, os\n"
        "from agentcir._threads import loaded_openblas\n"
        "libs = loaded_openblas()\n"
        "a = numpy.arange(90000, dtype=numpy.float64).reshape(300, 300) / 9e4\n"
        "ok = numpy.allclose(a @ a, numpy.einsum('ij,jk->ik', a, a))\n"  # BLAS works after the pool restart
        "print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'), agentcir._threads.applied(), ok,\n"
        "      sorted({ctypes.CDLL(p).openblas_thread_timeout() for p in libs}), len(libs) > 0)"
    )
    assert _policy_env(late) == "20 True True [20] True"
    before = (
        "import ctypes, numpy\nfrom agentcir._threads import loaded_openblas\n"
        "print(sorted({ctypes.CDLL(p).openblas_thread_timeout() for p in loaded_openblas()}))"
    )
    assert _policy_env(before, AGENTCIR_THREAD_POLICY="off") == "[0]"  # untouched: OpenBLAS's own default


def test_microkernel_rate_script_runs(capsys):
    """benchmarks/microkernel_rate.py (the GFLOP/s figures of README.md) on a small gallery."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "microkernel_rate.py"
    spec = importlib.util.spec_from_file_location("microkernel_rate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(["--rows", "3000", "--rounds", "1"])
    out = capsys.readouterr().out
    for name in ("microkernel, L2-resident", "microkernel, streamed", "numpy matmul (BLAS)"):
        assert name in out and "GFLOP/s" in out.split(name)[1].splitlines()[0]
