"""Gallery ops (cosine_topk, proxy_scores_topk, octopus_weights, octopus_topk): every backend
against the numpy reference on seeded odd shapes, exclusions, exact ties, and memory."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest
from kernel_checks import TOL, as_kind, check_exact, check_topk, unit_rows

from agentcir import kernels as K

# (Q, N, d, k): Q=1, k > N, N not a multiple of the 37-row test tile, d not a multiple of 8,
# few queries (numba's direct kernel) and more (the blocked-product path)
CASES = [(1, 1, 3, 1), (1, 5, 3, 8), (3, 300, 37, 10), (7, 301, 37, 12), (5, 129, 9, 130)]
#: Triton runs in the interpreter (~1000x slower) on CPU-only machines: fewer, smaller cases
#: (17 queries = two query blocks of 16; 130 rows = two 128-row tiles, the second partial)
CASES_TRITON = [(1, 5, 3, 8), (17, 130, 5, 4)]
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def cases(backend):
    return CASES_TRITON if backend == "triton" and INTERPRETED else CASES


def interpreted_half(backend, kind):
    """Interpreted Triton checks half-precision loads in the cosine test only (time budget)."""
    if backend == "triton" and INTERPRETED and kind != "float32":
        pytest.skip("interpreted Triton: half-precision gallery loads are covered by the cosine_topk test")


def excludes(rng, Q, N, backend=""):
    """None, an empty [Q, 0], all -1, and random ids with repeats and -1 padding."""
    rand = rng.integers(-1, N, size=(Q, 3))
    rand[:, 1] = rand[:, 0]
    if backend == "triton" and INTERPRETED:
        return [None, rand]
    return [None, np.zeros((Q, 0), dtype=np.int64), np.full((Q, 2), -1), rand]


def test_cosine_topk_matches_reference(backend, kind):
    rng = np.random.default_rng(0)
    for Q, N, d, k in cases(backend):
        G = as_kind(unit_rows(rng, N, d), kind)
        X = unit_rows(rng, Q, d)
        for ex in excludes(rng, Q, N, backend):
            for es in (None, -10.0) if ex is not None else (None,):
                ref = K.cosine_topk(X, G, max(k, N), exclude=ex, exclude_score=es, backend="reference")
                got = K.cosine_topk(X, G, k, exclude=ex, exclude_score=es, backend=backend)
                check_topk(got, ref, k, TOL[kind])


@pytest.mark.parametrize("agg", ["mean", "max", "logsumexp", "octopus"])
def test_proxy_scores_topk_matches_reference(backend, kind, agg):
    interpreted_half(backend, kind)
    rng = np.random.default_rng(1)
    for Q, N, d, k in cases(backend)[1:]:
        G = as_kind(unit_rows(rng, N, d), kind)
        P = unit_rows(rng, Q, 3, d)
        ref_rows = unit_rows(rng, Q, d) if agg == "octopus" else None
        ex = excludes(rng, Q, N)[-1]
        kw = dict(agg=agg, tau=0.1, reference=ref_rows, exclude=ex)
        ref = K.proxy_scores_topk(P, G, max(k, N), backend="reference", **kw)
        check_topk(K.proxy_scores_topk(P, G, k, backend=backend, **kw), ref, k, TOL[kind])


def test_octopus_weights_match_reference(backend, kind):
    interpreted_half(backend, kind)
    rng = np.random.default_rng(2)
    for Q, N, d, _ in cases(backend)[1:]:
        G = as_kind(unit_rows(rng, N, d), kind)
        P = unit_rows(rng, Q, 4, d)
        R = unit_rows(rng, Q, d)
        ref = K.octopus_weights(R, P, G, tau=0.04, backend="reference")
        got = np.asarray(K.octopus_weights(R, P, G, tau=0.04, backend=backend))
        assert got.shape == (Q, 4) and got.dtype == np.float32
        np.testing.assert_allclose(got, ref, atol=1e-5)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)
        one = np.asarray(K.octopus_weights(R, P[:, :1], G, tau=0.04, backend=backend))  # a single proxy
        assert one.dtype == np.float32 and np.array_equal(
            one, K.octopus_weights(R, P[:, :1], G, tau=0.04, backend="reference")
        )


def test_octopus_gap_sums_add_up_over_parts_of_the_gallery(backend, kind):
    """The un-normalised statistic of octopus_weights: every backend equals the reference, the sums
    of two halves of a gallery equal the whole's, and their softmax is octopus_weights."""
    interpreted_half(backend, kind)
    rng = np.random.default_rng(7)
    for Q, N, d, _ in cases(backend)[1:]:
        G = as_kind(unit_rows(rng, N, d), kind)
        P, R = unit_rows(rng, Q, 4, d), unit_rows(rng, Q, d)
        ref = K.octopus_gap_sums(R, P, G, backend="reference")
        got = np.asarray(K.octopus_gap_sums(R, P, G, backend=backend))
        assert got.shape == (Q, 4) and got.dtype == np.float64 and (ref >= 0).all()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)
        h = N // 2
        halves = K.octopus_gap_sums(R, P, G[:h], backend="reference") + K.octopus_gap_sums(
            R, P, G[h:], backend="reference"
        )
        np.testing.assert_allclose(halves, ref, rtol=1e-9)
        x = ref / (N * 0.04)
        w = np.exp(x - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(
            w / w.sum(axis=1, keepdims=True), K.octopus_weights(R, P, G, tau=0.04, backend="reference"), atol=1e-6
        )


@pytest.mark.parametrize("bidirectional", [True, False])
def test_octopus_topk_matches_reference(backend, kind, bidirectional):
    interpreted_half(backend, kind)
    rng = np.random.default_rng(3)
    for Q, N, d, k in cases(backend)[1:]:
        I = as_kind(unit_rows(rng, N, d), kind)
        C = as_kind(unit_rows(rng, N, d), kind) if bidirectional else None
        R, T = unit_rows(rng, Q, d), unit_rows(rng, Q, d)
        V = unit_rows(rng, Q, d) if bidirectional else None
        P = unit_rows(rng, Q, 5, d)
        variants = [(None, -10.0), (excludes(rng, Q, N)[-1], -10.0), (excludes(rng, Q, N)[-1], None)]
        for ex, es in variants[1:2] if backend == "triton" and INTERPRETED else variants:
            kw = dict(visual=V, captions=C, lam=0.3, tau=0.05, entropy_tau=0.05, exclude=ex, exclude_score=es)
            ref = K.octopus_topk(R, P, T, I, max(k, N), backend="reference", **kw)
            got = K.octopus_topk(R, P, T, I, k, backend=backend, **kw)
            check_topk(got[:2], ref[:2], k, TOL[kind])
            np.testing.assert_allclose(np.asarray(got.weights), ref.weights, atol=1e-5)
            np.testing.assert_allclose(np.asarray(got.entropy), ref.entropy, atol=1e-4)
            np.testing.assert_allclose(np.asarray(got.log_partition), ref.log_partition, rtol=1e-5, atol=1e-4)
            # the reference's pair against its own full ranking (every item kept, k >= N)
            x = np.where(ref.ids >= 0, ref.scores, -np.inf).astype(np.float64) / 0.05
            logz = np.log(np.exp(x - x.max(axis=1, keepdims=True)).sum(axis=1)) + x.max(axis=1)
            p = np.exp(x - logz[:, None])
            np.testing.assert_allclose(ref.log_partition, logz, rtol=1e-5)
            np.testing.assert_allclose(ref.entropy, logz - (p * np.where(p > 0, x, 0.0)).sum(axis=1), atol=1e-4)


def test_exact_ties_keep_the_lower_id(backend, kind):
    """Values on a 1/4 grid: every product is exact in every backend, so ties are exact ties."""
    interpreted_half(backend, kind)
    rng = np.random.default_rng(4)
    N, d = 150, 9
    quick = backend == "triton" and INTERPRETED
    G = rng.integers(-2, 3, size=(N, d)).astype(np.float32) / 4
    G[40:60] = G[7]  # a block of duplicates of row 7
    X = rng.integers(-2, 3, size=(5, d)).astype(np.float32) / 4
    X[0] = G[7]
    Gk = as_kind(G, kind)
    for k in (20,) if quick else (1, 20, 40):
        ref = K.cosine_topk(X, Gk, k, backend="reference")
        check_exact(K.cosine_topk(X, Gk, k, backend=backend), ref)
        assert ref.ids[0, : min(k, 21)].tolist() == [7, *range(40, 60)][: min(k, 21)]
    P = np.stack([X, X[::-1]], axis=1)  # K = 2 proxies: mean = sum / 2 and max are exact
    for agg in ("mean",) if quick else ("mean", "max"):
        ref = K.proxy_scores_topk(P, Gk, 30, agg=agg, backend="reference")
        check_exact(K.proxy_scores_topk(P, Gk, 30, agg=agg, backend=backend), ref)


def test_torch_tensor_inputs_come_back_as_tensors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    G, X = unit_rows(rng, 50, 8), unit_rows(rng, 3, 8)
    out = K.cosine_topk(torch.from_numpy(X), torch.from_numpy(G).to(torch.bfloat16), 4, backend="torch")
    assert isinstance(out.ids, torch.Tensor) and out.ids.dtype == torch.int32
    ref = K.cosine_topk(X, as_kind(G, "bfloat16"), 50, backend="reference")
    check_topk((out.scores.numpy(), out.ids.numpy()), ref, 4, TOL["bfloat16"])


def test_numba_fused_ops_never_hold_QKN(monkeypatch):
    """Peak numpy memory of the fused numba path stays far below one [Q, K, N] float32 buffer."""
    pytest.importorskip("numba")
    from agentcir.kernels import _tiling

    monkeypatch.setattr(_tiling, "TILE_OVERRIDE", 1024)
    rng = np.random.default_rng(6)
    Q, Kp, N, d = 4, 6, 40_000, 16
    I, C = unit_rows(rng, N, d), unit_rows(rng, N, d)
    R, T, V, P = unit_rows(rng, Q, d), unit_rows(rng, Q, d), unit_rows(rng, Q, d), unit_rows(rng, Q, Kp, d)
    args = (R, P, T, I, 10)
    K.octopus_topk(*args, visual=V, captions=C, backend="numba")  # compile outside the measurement
    tracemalloc.start()
    K.octopus_topk(*args, visual=V, captions=C, backend="numba")
    K.proxy_scores_topk(P, I, 10, agg="logsumexp", backend="numba")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < Q * N * 4, f"peak {peak} bytes is not below one [Q, N] float32 buffer ({Q * N * 4})"


def test_numba_bf16_tile_product_for_octopus_weights(monkeypatch):
    """Large half galleries take the bfloat16 (hi+lo split) tile product: weights stay close."""
    pytest.importorskip("numba")
    from agentcir.kernels.numba import _tiles, weights

    if not _tiles.has_fast_bf16():
        pytest.skip("no native bfloat16 matmul on this CPU (or no torch)")
    monkeypatch.setattr(weights, "COARSE_MIN_ITEMS", 0)
    monkeypatch.setattr(weights, "coarse_is_faster", lambda: True)  # on AVX512-BF16 without AMX too
    rng = np.random.default_rng(7)
    G = unit_rows(rng, 3000, 64).astype(np.float16)
    R = unit_rows(rng, 4, 64)
    P = unit_rows(rng, 4, 10, 64)
    ref = K.octopus_weights(R, P, G, backend="reference")
    got = K.octopus_weights(R, P, G, backend="numba")
    np.testing.assert_allclose(got, ref, atol=2e-4)


def test_numba_parallel_logsumexp_tiles(monkeypatch):
    """The logsumexp tile kernel (parallel over queries, many odd tiles) on a small case."""
    pytest.importorskip("numba")
    from agentcir.kernels.numba import _common

    monkeypatch.setattr(_common, "PARALLEL_MIN_WORK", 0)
    rng = np.random.default_rng(8)
    G, P = unit_rows(rng, 301, 37), unit_rows(rng, 7, 3, 37)
    ex = rng.integers(-1, 301, size=(7, 2))
    ref = K.proxy_scores_topk(P, G, 301, agg="logsumexp", tau=0.1, exclude=ex, backend="reference")
    got = K.proxy_scores_topk(P, G, 12, agg="logsumexp", tau=0.1, exclude=ex, backend="numba")
    check_topk(got, ref, 12, TOL["float32"])


def test_read_only_memory_mapped_gallery(backend, tmp_path):
    """The gallery store hands out read-only memory maps: every backend reads them as they are."""
    rng = np.random.default_rng(9)
    Q, N, d, k = cases(backend)[-1]
    for kind in ("float32",) if backend == "triton" and INTERPRETED else ("float32", "float16"):
        path = tmp_path / f"g-{kind}.npy"
        np.save(path, unit_rows(rng, N, d).astype(kind))
        G = np.load(path, mmap_mode="r")
        X, P = unit_rows(rng, Q, d), unit_rows(rng, Q, 3, d)
        check_topk(
            K.cosine_topk(X, G, k, backend=backend), K.cosine_topk(X, G, max(k, N), backend="reference"), k, TOL[kind]
        )
        ref = K.octopus_topk(X, P, X, G, max(k, N), visual=X, captions=G, backend="reference")
        check_topk(K.octopus_topk(X, P, X, G, k, visual=X, captions=G, backend=backend)[:2], ref[:2], k, TOL[kind])


def test_zero_queries(backend):
    G = np.eye(5, 3, dtype=np.float32)
    assert K.cosine_topk(np.zeros((0, 3)), G, 2, backend=backend).ids.shape == (0, 2)
    assert K.proxy_scores_topk(np.zeros((0, 4, 3)), G, 2, backend=backend).scores.shape == (0, 2)
    assert K.octopus_weights(np.zeros((0, 3)), np.zeros((0, 4, 3)), G, backend=backend).shape == (0, 4)
    out = K.octopus_topk(np.zeros((0, 3)), np.zeros((0, 4, 3)), np.zeros((0, 3)), G, 2, backend=backend)
    assert out.ids.shape == (0, 2) and out.weights.shape == (0, 4) and out.entropy.shape == (0,)
    assert out.log_partition.shape == (0,)


def test_triton_k_beyond_the_device_limit_runs_the_torch_topk():
    """k above MAX_DEVICE_K (tiles would exceed the GPU's shared memory) is served by the torch
    backend's running top-k on the same device, with the same results."""
    pytest.importorskip("triton")
    from kernel_checks import BACKENDS

    if "triton" not in BACKENDS:
        pytest.skip("triton backend unavailable")
    from agentcir.kernels.triton._common import MAX_DEVICE_K

    rng = np.random.default_rng(7)
    Q, N, d, k = 2, MAX_DEVICE_K + 40, 5, MAX_DEVICE_K + 1
    G, X, P, R = unit_rows(rng, N, d), unit_rows(rng, Q, d), unit_rows(rng, Q, 3, d), unit_rows(rng, Q, d)
    ex = np.array([[3, -1], [0, 5]])
    check_topk(
        K.cosine_topk(X, G, k, exclude=ex, backend="triton"),
        K.cosine_topk(X, G, N, exclude=ex, backend="reference"),
        k,
        TOL["float32"],
    )
    check_topk(
        K.proxy_scores_topk(P, G, k, agg="max", backend="triton"),
        K.proxy_scores_topk(P, G, N, agg="max", backend="reference"),
        k,
        TOL["float32"],
    )
    kw = dict(visual=X, captions=G, lam=0.3, tau=0.05, entropy_tau=0.05, exclude=ex)
    got, ref = (
        K.octopus_topk(R, P, X, G, k, backend="triton", **kw),
        K.octopus_topk(R, P, X, G, N, backend="reference", **kw),
    )
    check_topk(got[:2], ref[:2], k, TOL["float32"])
    np.testing.assert_allclose(np.asarray(got.entropy), ref.entropy, atol=1e-4)


@pytest.mark.parametrize("float_first", [True, False])
@pytest.mark.parametrize("tile", [1, 3, 7, 40])
def test_torch_running_top_k_settles_every_tie_by_the_lower_id(tile, float_first):
    """The torch backend's running top-k, both ways of selecting a tile (float ``topk`` first, packed keys
    where the k-th place is a tie; packed keys throughout), against a lexicographic sort: tie-heavy rows,
    removed items (``-inf``), a constant row, and tiles narrower and wider than k."""
    torch = pytest.importorskip("torch")
    from agentcir.kernels.torch._common import RunningTopK

    rng = np.random.default_rng(7)
    Q, N, k = 6, 40, 5
    S = (rng.integers(-3, 4, size=(Q, N)) / 4).astype(np.float32)
    S[1, rng.random(N) < 0.9] = -np.inf  # fewer than k items left
    S[2] = 0.5
    S[3] = rng.standard_normal(N).astype(np.float32)  # no ties
    S[4, :] = -np.inf
    top = RunningTopK(Q, k, torch.device("cpu"), float_first=float_first)
    assert RunningTopK(Q, k, torch.device("cpu")).float_first  # on a CPU by default; packed keys on CUDA
    for start in range(0, N, tile):
        top.push(torch.from_numpy(S[:, start : start + tile].copy()), start)
    got_s, got_i = (t.numpy() for t in top.result())
    for q in range(Q):
        order = np.lexsort((np.arange(N), -S[q]))[:k]
        want_s = S[q, order]
        want_i = np.where(want_s == -np.inf, -1, order)
        np.testing.assert_array_equal(got_s[q], want_s)
        np.testing.assert_array_equal(got_i[q], want_i, err_msg=f"row {q}, tile {tile}")
