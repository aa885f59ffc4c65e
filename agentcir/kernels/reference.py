"""The numpy reference of every scoring-core op: the specification the other backends are tested against.

Plain, readable numpy in float64 (half-precision galleries are widened exactly), free
to materialise ``[Q, N]`` and ``[Q, K, N]``. Inputs arrive checked and converted by
:mod:`agentcir.kernels.api` (queries float32, galleries as :class:`~._inputs.Gallery`
with float32 data or the uint16 bits of a half type, ids int32 with ``-1`` padding).

Shared rules (README.md "Conventions"):

* ranking: score descending, ties broken by the lower id (rrf: by first appearance, as
  XR's code); padding slots are ``(-inf, -1)`` when fewer than ``k`` items are left;
* ``exclude``: per-query ids removed from the ranking (``exclude_score=None``) or given
  the score ``exclude_score`` (OCTOPUS masks the reference item to -10);
* ``minmax(x) = (x - min) / (max - min)``; a constant vector min-max normalises to ones;
  ``zscore(x) = (x - mean) / std`` (population std); a constant vector z-scores to zeros.
"""

from __future__ import annotations

import numpy as np

from ._inputs import Gallery, gallery_float64

NATIVE = "numpy"


# -- shared helpers -------------------------------------------------------------------
def _gal(g: Gallery) -> np.ndarray:
    return gallery_float64(g)


def _normalize(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def minmax(x: np.ndarray, axis: int = -1, constant: float = 1.0) -> np.ndarray:
    """Min-max normalise along ``axis``; constant slices become ``constant`` (ones)."""
    x = np.asarray(x, dtype=np.float64)
    lo = x.min(axis=axis, keepdims=True)
    span = x.max(axis=axis, keepdims=True) - lo
    return np.where(span > 0, (x - lo) / np.where(span > 0, span, 1.0), constant)


def zscore(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Z-score along ``axis`` (population std); constant slices become zeros."""
    x = np.asarray(x, dtype=np.float64)
    sd = x.std(axis=axis, keepdims=True)
    return np.where(sd > 0, (x - x.mean(axis=axis, keepdims=True)) / np.where(sd > 0, sd, 1.0), 0.0)


def _apply_exclude(S: np.ndarray, exclude: np.ndarray | None, exclude_score: float | None) -> np.ndarray:
    """A copy of ``S`` with excluded items set to ``exclude_score``, or NaN (= removed)."""
    S = np.array(S, dtype=np.float64)
    if exclude is not None:
        for q, row in enumerate(exclude):
            ids = row[row >= 0]
            S[q, ids] = np.nan if exclude_score is None else exclude_score
    return S


def topk_rows(S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` of each row of ``S`` (NaN = removed): score desc, then lower id; padded."""
    Q, N = S.shape
    scores = np.full((Q, k), -np.inf, dtype=np.float32)
    ids = np.full((Q, k), -1, dtype=np.int32)
    cols = np.arange(N)
    for q in range(Q):
        keep = ~np.isnan(S[q])
        s, c = S[q][keep], cols[keep]
        order = np.lexsort((c, -s))[:k]
        scores[q, : len(order)] = s[order]
        ids[q, : len(order)] = c[order]
    return scores, ids


def _log_partition_rows(S: np.ndarray, tau: float) -> np.ndarray:
    """``log sum exp(S / tau)`` over each row's non-NaN entries (``-inf`` for an empty row)."""
    out = np.full(S.shape[0], -np.inf, dtype=np.float64)
    for q, row in enumerate(S):
        x = row[~np.isnan(row)] / tau
        if x.size:
            out[q] = x.max() + np.log(np.exp(x - x.max()).sum())
    return out


def _entropy_rows(S: np.ndarray, tau: float) -> np.ndarray:
    """Entropy of ``softmax(S / tau)`` over each row's non-NaN entries."""
    out = np.zeros(S.shape[0], dtype=np.float64)
    for q, row in enumerate(S):
        x = row[~np.isnan(row)] / tau
        if x.size == 0:
            continue
        x = x - x.max()
        e = np.exp(x)
        z = e.sum()
        out[q] = np.log(z) - (e * x).sum() / z
    return out


# -- cosine_topk ----------------------------------------------------------------------
def cosine_topk(
    queries: np.ndarray, gallery: Gallery, k: int, exclude: np.ndarray | None, exclude_score: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k inner products ``queries @ gallery.T`` per query."""
    S = queries.astype(np.float64) @ _gal(gallery).T
    return topk_rows(_apply_exclude(S, exclude, exclude_score), k)


# -- proxy aggregation ----------------------------------------------------------------
def octopus_gap_sums(reference: np.ndarray, proxies: np.ndarray, gallery: Gallery) -> np.ndarray:
    """``sum_j relu(S_r[j] - S_E[i, j])`` per query and proxy, float64 ``[Q, K]``."""
    G = _gal(gallery)
    Sr = reference.astype(np.float64) @ G.T  # [Q, N]
    SE = np.einsum("qkd,nd->qkn", proxies.astype(np.float64), G)  # [Q, K, N]
    return np.maximum(Sr[:, None, :] - SE, 0.0).sum(axis=-1)  # [Q, K]


def octopus_weights(reference: np.ndarray, proxies: np.ndarray, gallery: Gallery, tau: float) -> np.ndarray:
    """OCTOPUS adaptive proxy weights ``softmax(s / tau)``, ``s_i = mean_j relu(S_r[j] - S_E[i, j])``."""
    s = octopus_gap_sums(reference, proxies, gallery) / gallery.shape[0]  # [Q, K]
    x = s / tau
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    return (x / x.sum(axis=-1, keepdims=True)).astype(np.float32)


def ldre_weights(before: np.ndarray, proxies: np.ndarray, gallery: Gallery, topk: int, tau: float) -> np.ndarray:
    """LDRE adaptive ensemble weights: ``s_i`` = sum of the ``topk`` largest ``relu(b.I_j - e_i.I_j)``,
    ``w = softmax(s / max_i s / tau)`` (a row whose largest ``s`` is 0 gets uniform weights)."""
    s = ldre_top_drops(before, proxies, gallery, topk).sum(axis=-1)  # [Q, K]
    mx = s.max(axis=-1, keepdims=True)
    x = np.where(mx > 0, s / np.where(mx > 0, mx, 1.0) / tau, 0.0)
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    return (x / x.sum(axis=-1, keepdims=True)).astype(np.float32)


def ldre_top_drops(before: np.ndarray, proxies: np.ndarray, gallery: Gallery, topk: int) -> np.ndarray:
    """The ``topk`` largest ``relu(b.I_j - e_i.I_j)`` per query and proxy, descending, float64 ``[Q, K, m]``."""
    G = _gal(gallery)
    Sb = before.astype(np.float64) @ G.T  # [Q, N]
    SE = np.einsum("qkd,nd->qkn", proxies.astype(np.float64), G)  # [Q, K, N]
    return np.sort(np.maximum(Sb[:, None, :] - SE, 0.0), axis=-1)[..., ::-1][..., :topk]


def _octopus_query(proxies: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``e = norm(sum_i w_i P_i)``."""
    return _normalize(np.einsum("qk,qkd->qd", weights.astype(np.float64), proxies.astype(np.float64)))


def proxy_scores_topk(
    proxies: np.ndarray,
    gallery: Gallery,
    k: int,
    agg: str,
    tau: float,
    reference: np.ndarray | None,
    exclude: np.ndarray | None,
    exclude_score: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Aggregate K proxy similarities per gallery item (mean / max / logsumexp / octopus), then top-k."""
    G = _gal(gallery)
    if agg == "octopus":
        w = octopus_weights(reference, proxies, gallery, tau)
        S = _octopus_query(proxies, w) @ G.T
    else:
        SE = np.einsum("qkd,nd->qkn", proxies.astype(np.float64), G)
        if agg == "mean":
            S = SE.mean(axis=1)
        elif agg == "max":
            S = SE.max(axis=1)
        else:  # logsumexp: tau * log(sum_i exp(S_i / tau))
            m = SE.max(axis=1)
            S = m + tau * np.log(np.exp((SE - m[:, None, :]) / tau).sum(axis=1))
    return topk_rows(_apply_exclude(S, exclude, exclude_score), k)


# -- OCTOPUS fusion ---------------------------------------------------------------------
def octopus_topk(
    reference: np.ndarray,
    proxies: np.ndarray,
    target: np.ndarray,
    visual: np.ndarray | None,
    images: Gallery,
    captions: Gallery | None,
    k: int,
    lam: float,
    tau: float,
    entropy_tau: float,
    exclude: np.ndarray | None,
    exclude_score: float | None,
):
    """``S = lam * S_t2v + (1 - lam) * (S_v2t * S_t2v)`` (docs/design/methods.md), masked, top-k, entropy."""
    w = octopus_weights(reference, proxies, images, tau)
    e = _octopus_query(proxies, w)
    t = (e + target.astype(np.float64)) / 2.0
    S = t @ _gal(images).T
    if visual is not None:
        Sv = visual.astype(np.float64) @ _gal(captions).T
        S = lam * S + (1.0 - lam) * (Sv * S)
    S = _apply_exclude(S, exclude, exclude_score)
    scores, ids = topk_rows(S, k)
    return (
        scores,
        ids,
        w,
        _entropy_rows(S, entropy_tau).astype(np.float32),
        _log_partition_rows(S, entropy_tau).astype(np.float32),
    )


# -- rank / score fusion -------------------------------------------------------------
def _first_occurrence(ids: np.ndarray) -> np.ndarray:
    """Mask of valid ids (>= 0) that are the first occurrence of their id in their row."""
    V, Q, L = ids.shape
    flat = ids.reshape(V * Q, L).astype(np.int64)
    valid = flat >= 0
    key = np.arange(V * Q, dtype=np.int64)[:, None] * (int(flat.max(initial=0)) + 1) + flat
    first = np.zeros(flat.size, dtype=bool)
    _, idx = np.unique(np.where(valid, key, -1).ravel(), return_index=True)
    first[idx] = True
    return (first.reshape(V * Q, L) & valid).reshape(V, Q, L)


def _sum_by_query_id(
    ids: np.ndarray, values: np.ndarray, keep: np.ndarray, Q: int, k: int, first_appearance: bool = False
):
    """Sum ``values`` per (query, id) over the kept entries of ``[V, Q, L]`` lists; top-k per
    query, ties by the lower id or (``first_appearance``) by the item's first appearance when
    the lists are read in order, list 0 first (its smallest ``v * L + position``)."""
    V, _, L = ids.shape
    q_of = np.broadcast_to(np.arange(Q)[None, :, None], ids.shape)[keep].astype(np.int64)
    i_of = ids[keep].astype(np.int64)
    v_of = values[keep]
    width = int(i_of.max(initial=0)) + 1
    uniq, inv = np.unique(q_of * width + i_of, return_inverse=True)
    total = np.bincount(inv.ravel(), weights=v_of, minlength=len(uniq))
    uq, ui = uniq // width, uniq % width
    tie = ui
    if first_appearance:
        where = (np.arange(V)[:, None, None] * L + np.arange(L)[None, None, :]) + np.zeros(ids.shape, dtype=np.int64)
        tie = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(tie, inv.ravel(), where[keep])
    order = np.lexsort((tie, -total, uq))
    uq, ui, total = uq[order], ui[order], total[order]
    starts = np.searchsorted(uq, np.arange(Q))
    pos = np.arange(len(uq)) - starts[uq]
    sel = pos < k
    scores = np.full((Q, k), -np.inf, dtype=np.float32)
    out = np.full((Q, k), -1, dtype=np.int32)
    scores[uq[sel], pos[sel]] = total[sel]
    out[uq[sel], pos[sel]] = ui[sel]
    return scores, out


def rrf_lists(ids: np.ndarray, k: int, z: float, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reciprocal rank fusion of ranked id lists ``[V, Q, L]``: ``sum_v w_v / (z + rank_v)``, ranks
    from 1; tied fused scores keep the items' first-appearance order (list 0 first, as XR's code)."""
    V, Q, L = ids.shape
    contrib = weights[:, None, None] / (z + np.arange(1, L + 1, dtype=np.float64))[None, None, :]
    return _sum_by_query_id(
        ids, np.broadcast_to(contrib, ids.shape), _first_occurrence(ids), Q, k, first_appearance=True
    )


def rrf_scores(scores: np.ndarray, k: int, z: float, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """RRF of dense score matrices ``[V, Q, N]``: each row ranks all N items (ties: lower id
    first); tied fused scores keep the order of list 0 (every item's first appearance)."""
    V, Q, N = scores.shape
    order = np.argsort(-scores.astype(np.float64), axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(1, N + 1)[None, None, :], axis=-1)
    fused = (weights[:, None, None] / (z + ranks)).sum(axis=0)
    s, pos = topk_rows(np.take_along_axis(fused, order[0], axis=-1), k)  # columns in list-0 order
    return s, np.where(pos >= 0, np.take_along_axis(order[0], np.maximum(pos, 0), axis=-1), -1).astype(np.int32)


def _norm(x: np.ndarray, norm: str, axis: int = -1) -> np.ndarray:
    if norm == "minmax":
        return minmax(x, axis)
    if norm == "zscore":
        return zscore(x, axis)
    return np.asarray(x, dtype=np.float64)


def fuse_dense(scores: np.ndarray, k: int, weights: np.ndarray, norm: str) -> tuple[np.ndarray, np.ndarray]:
    """Weighted sum of per-row normalised score matrices ``[V, Q, N]``, then top-k."""
    fused = (weights[:, None, None] * _norm(scores, norm)).sum(axis=0)
    return topk_rows(fused, k)


def fuse_lists(
    ids: np.ndarray, scores: np.ndarray, k: int, weights: np.ndarray, norm: str
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted score fusion of scored id lists ``[V, Q, L]`` (absent items contribute 0)."""
    V, Q, L = ids.shape
    keep = _first_occurrence(ids)
    normed = np.zeros(ids.shape, dtype=np.float64)
    for v in range(V):
        for q in range(Q):
            m = keep[v, q]
            if m.any():
                normed[v, q, m] = _norm(scores[v, q, m].astype(np.float64), norm)
    return _sum_by_query_id(ids, weights[:, None, None] * normed, keep, Q, k)


# -- re-ranks -------------------------------------------------------------------------
def xr_rerank(
    ids: np.ndarray, sims: np.ndarray, qa: np.ndarray, cap: np.ndarray, qa_weight: float
) -> tuple[np.ndarray, np.ndarray]:
    """XR stage 2: head score ``(w*qa + (1-w)*cap) * minmax(head sims)`` (a constant head gives
    zeros, as released); head re-sorted (stable), tail kept."""
    Q, L = ids.shape
    H = qa.shape[1]
    out_ids = ids.copy()
    out_s = np.where(ids >= 0, sims, -np.inf).astype(np.float32)
    for q in range(Q):
        n = int((ids[q, :H] >= 0).sum())  # padding is trailing (checked by the API)
        if n == 0:
            continue
        score = (qa_weight * qa[q, :n].astype(np.float64) + (1 - qa_weight) * cap[q, :n]) * minmax(
            sims[q, :n], constant=0.0
        )
        order = np.argsort(-score, kind="stable")
        out_ids[q, :n] = ids[q, :n][order]
        out_s[q, :n] = score[order]
    return out_s, out_ids


def promote_first_accepted(
    ids: np.ndarray, scores: np.ndarray, accepted: np.ndarray, bonus: float
) -> tuple[np.ndarray, np.ndarray]:
    """Move the first accepted candidate (in rank order) to the front with score ``max(scores) + bonus``."""
    out_ids = ids.copy()
    out_s = np.where(ids >= 0, scores, -np.inf).astype(np.float32)
    A = min(accepted.shape[1], ids.shape[1])
    for q in range(ids.shape[0]):
        hits = np.flatnonzero(accepted[q, :A] & (ids[q, :A] >= 0))
        if hits.size == 0:
            continue
        j = int(hits[0])
        top = float(out_s[q][ids[q] >= 0].max()) + bonus
        out_ids[q, 1 : j + 1] = ids[q, :j]
        out_ids[q, 0] = ids[q, j]
        out_s[q, 1 : j + 1] = np.where(ids[q, :j] >= 0, scores[q, :j], -np.inf)
        out_s[q, 0] = top
    return out_s, out_ids


# -- uncertainty gate ------------------------------------------------------------------
GATE_EPS = 1e-8  # the released code's epsilon in the margin ratio and the min-max denominators


def gate_minmax(x: np.ndarray) -> np.ndarray:
    """The gate's min-max over queries, as released: ``(x - min) / (max - min + 1e-8)`` (a
    constant column gives zeros, unlike the general :func:`minmax`)."""
    x = np.asarray(x, dtype=np.float64)
    return (x - x.min()) / (x.max() - x.min() + GATE_EPS)


def uncertainty(scores: np.ndarray, tau: float, entropy: np.ndarray | None) -> np.ndarray:
    """``u = 0.5 * gate_minmax_Q(H(softmax(S / tau))) + 0.5 * gate_minmax_Q(margin)`` with
    ``margin = clip(top2 / (top1 + 1e-8), 0, 1)`` (0 with fewer than two candidates).

    Non-finite entries of ``scores`` are padding. ``entropy`` (e.g. streamed over the
    whole gallery by :func:`octopus_topk`) replaces the entropy of the given rows.
    """
    S = np.where(np.isfinite(scores), scores, np.nan).astype(np.float64)
    H = _entropy_rows(S, tau) if entropy is None else entropy.astype(np.float64)
    ratio = np.zeros(S.shape[0], dtype=np.float64)
    for q, row in enumerate(S):
        v = np.sort(row[~np.isnan(row)])[::-1]
        if v.size >= 2:
            ratio[q] = min(max(v[1] / (v[0] + GATE_EPS), 0.0), 1.0)
    return (0.5 * gate_minmax(H) + 0.5 * gate_minmax(ratio)).astype(np.float32)
