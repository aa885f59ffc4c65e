"""List ops (rrf, fuse_scores, xr_rerank, promote_first_accepted, uncertainty): every backend
against the reference on seeded inputs with padding, repeated ids and ties."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_checks import check_exact

from agentcir import kernels as K


@pytest.fixture(autouse=True, params=["serial", "parallel"])
def numba_variant(request, backend, monkeypatch):
    """numba list kernels run serial below PARALLEL_MIN_WORK input elements: test both variants."""
    if backend != "numba":
        if request.param == "parallel":
            pytest.skip("only numba has serial and parallel variants")
        return
    from agentcir.kernels.numba import _common

    monkeypatch.setattr(_common, "PARALLEL_MIN_WORK", 0 if request.param == "parallel" else 10**12)


def rank_lists(rng, V=3, Q=6, L=20, n_items=50):
    ids = np.stack([np.stack([rng.permutation(n_items)[:L] for _ in range(Q)]) for _ in range(V)])
    ids[0, 0, 15:] = -1  # a short list
    ids[1, 2, 3] = ids[1, 2, 1]  # an id repeated in a list (its first position counts)
    ids[2, 4] = -1  # an empty list
    return ids


@pytest.mark.parametrize("k", [1, 12, 80])
def test_rrf_lists(backend, k):
    ids = rank_lists(np.random.default_rng(0))
    for w in (None, [1.0, 0.5, 2.0]):
        check_exact(K.rrf(ids, k, weights=w, backend=backend), K.rrf(ids, k, weights=w, backend="reference"))


def test_rrf_score_matrices_with_ties(backend):
    rng = np.random.default_rng(1)
    S = rng.standard_normal((3, 6, 40)).astype(np.float32)
    S[:, :, 5] = S[:, :, 6]  # tied scores: lower id ranks first
    S[1] = np.round(S[1])  # many ties
    check_exact(K.rrf(S, 12, z=10, backend=backend), K.rrf(S, 12, z=10, backend="reference"))
    check_exact(K.rrf(S[0], 50, backend=backend), K.rrf(S[0], 50, backend="reference"))  # V = 1, k > N


@pytest.mark.parametrize("norm", ["minmax", "zscore", "none"])
def test_fuse_scores(backend, norm):
    rng = np.random.default_rng(2)
    S = np.round(rng.standard_normal((3, 6, 40)), 1).astype(np.float32)  # rounded: ties
    S[2, 3] = 1.5  # a constant row
    w = [1.0, 0.5, 2.0]
    check_exact(
        K.fuse_scores(S, 12, weights=w, norm=norm, backend=backend),
        K.fuse_scores(S, 12, weights=w, norm=norm, backend="reference"),
    )
    ids = rank_lists(rng, n_items=30)
    sc = np.round(rng.standard_normal(ids.shape), 1).astype(np.float32)
    check_exact(
        K.fuse_scores(sc, 25, ids=ids, weights=w, norm=norm, backend=backend),
        K.fuse_scores(sc, 25, ids=ids, weights=w, norm=norm, backend="reference"),
    )


def ranking(rng, Q=6, L=30):
    ids = np.stack([rng.permutation(100)[:L] for _ in range(Q)])
    ids[2, 20:] = -1
    ids[4, 3:] = -1
    sims = -np.sort(-rng.random((Q, L)), axis=1).astype(np.float32)
    return ids, sims


def test_xr_rerank(backend):
    rng = np.random.default_rng(3)
    ids, sims = ranking(rng)
    for H in (1, 10, 30):
        qa = rng.integers(0, 4, (6, H)) / 3  # fractions of 3 questions: many ties
        cap = rng.integers(0, 4, (6, H)) / 3
        for w in (0.5, 0.8):
            check_exact(
                K.xr_rerank(ids, sims, qa, cap, qa_weight=w, backend=backend),
                K.xr_rerank(ids, sims, qa, cap, qa_weight=w, backend="reference"),
            )


def test_promote_first_accepted(backend):
    rng = np.random.default_rng(4)
    ids, sims = ranking(rng)
    for A in (1, 8, 30):
        acc = rng.random((6, A)) < 0.25
        check_exact(
            K.promote_first_accepted(ids, sims, acc, bonus=100, backend=backend),
            K.promote_first_accepted(ids, sims, acc, bonus=100, backend="reference"),
        )


def test_uncertainty(backend):
    rng = np.random.default_rng(5)
    S = rng.standard_normal((8, 30)).astype(np.float32)
    S[1, 5:] = -np.inf
    S[2, 1:] = -np.inf
    S[3, :2] = 0.0
    for tau in (0.02, 1.0):
        np.testing.assert_allclose(
            K.uncertainty(S, tau=tau, backend=backend), K.uncertainty(S, tau=tau, backend="reference"), atol=1e-5
        )
    H = rng.random(8)
    np.testing.assert_allclose(
        K.uncertainty(S, entropy=H, backend=backend), K.uncertainty(S, entropy=H, backend="reference"), atol=1e-6
    )
