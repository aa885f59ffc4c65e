"""int8 galleries (symmetric per-row scale): quantisation, every backend against the reference on the
dequantised rows, the exact float32 re-rank (top-k identical to the float32 top-k on random
normalised galleries with near-ties, clustered embeddings and exclusions), and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_checks import AVX2_FEATURES, KINDS, as_kind, check_topk, unit_rows
from test_gallery_ops import CASES, excludes

from agentcir import kernels as K
from agentcir.kernels import Int8Gallery, KernelInputError, default_shortlist, quantize_int8

#: every backend multiplies in float32 (codes widened exactly, times the row scale)
TOL8 = 2e-5


def test_quantize_hand_computed_and_error_bound():
    G = np.array([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [3.0, 1.5, -0.75]], dtype=np.float32)
    q = quantize_int8(G)
    assert q.codes.dtype == np.int8 and q.scales.dtype == np.float32 and q.shape == (3, 3) and len(q) == 3
    np.testing.assert_allclose(q.scales, [1 / 127, 0.0, 3 / 127], rtol=1e-7)
    # 0.5 * 127 = 63.5 rounds to even (64); 0.25 * 127 = 31.75 -> 32; -0.75 / (3/127) = -31.75 -> -32
    np.testing.assert_array_equal(q.codes, [[64, -127, 32], [0, 0, 0], [127, 64, -32]])
    rng = np.random.default_rng(0)
    X = unit_rows(rng, 500, 33)
    q = quantize_int8(X)
    assert np.abs(q.codes).max() == 127
    err = np.abs(q.dequantize() - X)
    assert (err <= q.scales[:, None] / 2 * (1 + 1e-5) + 1e-12).all()
    out = Int8Gallery(np.zeros((500, 33), np.int8), np.zeros(500, np.float32))
    assert quantize_int8(X.astype(np.float16), out=out) is out
    np.testing.assert_array_equal(np.abs(out.codes.astype(int) - q.codes).max() <= 1, True)
    if "bfloat16" in KINDS:  # bfloat16 rows are read as their float32 values
        b = as_kind(X, "bfloat16")
        np.testing.assert_array_equal(quantize_int8(b).codes, quantize_int8(np.asarray(b, np.float32)).codes)


@pytest.fixture
def scan_backend(backend, monkeypatch):
    """numba and torch (triton runs the torch backend's ops on int8 galleries), in 512-row tiles."""
    if backend == "triton":
        pytest.skip("an int8 gallery on the triton backend runs the torch backend's ops (tested there)")
    from agentcir.kernels import _tiling

    monkeypatch.setattr(_tiling, "TILE_OVERRIDE", 512)
    return backend


def _int8(G):
    q = quantize_int8(G)
    return q, q.dequantize()


def test_cosine_topk_int8_matches_reference(backend):
    """The int8 scan is the float32 product of the dequantised rows (Q <= 4: the direct scan; more: blocked)."""
    if backend == "triton":
        pytest.skip("an int8 gallery on the triton backend runs the torch backend's ops (tested there)")
    rng = np.random.default_rng(0)
    for Q, N, d, k in CASES:
        q8, D = _int8(unit_rows(rng, N, d))
        X = unit_rows(rng, Q, d)
        for ex in excludes(rng, Q, N)[::3]:  # None; random ids with repeats and -1 padding
            for es in (None, -10.0) if ex is not None else (None,):
                ref = K.cosine_topk(X, q8, max(k, N), exclude=ex, exclude_score=es, backend="reference")
                np.testing.assert_allclose(
                    ref.scores,
                    K.cosine_topk(X, D, max(k, N), exclude=ex, exclude_score=es, backend="reference").scores,
                    rtol=0,
                    atol=1e-6,
                )
                got = K.cosine_topk(X, q8, k, exclude=ex, exclude_score=es, backend=backend)
                check_topk(got, ref, k, TOL8)


#: the int8 dot under three code generations: the host's, AVX2 and x86-64 with SSE2 only (no
#: multiply-add-pairs intrinsic: the plain vector IR); the checks are the same in each
_IDOT_CHECK = (
    "import numpy as np\n"
    "from numba import njit\n"
    "from agentcir.kernels.numba import cosine\n"
    "idot = njit(lambda x, c: cosine._idot(x, c))\n"
    "rng = np.random.default_rng(0)\n"
    "ok = True\n"
    "for d in (1, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100, 511, 512, 517):\n"
    "    m = (2**31 - 1) // (127 * d)\n"
    "    for x, c in ((rng.integers(-min(m, 32767), min(m, 32767) + 1, d), rng.integers(-127, 128, d)),\n"
    "                 (np.full(d, -min(m, 32767)), np.full(d, -127)), (np.full(d, min(m, 32767)), np.full(d, 127))):\n"
    "        x, c = x.astype(np.int16), c.astype(np.int8)\n"
    "        ok &= int(idot(x, c)) == int((x.astype(np.int64) * c).sum())\n"
    "        ok &= int(idot(x[::2], c[::2])) == int((x[::2].astype(np.int64) * c[::2]).sum())\n"
    "print(cosine.IDOT_LANES, ok)\n"
)


@pytest.mark.parametrize(
    "cpu,features,lanes",
    [(None, None, None), ("haswell", AVX2_FEATURES, 16), ("x86-64", "+64bit,+cmov,+cx8,+fxsr,+mmx,+sse,+sse2", 8)],
    ids=["host", "avx2", "sse2"],
)
def test_int8_dot_is_exact_on_every_code_generation(cpu, features, lanes, tmp_path):
    """The int8 scan's integer dot (multiply-add pairs over whole vector registers, a scalar tail, a
    scalar loop for strided rows) equals the int64 sum at every length and at the extreme values."""
    pytest.importorskip("numba")
    import os
    import platform
    import subprocess
    import sys

    if cpu and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("forcing an x86 code generation needs an x86 CPU")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    if cpu:
        env["NUMBA_CPU_NAME"], env["NUMBA_CPU_FEATURES"] = cpu, features
    out = subprocess.run([sys.executable, "-c", _IDOT_CHECK], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got_lanes, ok = out.stdout.split()
    assert ok == "True"
    if lanes:
        assert int(got_lanes) == lanes


@pytest.mark.parametrize("path", ["loop", "blas"])
def test_numba_int8_on_both_product_paths(path, monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setenv("AGENTCIR_KERNELS_PRODUCT", path)
    test_cosine_topk_int8_matches_reference("numba")
    test_octopus_ops_int8_match_reference("numba")


def test_numba_direct_scan_reads_int8_codes():
    """The few-query scan is compiled for the int8 codes themselves (1 byte per element read)."""
    pytest.importorskip("numba")
    from agentcir.kernels.numba import cosine

    rng = np.random.default_rng(1)
    q8 = quantize_int8(unit_rows(rng, 64, 16))
    K.cosine_topk(unit_rows(rng, 1, 16), q8, 3, backend="numba")
    assert any("array(int8, 2d" in str(sig[2]) for sig in cosine._direct_kernel_i8.signatures)
    Xq, xs = cosine.int16_queries(np.array([[0.5, -1.0, 0.0]], np.float32))
    np.testing.assert_array_equal(Xq, [[16384, -32767, 0]])  # 0.5 * 32767 = 16383.5 -> 16384 (half to even)
    assert cosine.int16_queries(np.ones((1, 1024), np.float32))[0].max() == (2**31 - 1) // (127 * 1024)


def test_octopus_ops_int8_match_reference(backend):
    if backend == "triton":
        pytest.skip("an int8 gallery on the triton backend runs the torch backend's ops (tested there)")
    rng = np.random.default_rng(3)
    for Q, N, d, k in CASES[1:]:
        I8, _ = _int8(unit_rows(rng, N, d))
        C8, _ = _int8(unit_rows(rng, N, d))
        R, T, V = unit_rows(rng, Q, d), unit_rows(rng, Q, d), unit_rows(rng, Q, d)
        P = unit_rows(rng, Q, 5, d)
        np.testing.assert_allclose(
            np.asarray(K.octopus_gap_sums(R, P, I8, backend=backend)),
            K.octopus_gap_sums(R, P, I8, backend="reference"),
            rtol=1e-5,
            atol=1e-4,
        )
        np.testing.assert_allclose(
            np.asarray(K.octopus_weights(R, P, I8, tau=0.05, backend=backend)),
            K.octopus_weights(R, P, I8, tau=0.05, backend="reference"),
            atol=1e-5,
        )
        ex = excludes(rng, Q, N)[-1]
        for captions, visual in ((C8, V), (None, None)):
            kw = dict(visual=visual, captions=captions, lam=0.3, tau=0.05, entropy_tau=0.05, exclude=ex)
            ref = K.octopus_topk(R, P, T, I8, max(k, N), backend="reference", **kw)
            got = K.octopus_topk(R, P, T, I8, k, backend=backend, **kw)
            check_topk(got[:2], ref[:2], k, TOL8)
            np.testing.assert_allclose(np.asarray(got.entropy), ref.entropy, atol=1e-4)


def _near_tie_gallery(rng, N, d):
    """Unit rows with exact duplicates and near-duplicates (1e-4 apart: the same int8 codes)."""
    G = unit_rows(rng, N, d)
    G[10:20] = G[3]
    G[40:60] = G[30] + 1e-4 * rng.standard_normal((20, d)).astype(np.float32)
    G /= np.linalg.norm(G, axis=1, keepdims=True)
    return G


def _clustered_gallery(rng, N, d):
    """Embedding-like rows: a shared mean direction, 20 clusters, anisotropic noise."""
    mean = unit_rows(rng, 1, d) * 2.0
    centres = unit_rows(rng, 20, d)
    scale = np.linspace(1.0, 0.1, d).astype(np.float32)
    G = mean + centres[rng.integers(0, 20, N)] + 0.6 * rng.standard_normal((N, d)).astype(np.float32) * scale
    return (G / np.linalg.norm(G, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("make", [unit_rows, _near_tie_gallery, _clustered_gallery])
def test_rerank_gives_the_float32_top_k(scan_backend, make):
    """int8 scan + exact re-rank at the default shortlist = the float32 top-k (ids identical to the
    float64 reference on the float32 rows; scores within float32 rounding)."""
    rng = np.random.default_rng(5)
    N, d = 3000, 64
    G = make(rng, N, d)
    q8 = quantize_int8(G)
    X = np.concatenate([unit_rows(rng, 6, d), G[[3, 30, 45]] + 1e-3 * unit_rows(rng, 3, d)])
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    backend = scan_backend
    for Q in (1, 9):  # numba: the direct int8 scan, then the blocked one
        for k in (1, 10, 50):
            for ex, es in ((None, None), (np.arange(Q) * 7, None), (np.arange(Q) * 7, 0.99)):
                ref = K.cosine_topk(X[:Q], G, k, exclude=ex, exclude_score=es, backend="reference")
                got = K.cosine_topk(X[:Q], q8, k, exclude=ex, exclude_score=es, rerank=G, backend=backend)
                np.testing.assert_array_equal(got.ids, ref.ids)
                np.testing.assert_allclose(got.scores, ref.scores, rtol=0, atol=1e-6)
    # the shortlist matters: with shortlist = k the int8 order alone decides, and differs somewhere
    differs = False
    for k in (10, 50):
        ref = K.cosine_topk(X, G, k, backend="reference")
        differs |= bool((K.cosine_topk(X, q8, k, rerank=G, shortlist=k, backend=backend).ids != ref.ids).any())
    assert differs or make is _near_tie_gallery


def test_rerank_pads_and_accepts_memory_maps(tmp_path):
    rng = np.random.default_rng(6)
    G = unit_rows(rng, 20, 8)
    path = tmp_path / "g.npy"
    np.save(path, G)
    mm = np.load(path, mmap_mode="r")
    q8 = quantize_int8(mm)
    X = unit_rows(rng, 2, 8)
    got = K.cosine_topk(X, q8, 25, exclude=[0, 1], rerank=mm)
    ref = K.cosine_topk(X, G, 25, exclude=[0, 1], backend="reference")
    np.testing.assert_array_equal(got.ids, ref.ids)
    assert (got.ids[:, 19:] == -1).all() and np.isneginf(got.scores[:, 19:]).all()
    assert default_shortlist(10) == 74 and default_shortlist(50) == 200


def test_octopus_rerank_gives_the_float32_top_k(scan_backend):
    """Ids identical to the float32 op; scores exact for the scan's weights, which come from the
    int8 rows (here within 1e-3 of the float32 weights, moving the fused scores by < 5e-5)."""
    backend = scan_backend
    rng = np.random.default_rng(7)
    N, d, Q = 2000, 48, 3
    I = _clustered_gallery(rng, N, d)
    C = I + 0.5 * unit_rows(rng, N, d)
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    I8, C8 = quantize_int8(I), quantize_int8(C)
    R = I[[5, 50, 500]]
    P = R[:, None, :] * 0.5 + 0.5 * unit_rows(rng, Q, 4, d)
    P /= np.linalg.norm(P, axis=-1, keepdims=True)
    T, V = unit_rows(rng, Q, d), R + 0.3 * unit_rows(rng, Q, d)
    for k in (1, 10, 50):
        kw = dict(visual=V, captions=C, exclude=[5, 50, 500])
        ref = K.octopus_topk(R, P, T, I, k, backend="reference", **kw)
        kw["captions"] = C8
        got = K.octopus_topk(R, P, T, I8, k, rerank_images=I, rerank_captions=C, backend=backend, **kw)
        np.testing.assert_array_equal(got.ids, ref.ids)
        np.testing.assert_allclose(got.scores, ref.scores, atol=5e-5)
        np.testing.assert_allclose(np.asarray(got.weights), ref.weights, atol=1e-3)


def test_triton_runs_the_torch_ops_on_int8(backend):
    if backend != "triton":
        pytest.skip("triton only")
    rng = np.random.default_rng(2)
    q8 = quantize_int8(unit_rows(rng, 50, 8))
    X = unit_rows(rng, 2, 8)
    got = K.cosine_topk(X, q8, 4, backend="triton")
    np.testing.assert_array_equal(got.ids, K.cosine_topk(X, q8, 4, backend="reference").ids)


def test_torch_tensors_in_torch_out():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    G = unit_rows(rng, 200, 16)
    q8 = quantize_int8(G)
    t8 = Int8Gallery(torch.from_numpy(q8.codes), torch.from_numpy(q8.scales))
    X = unit_rows(rng, 2, 16)
    got = K.cosine_topk(torch.from_numpy(X), t8, 5, backend="torch")
    assert isinstance(got.ids, torch.Tensor)
    np.testing.assert_array_equal(got.ids.numpy(), K.cosine_topk(X, q8, 5, backend="reference").ids)


def test_bad_int8_inputs_name_the_argument():
    rng = np.random.default_rng(9)
    G = unit_rows(rng, 30, 8)
    q8 = quantize_int8(G)
    X = unit_rows(rng, 1, 8)
    bad = [
        (Int8Gallery(q8.codes.astype(np.int16), q8.scales), {}, r"gallery\.codes: expected dtype int8"),
        (Int8Gallery(q8.codes[0], q8.scales), {}, r"gallery\.codes: expected a 2-d"),
        (Int8Gallery(q8.codes, q8.scales[:-1]), {}, r"gallery\.scales: expected shape \(30,\)"),
        (Int8Gallery(q8.codes, q8.scales.astype(np.float64)), {}, r"gallery\.scales: expected dtype float32"),
        (Int8Gallery(q8.codes, np.where(np.arange(30) == 3, np.nan, q8.scales).astype(np.float32)), {}, "finite"),
        (Int8Gallery(q8.codes, -q8.scales), {}, r"gallery\.scales: must be finite and >= 0"),
        (q8, {"rerank": G[:-1]}, r"rerank: expected shape \(30, 8\)"),
        (q8, {"rerank": G.astype(np.float16)}, "rerank: expected float32"),
        (q8, {"rerank": G, "shortlist": 4}, r"shortlist: must be >= k \(5\)"),
        (q8, {"rerank": G, "shortlist": 2.5}, "shortlist: must be an integer"),
        (q8, {"shortlist": 10}, "shortlist: only used with rerank"),
    ]
    for g, kw, msg in bad:
        with pytest.raises(KernelInputError, match=msg):
            K.cosine_topk(X, g, 5, **kw)
    with pytest.raises(KernelInputError, match="gallery: an int8 gallery is accepted by cosine_topk"):
        K.proxy_scores_topk(X[:, None, :], q8, 3)
    with pytest.raises(KernelInputError, match="rerank_captions: required"):
        K.octopus_topk(X, X[:, None, :], X, q8, 3, visual=X, captions=q8, rerank_images=G)
    with pytest.raises(KernelInputError, match="rerank_images: expected shape"):
        K.octopus_topk(X, X[:, None, :], X, q8, 3, rerank_images=G[:3])
    with pytest.raises(KernelInputError, match="gallery: contains NaN"):
        quantize_int8(np.where(np.arange(30)[:, None] == 2, np.inf, G).astype(np.float32))
