"""Bad inputs get a KernelInputError naming the argument and the problem."""

from __future__ import annotations

import numpy as np
import pytest

from agentcir import kernels as K
from agentcir.framework.errors import InputError

G = np.eye(4, 3, dtype=np.float32)
Q = np.ones((2, 3), dtype=np.float32)
P = np.ones((2, 2, 3), dtype=np.float32)


def fails(match, fn, *args, **kw):
    with pytest.raises(K.KernelInputError, match=match) as e:
        fn(*args, backend="reference", **kw)
    assert isinstance(e.value, InputError) and "\n" not in str(e.value)


def test_gallery_and_queries():
    fails(r"gallery: expected a 2-d \[N, d\] matrix, got shape \(4,\)", K.cosine_topk, Q, np.ones(4), 1)
    fails(
        "gallery: dtype float64 is not supported; use one of float32, float16, bfloat16",
        K.cosine_topk,
        Q,
        G.astype(np.float64),
        1,
    )
    fails("gallery: dtype int64 is not supported", K.cosine_topk, Q, np.ones((4, 3), dtype=np.int64), 1)
    fails(r"queries: last dimension is 5, expected 3 \(the gallery's\)", K.cosine_topk, np.ones((2, 5)), G, 1)
    fails(r"queries: expected 2 dimensions, got shape \(3,\)", K.cosine_topk, np.ones(3), G, 1)
    fails("queries: contains NaN or infinite values", K.cosine_topk, np.array([[np.nan, 0, 0]]), G, 1)
    fails("queries: expected a numeric array, got dtype <U1", K.cosine_topk, np.array([["a", "b", "c"]]), G, 1)
    fails("gallery: an array is required, got None", K.cosine_topk, Q, None, 1)


def test_k_and_exclude():
    fails("k: must be a positive integer, got 0", K.cosine_topk, Q, G, 0)
    fails("k: must be a positive integer, got '3'", K.cosine_topk, Q, G, "3")
    fails("k: must be a positive integer, got True", K.cosine_topk, Q, G, True)
    fails("exclude: id 4 is out of range for 4 gallery items", K.cosine_topk, Q, G, 1, exclude=[4, 0])
    fails(r"exclude: ids must be >= 0 \(or -1 for padding\), found -2", K.cosine_topk, Q, G, 1, exclude=[-2, 0])
    fails(
        r"exclude: expected shape \[Q\] or \[Q, m\] with Q = 2, got \(3,\)", K.cosine_topk, Q, G, 1, exclude=[0, 1, 2]
    )
    fails("exclude: expected integer ids, got dtype float64", K.cosine_topk, Q, G, 1, exclude=[0.5, 1.0])
    fails(
        "exclude_score: must be a finite number, got inf",
        K.cosine_topk,
        Q,
        G,
        1,
        exclude=[0, 1],
        exclude_score=float("inf"),
    )


def test_proxy_and_octopus_arguments():
    fails("agg: must be one of mean, max, logsumexp, octopus, got 'sum'", K.proxy_scores_topk, P, G, 1, agg="sum")
    fails(
        r"reference: agg='octopus' needs the reference embeddings \[Q, d\]", K.proxy_scores_topk, P, G, 1, agg="octopus"
    )
    fails("reference: only used by agg='octopus', got agg='mean'", K.proxy_scores_topk, P, G, 1, reference=Q)
    fails(r"proxies: needs at least one proxy per query \(K >= 1\)", K.proxy_scores_topk, P[:, :0], G, 1)
    fails("tau: must be a finite number > 0, got 0", K.proxy_scores_topk, P, G, 1, tau=0)
    fails(r"reference: first dimension is 1, expected 2 \(one row per query\)", K.octopus_weights, Q[:1], P, G)
    fails(r"visual/captions: give both \(bidirectional fusion\) or neither", K.octopus_topk, Q, P, Q, G, 1, visual=Q)
    fails(
        r"captions: has 3 rows, expected 4 \(one per gallery item\)",
        K.octopus_topk,
        Q,
        P,
        Q,
        G,
        1,
        visual=Q,
        captions=G[:3],
    )
    fails(r"lam: must be a finite number in \[0.0, 1.0\], got 1.5", K.octopus_topk, Q, P, Q, G, 1, lam=1.5)
    fails("images: dtype float64 is not supported", K.octopus_topk, Q, P, Q, G.astype(np.float64), 1)


def test_fusion_and_rerank_arguments():
    fails(r"rankings: expected \[V, Q, L\] \(a \[Q, L\] input counts as V = 1\), got shape \(3,\)", K.rrf, [1, 2, 3], 1)
    fails("rankings: expected integer id lists or float score matrices, got dtype <U1", K.rrf, [["a"]], 1)
    fails("weights: expected 2 finite numbers", K.rrf, np.zeros((2, 1, 3), dtype=int), 1, weights=[1.0])
    fails("z: must be a finite number", K.rrf, np.zeros((1, 1, 3), dtype=int), 1, z=float("nan"))
    fails("scores: expected float scores, got integer dtype int64", K.fuse_scores, np.zeros((1, 2, 3), dtype=int), 1)
    fails(
        r"ids: expected shape \(1, 2, 3\), got \(1, 2, 2\)",
        K.fuse_scores,
        np.zeros((1, 2, 3)),
        1,
        ids=np.zeros((1, 2, 2), dtype=int),
    )
    fails("norm: must be one of minmax, zscore, none, got 'l2'", K.fuse_scores, np.zeros((1, 2, 3)), 1, norm="l2")
    ids = np.array([[1, 2, 3]])
    fails(
        r"ids: -1 padding must come after every valid id of a row",
        K.xr_rerank,
        [[1, -1, 3]],
        [[0.3, 0.2, 0.1]],
        [[1]],
        [[1]],
    )
    fails(r"sims: expected shape \(1, 3\) \(same as ids\), got \(1, 2\)", K.xr_rerank, ids, [[0.3, 0.2]], [[1]], [[1]])
    fails(r"qa/cap: expected equal shapes \[Q, H\] with H <= 3", K.xr_rerank, ids, [[0.3, 0.2, 0.1]], [[1, 1]], [[1]])
    fails(
        r"accepted: expected shape \[1, A\] with A <= 3, got \(1, 4\)",
        K.promote_first_accepted,
        ids,
        [[0.3, 0.2, 0.1]],
        [[True] * 4],
    )
    fails(
        r"accepted: expected booleans \(or 0/1\), got dtype float64",
        K.promote_first_accepted,
        ids,
        [[0.3, 0.2, 0.1]],
        [[0.5]],
    )
    fails(r"scores: contains NaN or \+inf \(only -inf padding is allowed\)", K.uncertainty, [[np.nan, 1.0]])
    fails(r"entropy: first dimension is 1, expected 2", K.uncertainty, [[1.0, 0.5], [1.0, 0.2]], entropy=[0.1])
