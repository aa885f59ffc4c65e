"""Every fusion rule on a tiny hand-computed case: the expected numbers are derived here from
the formulas of docs/design/methods.md, and every backend (the reference included) must produce them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_checks import BACKENDS

from agentcir import kernels as K

ALL = ["reference", *BACKENDS]


@pytest.fixture(params=ALL)
def any_backend(request) -> str:
    return request.param


def f32(x):
    return np.asarray(x, dtype=np.float32)


def test_cosine_topk_ties_and_exclusion(any_backend):
    G = f32([[1, 0], [0, 1], [1, 0], [0.5, 0.5], [1, 0]])
    q = f32([[1, 0]])  # scores 1, 0, 1, 0.5, 1
    s, i = K.cosine_topk(q, G, 3, backend=any_backend)
    assert i.tolist() == [[0, 2, 4]] and s.tolist() == [[1, 1, 1]]  # ties: lower id first
    s, i = K.cosine_topk(q, G, 3, exclude=[2], backend=any_backend)
    assert i.tolist() == [[0, 4, 3]] and s.tolist() == [[1, 1, 0.5]]  # removed
    s, i = K.cosine_topk(q, G, 5, exclude=[[2, -1]], exclude_score=-10, backend=any_backend)
    assert i.tolist() == [[0, 4, 3, 1, 2]] and s.tolist() == [[1, 1, 0.5, 0, -10]]  # masked to -10
    s, i = K.cosine_topk(q, G, 7, exclude=[2], backend=any_backend)  # k > N: padding
    assert i.tolist() == [[0, 4, 3, 1, -1, -1, -1]] and np.isneginf(s[0, 4:]).all()


def test_proxy_aggregations(any_backend):
    P = f32([[[1, 0], [0, 1]]])  # K = 2 proxies
    G = f32([[1, 0], [0, 1], [0.6, 0.8]])  # S = [[1, 0, 0.6], [0, 1, 0.8]]
    s, i = K.proxy_scores_topk(P, G, 3, agg="mean", backend=any_backend)
    assert i.tolist() == [[2, 0, 1]]  # mean 0.7, then the 0.5 tie by lower id
    np.testing.assert_allclose(s[0], [0.7, 0.5, 0.5], atol=1e-6)
    s, i = K.proxy_scores_topk(P, G, 3, agg="max", backend=any_backend)
    assert i.tolist() == [[0, 1, 2]]
    np.testing.assert_allclose(s[0], [1, 1, 0.8], atol=1e-6)
    s, i = K.proxy_scores_topk(P, G, 3, agg="logsumexp", tau=0.5, backend=any_backend)
    lse = lambda a, b: 0.5 * math.log(math.exp(a / 0.5) + math.exp(b / 0.5))  # noqa: E731
    # lse(1, 0) = 0.5 log(e^2 + 1) = 1.0635 (items 0 and 1, a tie) > lse(0.6, 0.8) = 0.5 log(e^1.2 + e^1.6) = 1.0565
    assert lse(1, 0) > lse(0.6, 0.8)
    assert i.tolist() == [[0, 1, 2]]
    np.testing.assert_allclose(s[0], [lse(1, 0), lse(0, 1), lse(0.6, 0.8)], atol=1e-6)


def _weights_case():
    """N = 2, K = 2: S_r = [1, 0], S_E = [[1, 0], [0, 1]] -> gaps relu([0, 0]) and relu([1, -1])."""
    I = f32([[1, 0], [0, 1]])
    ref = f32([[1, 0]])
    P = f32([[[1, 0], [0, 1]]])
    s = np.array([0.0, 0.5])  # mean over the two gallery items
    tau = 0.5
    w = np.exp(s / tau) / np.exp(s / tau).sum()  # [1/(1+e), e/(1+e)]
    return I, ref, P, tau, w


def test_octopus_weights(any_backend):
    I, ref, P, tau, w = _weights_case()
    np.testing.assert_allclose(w, [1 / (1 + math.e), math.e / (1 + math.e)])
    got = K.octopus_weights(ref, P, I, tau=tau, backend=any_backend)
    np.testing.assert_allclose(got[0], w, atol=1e-6)
    s, i = K.proxy_scores_topk(P, I, 2, agg="octopus", reference=ref, tau=tau, backend=any_backend)
    e = w / np.linalg.norm(w)  # e = norm(w0 * [1, 0] + w1 * [0, 1]); scores e . I = e
    assert i.tolist() == [[1, 0]]
    np.testing.assert_allclose(s[0], [e[1], e[0]], atol=1e-6)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_octopus_fusion_formula(any_backend, bidirectional):
    I, ref, P, tau, w = _weights_case()
    e = w / np.linalg.norm(w)
    q_t = np.array([0.0, 1.0])
    t = (e + q_t) / 2  # not renormalised
    s_t2v = t  # I is the identity
    lam = 0.2
    if bidirectional:
        C = f32([[0, 1], [1, 0]])
        q_v = f32([[1, 0]])
        s_v2t = np.array([0.0, 1.0])  # q_v . C^T
        S = lam * s_t2v + (1 - lam) * (s_v2t * s_t2v)
    else:
        C = q_v = None
        S = s_t2v
    S_masked = np.array([-10.0, S[1]])  # the reference item (id 0) is masked to -10
    x = S_masked / 0.02
    p = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    H = -(p * np.log(p)).sum()
    out = K.octopus_topk(
        ref, P, f32([q_t]), I, 2, visual=q_v, captions=C, lam=lam, tau=tau, exclude=[0], backend=any_backend
    )
    assert out.ids.tolist() == [[1, 0]]
    np.testing.assert_allclose(out.scores[0], S_masked[::-1], atol=1e-6)
    np.testing.assert_allclose(out.weights[0], w, atol=1e-6)
    np.testing.assert_allclose(out.entropy[0], H, atol=1e-5)


def test_octopus_visual_query():
    gen, ref = f32([[0.5, 0.1]]), f32([[0.2, 0.4]])
    scale = 0.5 / (0.4 + 1e-8)  # max_d f_gen / (max_d f_ref + 1e-8)
    q = np.array([0.5 + scale * 0.2, 0.1 + scale * 0.4])
    np.testing.assert_allclose(K.octopus_visual_query(gen, ref)[0], q / np.linalg.norm(q), atol=1e-6)


def test_rrf_lists(any_backend):
    lists = np.array([[[3, 1, 2]], [[1, 5, -1]]])  # V = 2 lists for one query
    s, i = K.rrf(lists, 5, z=60, backend=any_backend)
    assert i.tolist() == [[1, 3, 5, 2, -1]]
    np.testing.assert_allclose(s[0, :4], [1 / 62 + 1 / 61, 1 / 61, 1 / 62, 1 / 63], rtol=1e-6)
    s, i = K.rrf(np.array([[[2, 1]], [[1, 2]]]), 2, backend=any_backend)  # exact tie -> first appearance
    assert i.tolist() == [[2, 1]] and s[0, 0] == s[0, 1]
    s, i = K.rrf(np.array([[[4, 4, 7]]]), 3, backend=any_backend)  # repeated id: first position
    assert i.tolist() == [[4, 7, -1]]
    np.testing.assert_allclose(s[0, :2], [1 / 61, 1 / 63], rtol=1e-6)
    s, i = K.rrf(lists, 2, weights=[2.0, 1.0], z=1, backend=any_backend)  # weighted, z = 1
    np.testing.assert_allclose(s[0], [2 / 3 + 1 / 2, 2 / 2], rtol=1e-6)  # item 1: 2/(1+2) + 1/(1+1); item 3: 2/(1+1)
    assert i.tolist() == [[1, 3]]


def _released_rrf(lists, z):
    """XR's fusion restated: scores summed into a dict filled list by list, then a stable sort
    by score, descending (so tied items keep the order in which they first appeared)."""
    score = {}
    for names in lists:
        for r, name in enumerate(names, start=1):
            score[name] = score.get(name, 0.0) + 1.0 / (z + r)
    return sorted(score, key=lambda n: score[n], reverse=True)


def test_rrf_ties_match_the_released_fusion_order(any_backend):
    rng = np.random.default_rng(0)
    for trial in range(40):
        V, L, N = rng.integers(2, 4), rng.integers(3, 12), 15
        lists = np.stack([rng.permutation(N)[:L] for _ in range(V)])[:, None, :]  # many exact ties
        expect = _released_rrf([list(x) for x in lists[:, 0]], 60)
        _, i = K.rrf(lists, len(expect), z=60, backend=any_backend)
        assert i[0].tolist() == expect, trial
    S = f32([[[0.1, 0.5, 0.9]], [[0.9, 0.5, 0.1]]])  # items 0 and 2 tie; list 0 ranks 2 first
    _, i = K.rrf(S, 3, backend=any_backend)
    assert i.tolist() == [[2, 0, 1]]


def test_rrf_score_matrices(any_backend):
    S = f32([[[0.1, 0.9, 0.5]], [[0.8, 0.8, 0.1]]])  # ranks [3, 1, 2] and [1, 2, 3] (tie: lower id first)
    s, i = K.rrf(S, 3, backend=any_backend)
    expect = {0: 1 / 63 + 1 / 61, 1: 1 / 61 + 1 / 62, 2: 1 / 62 + 1 / 63}
    assert i.tolist() == [[1, 0, 2]]
    np.testing.assert_allclose(s[0], [expect[1], expect[0], expect[2]], rtol=1e-6)


def test_fuse_scores_dense(any_backend):
    S = f32([[[0, 5, 10]], [[4, 4, 2]]])
    s, i = K.fuse_scores(S, 3, norm="minmax", backend=any_backend)  # [0, .5, 1] + [1, 1, 0]
    assert i.tolist() == [[1, 0, 2]]
    np.testing.assert_allclose(s[0], [1.5, 1, 1], atol=1e-6)
    s, i = K.fuse_scores(S, 3, norm="zscore", backend=any_backend)
    za = np.array([-1, 0, 1]) * math.sqrt(3 / 2)  # (x - 5) / std, std = sqrt(50/3)
    mb, sb = 10 / 3, math.sqrt(((2 / 3) ** 2 * 2 + (4 / 3) ** 2) / 3)
    zb = (np.array([4, 4, 2]) - mb) / sb
    fused = za + zb
    assert i.tolist() == [list(np.argsort(-fused, kind="stable"))]
    np.testing.assert_allclose(s[0], np.sort(fused)[::-1], atol=1e-5)
    s, i = K.fuse_scores(S, 3, weights=[1, 0.5], norm="none", backend=any_backend)
    np.testing.assert_allclose(s[0], [11, 7, 2], atol=1e-6)  # [0+2, 5+2, 10+1]
    assert i.tolist() == [[2, 1, 0]]
    s, _ = K.fuse_scores(f32([[[3, 3]]]), 2, norm="minmax", backend=any_backend)
    assert s.tolist() == [[1, 1]]  # constant list -> ones
    s, _ = K.fuse_scores(f32([[[3, 3]]]), 2, norm="zscore", backend=any_backend)
    assert s.tolist() == [[0, 0]]  # constant list -> zeros


def test_fuse_scores_lists(any_backend):
    ids = np.array([[[3, 1]], [[1, 5]]])
    sc = f32([[[0.9, 0.5]], [[0.3, 0.2]]])  # min-max per list: [1, 0] and [1, 0]
    s, i = K.fuse_scores(sc, 4, ids=ids, backend=any_backend)
    assert i.tolist() == [[1, 3, 5, -1]]  # item 1: 0 + 1, item 3: 1 (tie -> lower id), item 5: 0
    np.testing.assert_allclose(s[0, :3], [1, 1, 0], atol=1e-6)


def test_xr_rerank(any_backend):
    ids = np.array([[5, 6, 7, 8, 9], [4, -1, -1, -1, -1]])
    sims = f32([[0.9, 0.8, 0.7, 0.6, 0.5], [0.3, 0, 0, 0, 0]])
    qa = f32([[0, 1, 1], [1, 0, 0]])
    cap = f32([[0, 1, 0], [0, 0, 0]])
    s, i = K.xr_rerank(ids, sims, qa, cap, backend=any_backend)
    # head sims [0.9, 0.8, 0.7] -> min-max [1, 0.5, 0]; (qa + cap) / 2 = [0, 1, 0.5] -> [0, 0.5, 0]
    assert i[0].tolist() == [6, 5, 7, 8, 9]  # 5 and 7 tie at 0: stage-1 order kept; tail unchanged
    np.testing.assert_allclose(s[0], [0.5, 0, 0, 0.6, 0.5], atol=1e-6)
    assert i[1].tolist() == [4, -1, -1, -1, -1]  # one candidate: min-max of a constant head -> 0 (as released)
    np.testing.assert_allclose(s[1, 0], 0.0)
    assert np.isneginf(s[1, 1:]).all()


def test_xr_rerank_constant_head_scores_zero_and_keeps_its_order_as_released(any_backend):
    # XR/xr.py _take_head: hi == lo -> head sims all 0, so every head score is 0: the QA
    # answers cannot reorder a head whose stage-1 similarities are all equal
    ids = np.array([[3, 1, 2, 0]])
    sims = f32([[0.4, 0.4, 0.4, 0.1]])
    qa, cap = f32([[0, 1, 1]]), f32([[0, 1, 0]])
    s, i = K.xr_rerank(ids, sims, qa, cap, backend=any_backend)
    assert i[0].tolist() == [3, 1, 2, 0]
    np.testing.assert_allclose(s[0], [0, 0, 0, 0.1], atol=1e-7)


def test_promote_first_accepted(any_backend):
    ids = np.array([[5, 6, 7, 8], [1, 2, -1, -1], [3, 4, 9, 10]])
    sc = f32([[0.9, 0.8, 0.7, 0.6], [0.5, 0.4, 0, 0], [0.3, 0.2, 0.1, 0.0]])
    acc = np.array([[False, False, True], [False, False, True], [False, False, False]])
    s, i = K.promote_first_accepted(ids, sc, acc, backend=any_backend)
    assert i.tolist() == [[7, 5, 6, 8], [1, 2, -1, -1], [3, 4, 9, 10]]  # padding is never accepted
    np.testing.assert_allclose(s[0], [100.9, 0.9, 0.8, 0.6], atol=1e-5)
    np.testing.assert_allclose(s[2], sc[2])


def test_uncertainty_gate(any_backend):
    S = f32([[2, 1], [1, 1], [3, 0]])
    ent = lambda row: -sum(p * math.log(p) for p in np.exp(row) / np.exp(row).sum())  # noqa: E731  (tau = 1)
    H = np.array([ent(np.array(r, dtype=float)) for r in S])  # H[1] = log 2 is the largest
    ratio = np.array([0.5, 1.0, 0.0])  # top2 / top1
    mm = lambda x: (x - x.min()) / (x.max() - x.min() + 1e-8)  # noqa: E731  (the released min-max)
    u = K.uncertainty(S, tau=1.0, backend=any_backend)
    np.testing.assert_allclose(u, 0.5 * mm(H) + 0.5 * mm(ratio), atol=1e-6)
    u = K.uncertainty(S, tau=1.0, entropy=[0.0, 2.0, 1.0], backend=any_backend)
    np.testing.assert_allclose(u, 0.5 * np.array([0, 1, 0.5]) + 0.5 * mm(ratio), atol=1e-6)


def test_uncertainty_gate_clips_the_margin_and_zeroes_constant_columns_as_released(any_backend):
    # OCTOPUS src/compute_results.py compute_uncertainty: margin = clamp(top2 / (top1 + 1e-8), 0, 1),
    # each column normalised by (x - min) / (max - min + 1e-8)
    S = f32([[0.0, -1.0], [-0.5, -0.2], [0.9, 0.3], [5, -np.inf]])
    # row 0: -1 / 1e-8 -> clipped to 0; row 1: top1 = -0.2, top2 = -0.5 -> 2.5 -> clipped to 1;
    # row 2: 1/3; row 3: one candidate -> 0
    margin = np.array([0.0, 1.0, 0.3 / (0.9 + 1e-8), 0.0])
    H = np.array([0.3, 0.1, 0.7, 0.2])
    mm = lambda x: (x - x.min()) / (x.max() - x.min() + 1e-8)  # noqa: E731
    u = K.uncertainty(S, tau=1.0, entropy=H, backend=any_backend)
    np.testing.assert_allclose(u, 0.5 * mm(H) + 0.5 * mm(margin), atol=1e-6)
    # constant columns contribute zeros, not ones
    u = K.uncertainty(f32([[0.9, 0.3], [0.9, 0.3]]), tau=1.0, entropy=[1.0, 1.0], backend=any_backend)
    np.testing.assert_allclose(u, [0.0, 0.0], atol=1e-7)
