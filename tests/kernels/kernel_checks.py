"""Comparison of a backend's ranked output with the reference's (imported by the kernel tests)."""

from __future__ import annotations

import importlib.util

import numpy as np

from agentcir.kernels.dispatch import why_unavailable

#: every non-reference backend that can run here (the reference is the spec they are checked against)
BACKENDS = [b for b in ("numba", "torch", "triton") if why_unavailable(b) is None]
#: the features of an AVX2 CPU (Haswell), forced on whatever CPU runs a test (``NUMBA_CPU_FEATURES``:
#: ``NUMBA_CPU_NAME`` alone keeps the host's features)
AVX2_FEATURES = "+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+f16c,+fma,+fxsr,+lzcnt,+mmx,+movbe,+popcnt,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3"
KINDS = ["float32", "float16"] + (["bfloat16"] if importlib.util.find_spec("ml_dtypes") else [])
#: score tolerance per gallery dtype: every backend widens half-precision rows exactly and
#: multiplies in float32, so all dtypes get float32-level error (the numba bf16 tile product
#: for OCTOPUS weights on large half galleries has its own test and tolerance)
TOL = {"float32": 2e-5, "float16": 2e-5, "bfloat16": 2e-5}


def as_kind(x: np.ndarray, kind: str) -> np.ndarray:
    """A float32 matrix stored as ``kind`` (bfloat16 through ml_dtypes, round to nearest even)."""
    if kind == "bfloat16":
        import ml_dtypes

        return x.astype(ml_dtypes.bfloat16)
    return x.astype(kind)


def unit_rows(rng: np.random.Generator, *shape: int) -> np.ndarray:
    x = rng.standard_normal(shape)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def check_topk(got, ref_all, k: int, tol: float) -> None:
    """Assert ``got`` (scores, ids ``[Q, k]``) is the reference ranking.

    ``ref_all`` is the reference's ranking of every item (k >= N), so the true score of
    any returned id is known. Padding must match exactly; scores agree within ``tol``;
    ids agree exactly except inside near-ties (reference scores within ``tol`` of each
    other), where the returned item's true score must still fit its slot within ``tol``.
    """
    gs, gi = np.asarray(got[0]), np.asarray(got[1])
    rs, ri = np.asarray(ref_all[0])[:, :k], np.asarray(ref_all[1])[:, :k]
    assert gs.shape == gi.shape == rs.shape, (gs.shape, rs.shape)
    assert gs.dtype == np.float32 and gi.dtype == np.int32
    np.testing.assert_array_equal(gi == -1, ri == -1, err_msg="padding slots differ")
    np.testing.assert_array_equal(np.isneginf(gs), np.isneginf(rs), err_msg="padding scores differ")
    fin = np.isfinite(rs)
    if fin.any():
        np.testing.assert_allclose(gs[fin], rs[fin], rtol=0, atol=tol)
    full_s, full_i = np.asarray(ref_all[0]), np.asarray(ref_all[1])
    for q in range(gi.shape[0]):
        row = gi[q][gi[q] >= 0]
        assert len(set(row.tolist())) == len(row), f"query {q}: repeated ids {row}"
        true = dict(zip(full_i[q].tolist(), full_s[q].tolist()))
        for j in np.flatnonzero(gi[q] != ri[q]):
            assert gi[q, j] in true, f"query {q} slot {j}: id {gi[q, j]} is not rankable (excluded?)"
            assert abs(true[gi[q, j]] - rs[q, j]) <= tol, (
                f"query {q} slot {j}: got id {gi[q, j]} (true score {true[gi[q, j]]}), "
                f"reference id {ri[q, j]} (score {rs[q, j]}): not a near-tie"
            )


def check_exact(got, ref) -> None:
    """Identical ids and scores equal to float32 rounding (exact-arithmetic inputs)."""
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(ref[1]))
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(ref[0]), rtol=1e-6, atol=0)
