"""The public, typed functions of the scoring core.

Every function checks its inputs once (clear :class:`~._inputs.KernelInputError` naming
the argument), picks a backend through :mod:`.dispatch` (``backend="auto"`` or a name
from :data:`~.dispatch.BACKENDS`, e.g. ``backend=ctx.kernels`` inside a method), and
returns dense arrays: numpy when the main input is numpy, torch tensors (on the main
input's device) when it is a torch tensor. Semantics, shapes and the tie rule are in
README.md; :mod:`.reference` is the executable specification.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Sequence

import numpy as np

from . import dispatch
from ._inputs import (
    Gallery,
    KernelInputError,
    check_bool_mask,
    check_choice,
    check_exclude,
    check_finite_number,
    check_float,
    check_gallery,
    check_ids,
    check_k,
    check_positive,
    dtype_name,
    is_torch,
    to_backend_float,
    to_backend_gallery,
    to_backend_ids,
    to_numpy_out,
)
from ._int8 import (
    Int8Gallery,
    check_int8,
    check_rerank,
    check_shortlist,
    octopus_t,
    rerank_octopus,
    rerank_topk,
)
from ._types import OctopusTopK, TopK

AGGREGATIONS = ("mean", "max", "logsumexp", "octopus")
NORMS = ("minmax", "zscore", "none")


def _device(x: Any) -> Any:
    return x.device if is_torch(x) else None


def _out(arrays: Sequence[Any], like: Any) -> list[Any]:
    """Backend outputs as numpy, or as torch tensors on ``like``'s device when ``like`` is a tensor."""
    if is_torch(like):
        import torch

        return [
            a.to(like.device) if is_torch(a) else torch.from_numpy(np.ascontiguousarray(a)).to(like.device)
            for a in arrays
        ]
    return [to_numpy_out(a) for a in arrays]


def _ids_dev(a: np.ndarray | None, be: Any, like: Any) -> Any:
    return to_backend_ids(a, be.NATIVE, _device(like) if be.NATIVE == "torch" else None)


def _empty(k: int, like: Any, *extra: tuple[int, ...]) -> list[Any]:
    """Outputs for zero queries: scores/ids ``[0, k]`` and float32 arrays of the ``extra`` shapes."""
    arrays = [np.zeros((0, k), dtype=np.float32), np.zeros((0, k), dtype=np.int32)]
    return _out(arrays + [np.zeros(shape, dtype=np.float32) for shape in extra], like)


def _routable(param: str):
    """A gallery-scoring function whose gallery argument ``param`` may be a view that runs it
    elsewhere: an object with ``__agentcir_kernel__(name, arguments)`` (a sharded gallery,
    :class:`agentcir.framework.shards.ShardedArray`) gets the call, arguments bound by name."""

    def wrap(fn):
        sig = inspect.signature(fn)
        at = list(sig.parameters).index(param)  # its position (every such parameter is positional-or-keyword)

        @functools.wraps(fn)
        def call(*args, **kw):
            # looked up by position or name: binding the signature on every call cost more than a small scan
            hook = getattr(args[at] if len(args) > at else kw.get(param), "__agentcir_kernel__", None)
            if hook is None:
                return fn(*args, **kw)
            bound = sig.bind(*args, **kw)
            bound.apply_defaults()
            return hook(fn.__name__, dict(bound.arguments))

        return call

    return wrap


def _exclude_score(x: float | None) -> float | None:
    return None if x is None else check_finite_number(x, "exclude_score")


def _gallery(g: Any, name: str = "gallery", *, dim: int | None = None, rows: int | None = None) -> Any:
    """:func:`check_gallery`, or for an :class:`Int8Gallery` its checked ``kind="int8"`` view."""
    if isinstance(g, Int8Gallery):
        return check_int8(g, name, dim=dim, rows=rows)
    return check_gallery(g, name, dim=dim, rows=rows)


def _like(g: Any) -> Any:
    """The array whose type (numpy or a torch device) the outputs follow: an int8 gallery's codes."""
    return g.codes if isinstance(g, Int8Gallery) else g


def _backend_for(be: Any, g: Any) -> Any:
    """The backend module for gallery ``g``: an int8 gallery on the triton backend runs the torch
    backend's ops (the Triton kernels read float rows only)."""
    if getattr(g, "kind", None) == "int8" and be.__name__.endswith(".triton"):
        return dispatch.backend_module("torch")
    return be


# -- scoring against a gallery ---------------------------------------------------------
@_routable("gallery")
def cosine_topk(
    queries: Any,
    gallery: Any,
    k: int,
    *,
    exclude: Any = None,
    exclude_score: float | None = None,
    rerank: Any = None,
    shortlist: int | None = None,
    backend: str = "auto",
) -> TopK:
    """Top-k inner products of each query with the gallery, streamed in tiles.

    Args:
        queries: float ``[Q, d]`` (L2-normalised rows for cosine similarity).
        gallery: ``[N, d]`` float32, float16 or bfloat16 (L2-normalised rows), or an
            :class:`~agentcir.kernels.Int8Gallery` (int8 codes + per-row scales).
        k: how many to return; ``k > N`` pads with ``(-inf, -1)``.
        exclude: ids to exclude per query, ``[Q]`` or ``[Q, m]`` (``-1`` = none), e.g. the
            reference item.
        exclude_score: ``None`` removes excluded items; a number gives them that score.
        rerank: float32 ``[N, d]`` rows of the same items (array or memory map), e.g. those an
            int8 gallery was quantised from: the scan keeps the best ``shortlist`` per query,
            which are scored again exactly (float64 products of the float32 rows) and the top
            ``k`` of those returned (same tie and exclusion rules).
        shortlist: candidates per query for ``rerank`` (``>= k``; default ``max(4k, k + 64)``).
        backend: ``auto`` or a name from ``BACKENDS``.

    Returns:
        :class:`TopK`: float32 scores and int32 ids ``[Q, k]``, best first, ties by lower id.
    """
    g = _gallery(gallery)
    N, d = g.shape
    q = check_float(queries, "queries", 2, dim=d)
    k = check_k(k)
    ex = check_exclude(exclude, q.shape[0], N)
    es = _exclude_score(exclude_score)
    if rerank is None and shortlist is not None:
        raise KernelInputError("shortlist: only used with rerank (the float32 rows to re-score)")
    rows = None if rerank is None else check_rerank(rerank, "rerank", (N, d))
    L = None if rerank is None else check_shortlist(shortlist, k)
    be = _backend_for(dispatch.backend_module(backend), g)
    like = _like(gallery)
    if q.shape[0] == 0:
        return TopK(*_empty(k, like))
    out = be.cosine_topk(
        to_backend_float(q, be.NATIVE), to_backend_gallery(g, be.NATIVE), L or k, _ids_dev(ex, be, like), es
    )
    if rows is not None:
        out = rerank_topk(to_numpy_out(q), to_numpy_out(out[1]), rows, k, ex, es)
    return TopK(*_out(out, like))


@_routable("gallery")
def proxy_scores_topk(
    proxies: Any,
    gallery: Any,
    k: int,
    *,
    agg: str = "mean",
    tau: float = 0.04,
    reference: Any = None,
    exclude: Any = None,
    exclude_score: float | None = None,
    backend: str = "auto",
) -> TopK:
    """Score K proxies per query against the gallery, aggregate per item, keep the top k.

    Never builds a ``[Q, K, N]`` buffer (tiles of ``[Q*K, tile]`` only).

    Args:
        proxies: float ``[Q, K, d]`` (pad a shorter list by repeating its last proxy, as OCTOPUS does).
        gallery: ``[N, d]`` float32 / float16 / bfloat16.
        k: how many to return.
        agg: ``mean`` (mean_i S_i), ``max`` (max_i S_i), ``logsumexp`` (``tau * log sum_i
            exp(S_i / tau)``) or ``octopus`` (score with ``e = norm(sum_i w_i P_i)``, ``w`` the
            adaptive weights of :func:`octopus_weights`; needs ``reference``).
        tau: temperature of ``logsumexp`` and of the OCTOPUS weights.
        reference: float ``[Q, d]`` reference embeddings (``agg="octopus"`` only).
        exclude: as in :func:`cosine_topk`.
        exclude_score: as in :func:`cosine_topk`.
        backend: as in :func:`cosine_topk`.
    """
    g = check_gallery(gallery)
    N, d = g.shape
    p = check_float(proxies, "proxies", 3, dim=d)
    Q = p.shape[0]
    if p.shape[1] == 0:
        raise KernelInputError("proxies: needs at least one proxy per query (K >= 1)")
    k = check_k(k)
    agg = check_choice(agg, "agg", AGGREGATIONS)
    tau = check_positive(tau, "tau")
    if agg == "octopus":
        if reference is None:
            raise KernelInputError("reference: agg='octopus' needs the reference embeddings [Q, d]")
        r = check_float(reference, "reference", 2, dim=d, rows=Q)
    elif reference is not None:
        raise KernelInputError(f"reference: only used by agg='octopus', got agg='{agg}'")
    else:
        r = None
    ex = check_exclude(exclude, Q, N)
    be = dispatch.backend_module(backend)
    if Q == 0:
        return TopK(*_empty(k, gallery))
    nat = be.NATIVE
    out = be.proxy_scores_topk(
        to_backend_float(p, nat),
        to_backend_gallery(g, nat),
        k,
        agg,
        tau,
        None if r is None else to_backend_float(r, nat),
        _ids_dev(ex, be, gallery),
        _exclude_score(exclude_score),
    )
    return TopK(*_out(out, gallery))


@_routable("gallery")
def octopus_weights(reference: Any, proxies: Any, gallery: Any, *, tau: float = 0.04, backend: str = "auto") -> Any:
    """OCTOPUS adaptive proxy weights (docs/design/methods.md): ``w = softmax(s / tau)`` with
    ``s_i = mean_j relu(S_r[j] - S_E[i, j])``, ``S_r = ref . I^T``, ``S_E[i] = P_i . I^T``.

    One streamed pass over the gallery; returns float32 ``[Q, K]`` (rows sum to 1). ``gallery``
    may be an :class:`~agentcir.kernels.Int8Gallery` (the gaps of its dequantised rows).
    """
    g = _gallery(gallery)
    N, d = g.shape
    p = check_float(proxies, "proxies", 3, dim=d)
    if p.shape[1] == 0:
        raise KernelInputError("proxies: needs at least one proxy per query (K >= 1)")
    r = check_float(reference, "reference", 2, dim=d, rows=p.shape[0])
    tau = check_positive(tau, "tau")
    be = _backend_for(dispatch.backend_module(backend), g)
    if p.shape[0] == 0:
        return _empty(1, _like(gallery), (0, p.shape[1]))[2]
    nat = be.NATIVE
    w = be.octopus_weights(to_backend_float(r, nat), to_backend_float(p, nat), to_backend_gallery(g, nat), tau)
    return _out([w], _like(gallery))[0]


@_routable("gallery")
def octopus_gap_sums(reference: Any, proxies: Any, gallery: Any, *, backend: str = "auto") -> Any:
    """The statistic of :func:`octopus_weights` before its normalisation: float64 ``[Q, K]``
    ``sum_j relu(S_r[j] - S_E[i, j])`` over the gallery's rows. Sums of disjoint parts of a
    gallery add up, so the weights of a sharded gallery are ``softmax(sum_s sums_s / (N * tau))``
    (how :mod:`agentcir.framework.shards` merges them). One streamed pass.
    """
    g = _gallery(gallery)
    N, d = g.shape
    p = check_float(proxies, "proxies", 3, dim=d)
    r = check_float(reference, "reference", 2, dim=d, rows=p.shape[0])
    be = _backend_for(dispatch.backend_module(backend), g)
    if p.shape[0] == 0 or p.shape[1] == 0:
        return _out([np.zeros(p.shape[:2], dtype=np.float64)], _like(gallery))[0]
    nat = be.NATIVE
    return _out(
        [be.octopus_gap_sums(to_backend_float(r, nat), to_backend_float(p, nat), to_backend_gallery(g, nat))], gallery
    )[0]


@_routable("gallery")
def ldre_weights(
    before: Any, proxies: Any, gallery: Any, *, topk: int = 5, tau: float = 0.04, backend: str = "auto"
) -> Any:
    """LDRE adaptive ensemble weights (Yang et al., SIGIR 2024; released ``use_adaptive_ensemble``).

    Per query and edited caption ``e_i``: ``s_i`` = the sum of the ``topk`` largest drops
    ``relu(b . I_j - e_i . I_j)`` over the gallery (``b`` the reference caption), then
    ``w = softmax(s / max_i s / tau)``; a query whose captions never drop below ``b`` gets
    uniform weights. One streamed pass; returns float32 ``[Q, K]`` (rows sum to 1).

    Args:
        before: float ``[Q, d]`` text embedding of each query's reference caption.
        proxies: float ``[Q, K, d]`` edited (divergent) caption embeddings.
        gallery: ``[N, d]`` float32 / float16 / bfloat16 image embeddings.
        topk: m, how many of the largest drops are summed (LDRE: 5).
        tau: softmax temperature (LDRE: 0.04).
    """
    g = check_gallery(gallery)
    N, d = g.shape
    p = check_float(proxies, "proxies", 3, dim=d)
    if p.shape[1] == 0:
        raise KernelInputError("proxies: needs at least one caption per query (K >= 1)")
    b = check_float(before, "before", 2, dim=d, rows=p.shape[0])
    topk = check_k(topk, "topk")
    tau = check_positive(tau, "tau")
    be = dispatch.backend_module(backend)
    nat = be.NATIVE
    w = be.ldre_weights(to_backend_float(b, nat), to_backend_float(p, nat), to_backend_gallery(g, nat), topk, tau)
    return _out([w], gallery)[0]


@_routable("gallery")
def ldre_top_drops(before: Any, proxies: Any, gallery: Any, *, topk: int = 5, backend: str = "auto") -> Any:
    """The statistic of :func:`ldre_weights` before its sum and normalisation: float32
    ``[Q, K, min(topk, N)]``, the ``topk`` largest ``relu(b . I_j - e_i . I_j)`` per query and
    caption, descending. The top drops of a sharded gallery are the top ``topk`` of its shards'
    (how :mod:`agentcir.framework.shards` merges them). One streamed pass.
    """
    g = check_gallery(gallery)
    N, d = g.shape
    p = check_float(proxies, "proxies", 3, dim=d)
    b = check_float(before, "before", 2, dim=d, rows=p.shape[0])
    topk = check_k(topk, "topk")
    be = dispatch.backend_module(backend)
    if p.shape[0] == 0 or p.shape[1] == 0:
        return _out([np.zeros((*p.shape[:2], min(topk, N)), dtype=np.float32)], gallery)[0]
    nat = be.NATIVE
    top = be.ldre_top_drops(to_backend_float(b, nat), to_backend_float(p, nat), to_backend_gallery(g, nat), topk)
    return _out([top.astype(np.float32) if isinstance(top, np.ndarray) else top.float()], gallery)[0]


@_routable("images")
def octopus_topk(
    reference: Any,
    proxies: Any,
    target: Any,
    images: Any,
    k: int,
    *,
    visual: Any = None,
    captions: Any = None,
    lam: float = 0.2,
    tau: float = 0.04,
    entropy_tau: float = 0.02,
    exclude: Any = None,
    exclude_score: float | None = -10.0,
    rerank_images: Any = None,
    rerank_captions: Any = None,
    shortlist: int | None = None,
    backend: str = "auto",
) -> OctopusTopK:
    """OCTOPUS bidirectional fused scoring with top-k (docs/design/methods.md), in two streamed passes.

    ``w`` = :func:`octopus_weights`; ``e = norm(sum_i w_i P_i)``;
    ``S_t2v = ((e + target) / 2) . I^T``; ``S_v2t = visual . C^T``;
    ``S = lam * S_t2v + (1 - lam) * (S_v2t * S_t2v)`` (``S = S_t2v`` without ``visual``);
    excluded items (the reference) get ``exclude_score`` (-10 as in OCTOPUS; ``None`` removes them).

    Args:
        reference: ``[Q, d]`` reference image embeddings ``f_ref``.
        proxies: ``[Q, K, d]`` textual proxy embeddings.
        target: ``[Q, d]`` target-description embeddings ``q_t``.
        images: gallery image embeddings ``I`` ``[N, d]``.
        k: how many to return.
        visual: ``[Q, d]`` visual query ``q_v`` (see :func:`octopus_visual_query`), or None.
        captions: gallery caption embeddings ``C`` ``[N, d]`` (required with ``visual``).
        lam: λ of the fusion. tau: τ_w of the proxy weights. entropy_tau: temperature of
            the streamed entropy (the uncertainty gate's 0.02).
        rerank_images: float32 ``[N, d]`` rows of the same items as ``images`` (an array or a
            memory map), e.g. those an int8 ``images`` was quantised from: the scan keeps the best
            ``shortlist`` per query, whose fused scores are computed again exactly (float64 from
            the float32 rows, with the scan's weights) and the top ``k`` of those returned. The
            weights, entropy and log partition are the scan's (over every item of ``images``).
        rerank_captions: float32 ``[N, d]`` rows of the same items as ``captions``, for the
            same re-rank (required with ``captions`` and ``rerank_images``).
        shortlist: candidates per query for the re-rank (``>= k``; default ``max(4k, k + 64)``).

    Returns:
        :class:`OctopusTopK` (scores, ids, weights ``[Q, K]``, entropy and log partition ``[Q]``).
    """
    I = _gallery(images, "images")
    N, d = I.shape
    p = check_float(proxies, "proxies", 3, dim=d)
    Q = p.shape[0]
    if p.shape[1] == 0:
        raise KernelInputError("proxies: needs at least one proxy per query (K >= 1)")
    r = check_float(reference, "reference", 2, dim=d, rows=Q)
    t = check_float(target, "target", 2, dim=d, rows=Q)
    if (visual is None) != (captions is None):
        raise KernelInputError("visual/captions: give both (bidirectional fusion) or neither (text-to-image only)")
    v = None if visual is None else check_float(visual, "visual", 2, dim=d, rows=Q)
    C = None if captions is None else _gallery(captions, "captions", dim=d, rows=N)
    k = check_k(k)
    lam = check_finite_number(lam, "lam", lo=0.0, hi=1.0)
    tau = check_positive(tau, "tau")
    entropy_tau = check_positive(entropy_tau, "entropy_tau")
    ex = check_exclude(exclude, Q, N)
    es = _exclude_score(exclude_score)
    if rerank_images is None and (rerank_captions is not None or shortlist is not None):
        what = "rerank_captions" if rerank_captions is not None else "shortlist"
        raise KernelInputError(f"{what}: only used with rerank_images (the float32 image rows to re-score)")
    ri = None if rerank_images is None else check_rerank(rerank_images, "rerank_images", (N, d))
    rc = None
    if ri is not None and C is not None:
        if rerank_captions is None:
            raise KernelInputError("rerank_captions: required with captions and rerank_images")
        rc = check_rerank(rerank_captions, "rerank_captions", (N, d))
    elif rerank_captions is not None:
        raise KernelInputError("rerank_captions: only used with captions")
    L = None if ri is None else check_shortlist(shortlist, k)
    be = dispatch.backend_module(backend)
    if isinstance(images, Int8Gallery) or isinstance(captions, Int8Gallery):
        be = _backend_for(be, Gallery(None, "int8"))
    like = _like(images)
    if Q == 0:
        return OctopusTopK(*_empty(k, like, (0, p.shape[1]), (0,), (0,)))
    nat = be.NATIVE
    f = lambda x: None if x is None else to_backend_float(x, nat)  # noqa: E731
    out = be.octopus_topk(
        f(r),
        f(p),
        f(t),
        f(v),
        to_backend_gallery(I, nat),
        None if C is None else to_backend_gallery(C, nat),
        L or k,
        lam,
        tau,
        entropy_tau,
        _ids_dev(ex, be, like),
        es,
    )
    if ri is not None:
        w = to_numpy_out(out[2])
        tq = octopus_t(to_numpy_out(p), w, to_numpy_out(t)).astype(np.float32).astype(np.float64)
        vq = None if v is None else to_numpy_out(v)
        s, i = rerank_octopus(tq, vq, to_numpy_out(out[1]), ri, rc, k, lam, ex, es)
        out = (s, i, *out[2:])
    return OctopusTopK(*_out(out, like))


def octopus_visual_query(generated: Any, reference: Any) -> np.ndarray:
    """OCTOPUS visual query ``q_v = norm(f_gen + (max_d f_gen / (max_d f_ref + 1e-8)) * f_ref)``.

    The generated proxy image fused with the reference at matched peak magnitude;
    ``[Q, d]`` float32 in, ``[Q, d]`` float32 out (O(Q*d): computed here, no backend).
    """
    gen = to_numpy_out(check_float(generated, "generated", 2))
    ref = to_numpy_out(check_float(reference, "reference", 2, dim=gen.shape[1], rows=gen.shape[0]))
    scale = gen.max(axis=1, keepdims=True) / (ref.max(axis=1, keepdims=True) + 1e-8)
    q = gen.astype(np.float64) + scale * ref
    return (q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)).astype(np.float32)


# -- fusion of rankings ----------------------------------------------------------------
def _weights(weights: Any, V: int) -> np.ndarray:
    if weights is None:
        return np.ones(V, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.shape != (V,) or not np.isfinite(w).all():
        raise KernelInputError(f"weights: expected {V} finite numbers (one per list), got {np.asarray(weights).shape}")
    return w


def _lists_or_matrices(x: Any, name: str) -> tuple[np.ndarray, bool]:
    a = to_numpy_out(x)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3:
        raise KernelInputError(f"{name}: expected [V, Q, L] (a [Q, L] input counts as V = 1), got shape {a.shape}")
    if np.issubdtype(a.dtype, np.integer):
        return check_ids(a, name), True
    if np.issubdtype(a.dtype, np.floating):
        return check_float(a, name, 3), False
    raise KernelInputError(f"{name}: expected integer id lists or float score matrices, got dtype {a.dtype}")


def rrf(rankings: Any, k: int, *, z: float = 60.0, weights: Any = None, backend: str = "auto") -> TopK:
    """Reciprocal rank fusion: ``score(n) = sum_v w_v / (z + rank_v(n))``, ranks from 1.

    Args:
        rankings: either ranked id lists, integer ``[V, Q, L]`` (``-1`` padding; an id
            repeated in a list counts at its first position; absent items contribute
            nothing), or dense score matrices, float ``[V, Q, N]`` (column = item id;
            every row ranks all N items, ties by lower id). ``[Q, L]`` means V = 1.
            Tied fused scores keep the items' first-appearance order, reading list 0 first
            (for matrices: list 0's ranking), as XR's released fusion does (a dict filled
            list by list, then a stable sort); not the lower-id rule of the other ops.
        k: how many fused items to return per query.
        z: the RRF constant (60). weights: optional per-list weights ``[V]`` (default 1).
    """
    a, lists = _lists_or_matrices(rankings, "rankings")
    k = check_k(k)
    z = check_finite_number(z, "z", lo=0.0, hi=float("inf"))
    w = _weights(weights, a.shape[0])
    be = dispatch.backend_module(backend)
    out = be.rrf_lists(a, k, z, w) if lists else be.rrf_scores(a, k, z, w)
    return TopK(*_out(out, rankings))


def fuse_scores(
    scores: Any, k: int, *, ids: Any = None, weights: Any = None, norm: str = "minmax", backend: str = "auto"
) -> TopK:
    """Weighted score fusion with per-list normalisation: ``sum_v w_v * norm(s_v)``.

    Args:
        scores: float ``[V, Q, N]`` dense score matrices (column = item id), or ``[V, Q, L]``
            scores of the items in ``ids``. ``[Q, *]`` means V = 1.
        ids: None (dense) or int ``[V, Q, L]`` ids of the scored items (``-1`` padding;
            repeated ids count once, first occurrence; absent items contribute 0).
        weights: per-list weights ``[V]`` (default 1: CombSUM).
        norm: ``minmax`` (constant list -> ones), ``zscore`` (constant -> zeros) or ``none``;
            computed per (list, query) over its valid entries.
    """
    s, lists = _lists_or_matrices(scores, "scores")
    if lists:
        raise KernelInputError(f"scores: expected float scores, got integer dtype {dtype_name(np.asarray(scores))}")
    k = check_k(k)
    norm = check_choice(norm, "norm", NORMS)
    w = _weights(weights, s.shape[0])
    be = dispatch.backend_module(backend)
    if ids is None:
        return TopK(*_out(be.fuse_dense(s, k, w, norm), scores))
    i = check_ids(np.asarray(ids)[None] if np.asarray(ids).ndim == 2 else ids, "ids", shape=s.shape)
    return TopK(*_out(be.fuse_lists(i, s, k, w, norm), scores))


# -- re-ranks of candidate lists ---------------------------------------------------------
def _ranked(ids: Any, scores: Any, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """A ranking: int ids ``[Q, L]`` (trailing ``-1`` padding) and their float scores (padding ignored)."""
    i = check_ids(ids, names[0], ndim=2)
    s = to_numpy_out(scores)
    if s.shape != i.shape:
        raise KernelInputError(f"{names[1]}: expected shape {i.shape} (same as {names[0]}), got {s.shape}")
    if s.size and not np.issubdtype(s.dtype, np.floating):
        raise KernelInputError(f"{names[1]}: expected float scores, got dtype {s.dtype}")
    s = check_float(np.where(i >= 0, s, 0.0), names[1], 2)
    if i.shape[1] > 1 and ((i[:, 1:] >= 0) & (i[:, :-1] < 0)).any():
        raise KernelInputError(f"{names[0]}: -1 padding must come after every valid id of a row")
    return i, s


def xr_rerank(ids: Any, sims: Any, qa: Any, cap: Any, *, qa_weight: float = 0.5, backend: str = "auto") -> TopK:
    """XR stage-2 re-rank of the head (docs/design/methods.md).

    ``score = (qa_weight * qa + (1 - qa_weight) * cap) * minmax(sims over the head)``; the
    head (the first ``H = qa.shape[1]`` candidates) is re-sorted by score (ties keep their
    previous order), the tail keeps its order and its stage-1 sims. As in the released code
    (``XR/xr.py`` ``_take_head``), a head of equal sims min-maxes to zeros (so its order is
    kept), unlike the general min-max's ones. The released re-sort is numpy's unstable
    ``argsort``, whose order among tied scores depends on the numpy build and CPU: tie order
    is the one thing not reproduced (here: stable, stage-1 order).

    Args:
        ids: int ``[Q, L]`` stage-1 ranking (``-1`` padding at the end).
        sims: float ``[Q, L]`` stage-1 similarities of those ids.
        qa: float ``[Q, H]`` fraction of questions answered correctly on each head image (VQA).
        cap: float ``[Q, H]`` fraction answered correctly from its caption (entailment).
    Returns:
        :class:`TopK` ``[Q, L]``: head scores are the re-rank scores, tail scores the sims.
    """
    i, s = _ranked(ids, sims, ("ids", "sims"))
    Q, L = i.shape
    a = check_float(qa, "qa", 2, rows=Q)
    c = check_float(cap, "cap", 2, rows=Q)
    if a.shape != c.shape or a.shape[1] > L:
        raise KernelInputError(f"qa/cap: expected equal shapes [Q, H] with H <= {L}, got {a.shape} and {c.shape}")
    w = check_finite_number(qa_weight, "qa_weight", lo=0.0, hi=1.0)
    be = dispatch.backend_module(backend)
    return TopK(*_out(be.xr_rerank(i, s, to_numpy_out(a), to_numpy_out(c), w), ids))


def promote_first_accepted(
    ids: Any, scores: Any, accepted: Any, *, bonus: float = 100.0, backend: str = "auto"
) -> TopK:
    """Verification re-rank: the first accepted candidate (rank order) moves to the front.

    Its score becomes ``max(scores of the row) + bonus`` (OCTOPUS: +100); the others keep
    their order and scores. Rows with no accepted candidate are unchanged.

    Args:
        ids: int ``[Q, L]`` ranking (``-1`` padding at the end). scores: float ``[Q, L]``.
        accepted: bool ``[Q, A]``, ``A <= L``: verdicts for the first A candidates in rank
            order (entries after the first ``True`` are ignored, so unjudged ones may be False).
    """
    i, s = _ranked(ids, scores, ("ids", "scores"))
    m = check_bool_mask(accepted, "accepted", rows=i.shape[0], max_cols=i.shape[1])
    b = check_finite_number(bonus, "bonus")
    be = dispatch.backend_module(backend)
    return TopK(*_out(be.promote_first_accepted(i, s, m, b), ids))


def uncertainty(scores: Any, *, tau: float = 0.02, entropy: Any = None, backend: str = "auto") -> np.ndarray:
    """OCTOPUS uncertainty gate, as released (``compute_uncertainty`` of the authors' code):
    ``u = 0.5 * mm(H) + 0.5 * mm(clip(top2 / (top1 + 1e-8), 0, 1))`` with the min-max over
    queries ``mm(x) = (x - min) / (max - min + 1e-8)``.

    Args:
        scores: float ``[Q, L]`` score rows (any order; ``-inf`` = padding): their two
            largest entries give the margin (clipped to [0, 1], so a row whose best score
            is <= 0 has margin 0 or 1 as upstream; ``0`` with fewer than two candidates,
            a case the released code never meets).
        tau: softmax temperature of the entropy (0.02).
        entropy: optional float ``[Q]`` precomputed entropies (e.g. ``octopus_topk(...).entropy``,
            streamed over the whole gallery); otherwise ``H(softmax(row / tau))`` of ``scores``.
            The entropy is exact, ``-sum p log p``; upstream's ``-sum p log(p + 1e-8)`` is lower
            by at most ``N * 1e-8`` nats for N candidates (each term differs by
            ``p log(1 + 1e-8 / p) <= 1e-8``), the one difference kept: the exact form streams.
    Returns:
        float32 ``[Q]`` in [0, 1); a constant column contributes zeros (upstream's ``+ 1e-8``).
    """
    a = to_numpy_out(scores)
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.floating):
        raise KernelInputError(f"scores: expected a float [Q, L] matrix, got shape {a.shape} dtype {a.dtype}")
    if np.isnan(a).any() or np.isposinf(a).any():
        raise KernelInputError("scores: contains NaN or +inf (only -inf padding is allowed)")
    a = np.ascontiguousarray(a, dtype=np.float32)
    tau = check_positive(tau, "tau")
    e = (
        None
        if entropy is None
        else to_numpy_out(check_float(to_numpy_out(entropy).reshape(-1), "entropy", 1, rows=a.shape[0]))
    )
    be = dispatch.backend_module(backend)
    return _out([be.uncertainty(a, tau, e)], scores)[0]
