"""ldre_weights (LDRE's adaptive ensemble): a hand-computed case, every backend against the
numpy reference on odd shapes and dtypes, the all-zero row, bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_checks import BACKENDS, as_kind, unit_rows

from agentcir import kernels as K
from agentcir.kernels import KernelInputError

ALL = ["reference", *BACKENDS]


@pytest.fixture(params=ALL)
def any_backend(request) -> str:
    return request.param


def test_hand_computed(any_backend):
    # gallery: the 3 axes; b = x; e_0 = x (no drop), e_1 = y (drop 1 on item x, gain on y), e_2 = -x
    I = np.eye(3, dtype=np.float32)
    b = np.array([[1, 0, 0]], np.float32)
    P = np.array([[[1, 0, 0], [0, 1, 0], [-1, 0, 0]]], np.float32)
    # drops relu(b.I_j - e_i.I_j): e_0 [0,0,0]; e_1 [1,0,0] (item y: 0 - 1 < 0); e_2 [2,0,0]
    for topk, s in ((1, [0.0, 1.0, 2.0]), (2, [0.0, 1.0, 2.0])):
        x = np.array(s) / max(s) / 0.5
        w = np.exp(x) / np.exp(x).sum()
        got = K.ldre_weights(b, P, I, topk=topk, tau=0.5, backend=any_backend)
        np.testing.assert_allclose(np.asarray(got)[0], w, atol=1e-6)
    np.testing.assert_allclose(
        w,
        [1 / (1 + math.e + math.e**2), math.e / (1 + math.e + math.e**2), math.e**2 / (1 + math.e + math.e**2)],
        atol=1e-7,
    )


def test_topk_sums_only_the_largest_drops(any_backend):
    # 4 items; caption 0 drops [0.5, 0.4, 0.3, 0.2] below b, caption 1 drops [0.6, 0, 0, 0]
    I = np.eye(4, dtype=np.float32)
    b = np.array([[0.6, 0.4, 0.3, 0.2]], np.float32)
    P = np.array([[[0.1, 0.0, 0.0, 0.0], [0.0, 0.4, 0.3, 0.2]]], np.float32)
    for topk, s in ((1, [0.5, 0.6]), (2, [0.9, 0.6]), (9, [1.4, 0.6])):
        x = np.array(s) / max(s) / 0.04
        w = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
        got = np.asarray(K.ldre_weights(b, P, I, topk=topk, tau=0.04, backend=any_backend))
        np.testing.assert_allclose(got[0], w, atol=1e-5)


def test_no_drop_gives_uniform_weights(any_backend):
    I = np.eye(2, dtype=np.float32)
    b = np.zeros((1, 2), np.float32)
    P = np.array([[[1, 0], [0, 1], [0.6, 0.8]]], np.float32)  # every caption only gains over b
    got = np.asarray(K.ldre_weights(b, P, I, backend=any_backend))
    np.testing.assert_allclose(got, np.full((1, 3), 1 / 3), atol=1e-7)


@pytest.mark.parametrize("kind", ["float32", "float16"])
def test_backends_match_reference(kind):
    rng = np.random.default_rng(7)
    for Q, N, d, K_, m in [(1, 1, 3, 1, 5), (3, 300, 37, 4, 5), (5, 129, 9, 15, 50), (2, 77, 8, 3, 200)]:
        G = as_kind(unit_rows(rng, N, d), kind)
        P = unit_rows(rng, Q, K_, d)
        b = unit_rows(rng, Q, d)
        ref = K.ldre_weights(b, P, G, topk=m, tau=0.04, backend="reference")
        assert ref.shape == (Q, K_) and ref.dtype == np.float32
        for be in BACKENDS:
            got = np.asarray(K.ldre_weights(b, P, G, topk=m, tau=0.04, backend=be))
            assert got.shape == (Q, K_) and got.dtype == np.float32
            np.testing.assert_allclose(got, ref, atol=1e-5, err_msg=f"{be} {kind} Q={Q} N={N} m={m}")
            np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-5)


def test_top_drops_merge_over_parts_of_the_gallery(any_backend):
    """ldre_top_drops: the hand-computed drops, descending; the top m of two halves' top m is the
    whole gallery's top m (how a sharded gallery merges them)."""
    I = np.eye(4, dtype=np.float32)
    b = np.array([[0.6, 0.4, 0.3, 0.2]], np.float32)
    P = np.array([[[0.1, 0.0, 0.0, 0.0], [0.0, 0.4, 0.3, 0.2]]], np.float32)
    got = np.asarray(K.ldre_top_drops(b, P, I, topk=3, backend=any_backend))
    np.testing.assert_allclose(got, [[[0.5, 0.4, 0.3], [0.6, 0.0, 0.0]]], atol=1e-6)
    rng = np.random.default_rng(8)
    G, P2, b2 = unit_rows(rng, 300, 16), unit_rows(rng, 3, 4, 16), unit_rows(rng, 3, 16)
    whole = np.asarray(K.ldre_top_drops(b2, P2, G, topk=7, backend=any_backend))
    parts = np.concatenate(
        [np.asarray(K.ldre_top_drops(b2, P2, G[a:z], topk=7, backend=any_backend)) for a, z in ((0, 120), (120, 300))],
        axis=-1,
    )
    np.testing.assert_allclose(-np.sort(-parts, axis=-1)[..., :7], whole, atol=1e-6)
    assert np.all(np.diff(whole, axis=-1) <= 0) and whole.dtype == np.float32


def test_bad_inputs():
    G = unit_rows(np.random.default_rng(0), 10, 4)
    b, P = G[:2], np.stack([G[:3], G[3:6]])
    with pytest.raises(KernelInputError, match="topk: must be a positive integer, got 0"):
        K.ldre_weights(b, P, G, topk=0)
    with pytest.raises(KernelInputError, match="tau: must be a finite number > 0"):
        K.ldre_weights(b, P, G, tau=0)
    with pytest.raises(KernelInputError, match="proxies: needs at least one caption per query"):
        K.ldre_weights(b, P[:, :0], G)
    with pytest.raises(KernelInputError, match="before"):
        K.ldre_weights(b[:1], P, G)
    with pytest.raises(KernelInputError, match="proxies"):
        K.ldre_weights(b, P[..., :3], G)
