"""Retrieval metrics on rankings of gallery item ids (lists, best first).

Each function reproduces one benchmark's official evaluation code (docs/design/evaluation.md) and
says which; all results are percentages (0-100). Rankings are plain id lists, so the
functions serve run outputs, submission files and hand-written cases alike.

| benchmark | official code reproduced | function |
|---|---|---|
| FashionIQ | CLIP4Cir / SEARLE ``fiq_compute_val_metrics`` | :func:`recall_at_k`, :func:`fashioniq_average` |
| CIRR | SEARLE ``cirr_compute_val_metrics`` | :func:`cirr_metrics` |
| CIRCO | miccunifi/CIRCO ``src/evaluation.py`` | :func:`circo_metrics`, :func:`map_at_k` |
| WebVid-CoVR | CoVR ``src/test/*/webvid_covr.py::eval_recall`` | :func:`covr_metrics` |
| DISBench | DISBench leaderboard (set EM / F1, macro) | :func:`disbench_metrics`, :func:`best_at_k` |
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from ..errors import InputError

FASHIONIQ_CATEGORIES = ("dress", "shirt", "toptee")


# -- ranking helpers ---------------------------------------------------------------------
def remove_ids(ranking: Sequence[str], drop: Iterable[str | None]) -> list[str]:
    """``ranking`` without the ids in ``drop`` (CIRR's reference removal, CoVR's masking)."""
    d = {x for x in drop if x is not None}
    return [x for x in ranking if x not in d] if d else list(ranking)


def check_no_duplicates(ranking: Sequence[str], what: str = "ranking") -> None:
    """Raise :class:`InputError` naming the first id that appears twice."""
    seen: set[str] = set()
    for x in ranking:
        if x in seen:
            raise InputError(f"{what} has duplicate prediction '{x}'")
        seen.add(x)


def _check_lengths(rankings: Sequence, *others: Sequence, fn: str) -> int:
    n = len(rankings)
    if n == 0:
        raise InputError(f"{fn}: no rankings")
    for o in others:
        if len(o) != n:
            raise InputError(f"{fn}: {n} rankings but {len(o)} ground-truth entries")
    return n


# -- recall --------------------------------------------------------------------------------
def recall_at_k(
    rankings: Sequence[Sequence[str]], targets: Sequence[Sequence[str] | str], ks: Sequence[int]
) -> dict[str, float]:
    """``R@k``: percentage of queries with at least one target in the top k.

    With one target per query this is the FashionIQ / CIRR / CoVR recall (the official
    code sums a one-hot label row over the first k ranks).
    """
    n = _check_lengths(rankings, targets, fn="recall_at_k")
    tsets = [{t} if isinstance(t, str) else set(t) for t in targets]
    out = {}
    for k in ks:
        hits = sum(1 for r, t in zip(rankings, tsets) if t & set(r[:k]))
        out[f"R@{k}"] = 100.0 * hits / n
    return out


def fashioniq_average(per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """FashionIQ's reported average: the plain mean over the three categories of each metric
    (not weighted by query counts). Needs exactly dress, shirt and toptee."""
    cats = sorted(per_category)
    if cats != sorted(FASHIONIQ_CATEGORIES):
        raise InputError(
            f"fashioniq_average needs the categories {', '.join(FASHIONIQ_CATEGORIES)}, got {', '.join(cats) or 'none'}"
        )
    keys = [k for k in per_category["dress"] if all(isinstance(per_category[c].get(k), (int, float)) for c in cats)]
    return {k: float(np.mean([per_category[c][k] for c in FASHIONIQ_CATEGORIES])) for k in keys}


# -- CIRR ----------------------------------------------------------------------------------
def cirr_metrics(
    rankings: Sequence[Sequence[str]],
    references: Sequence[str],
    targets: Sequence[str],
    members: Sequence[Sequence[str]],
    ks: Sequence[int] = (1, 5, 10, 50),
    subset_ks: Sequence[int] = (1, 2, 3),
) -> dict[str, float]:
    """CIRR: ``R@k`` after removing the reference from each ranking, ``R_subset@k`` over the
    ranking restricted to ``img_set.members`` minus the reference (5 images), and ``Avg`` =
    (R@5 + R_subset@1) / 2 as CIRR papers report it.

    Rankings should cover the whole gallery (at least every subset member); a member
    missing from a ranking counts as ranked below all ranked ones.
    """
    _check_lengths(rankings, references, targets, members, fn="cirr_metrics")
    no_ref = [remove_ids(r, [ref]) for r, ref in zip(rankings, references)]
    out = recall_at_k(no_ref, list(targets), ks)
    subsets = [subset_ranking(r, m, ref)[0] for r, m, ref in zip(no_ref, members, references)]
    for k in subset_ks:
        out[f"R_subset@{k}"] = recall_at_k(subsets, list(targets), [k])[f"R@{k}"]
    if "R@5" in out and "R_subset@1" in out:
        out["Avg"] = (out["R@5"] + out["R_subset@1"]) / 2
    return out


def subset_ranking(ranking: Sequence[str], members: Sequence[str], reference: str | None) -> tuple[list[str], int]:
    """The ranking restricted to ``members`` minus ``reference``, and how many members the
    ranking did not contain (appended after the ranked ones, in ``members`` order)."""
    group = [m for m in dict.fromkeys(members) if m != reference]
    gset = set(group)
    ranked = [x for x in ranking if x in gset]
    rest = [m for m in group if m not in set(ranked)]
    return ranked + rest, len(rest)


# -- CIRCO ---------------------------------------------------------------------------------
def average_precision_at_k(ranking: Sequence[str], gts: Sequence[str], k: int) -> float:
    """CIRCO AP@k = sum_{i<=k} P@i * rel_i / min(k, #gt). Duplicate predictions are an error."""
    top = list(ranking[:k])
    check_no_duplicates(top, f"ranking (top {k})")
    g = set(gts)
    if not g:
        raise InputError("average_precision_at_k: query with no ground truth")
    hits, s = 0, 0.0
    for i, x in enumerate(top, 1):
        if x in g:
            hits += 1
            s += hits / i
    return s / min(k, len(g))


def map_at_k(rankings: Sequence[Sequence[str]], gts: Sequence[Sequence[str]], ks: Sequence[int]) -> dict[str, float]:
    """Mean AP@k in percent (CIRCO protocol)."""
    _check_lengths(rankings, gts, fn="map_at_k")
    return {
        f"mAP@{k}": 100.0 * float(np.mean([average_precision_at_k(r, g, k) for r, g in zip(rankings, gts)])) for k in ks
    }


def circo_metrics(
    rankings: Sequence[Sequence[str]],
    gts: Sequence[Sequence[str]],
    target_ids: Sequence[str],
    ks: Sequence[int] = (5, 10, 25, 50),
    query_ids: Sequence[str] | None = None,
) -> dict[str, float]:
    """CIRCO: ``mAP@k`` over all ground truths and ``R@k`` of ``target_img_id`` alone (the
    official evaluation; no reference removal). As the official evaluator, a duplicate
    anywhere in a query's prediction list is an error (naming the query), not only in the
    scored top ``max(ks)``."""
    _check_lengths(rankings, gts, target_ids, fn="circo_metrics")
    for i, r in enumerate(rankings):
        check_no_duplicates(r, f"prediction list of query {query_ids[i] if query_ids is not None else i}")
    return {**map_at_k(rankings, gts, ks), **recall_at_k(rankings, list(target_ids), ks)}


# -- WebVid-CoVR ---------------------------------------------------------------------------
def covr_metrics(
    rankings: Sequence[Sequence[str]],
    references: Sequence[str],
    targets: Sequence[str],
    ks: Sequence[int] = (1, 5, 10, 50),
) -> dict[str, float]:
    """WebVid-CoVR: gallery items equal to the query's reference video are masked (the
    official code sets their score to -10, i.e. ranks them last; removing them is the
    same), then ``R@1/5/10/50``, ``meanR3`` = mean(R@1,R@5,R@10), ``meanR4`` = mean of all four."""
    _check_lengths(rankings, references, targets, fn="covr_metrics")
    masked = [remove_ids(r, [ref]) for r, ref in zip(rankings, references)]
    out = recall_at_k(masked, list(targets), ks)
    if all(f"R@{k}" in out for k in (1, 5, 10)):
        out["meanR3"] = (out["R@1"] + out["R@5"] + out["R@10"]) / 3
    if all(f"R@{k}" in out for k in (1, 5, 10, 50)):
        out["meanR4"] = (out["R@1"] + out["R@5"] + out["R@10"] + out["R@50"]) / 4
    return out


# -- DISBench ------------------------------------------------------------------------------
def set_scores(pred: Iterable[str], gt: Iterable[str]) -> dict[str, float]:
    """Set precision, recall, F1 and exact match (0/1) of one answer.

    An empty prediction has precision 0 (and F1 0 unless the answer is empty too)."""
    p, g = set(pred), set(gt)
    if not g:
        raise InputError("set_scores: a query with an empty ground-truth answer")
    inter = len(p & g)
    prec = inter / len(p) if p else 0.0
    rec = inter / len(g)
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"P": prec, "R": rec, "F1": f1, "EM": float(p == g)}


def disbench_metrics(
    preds: Sequence[Iterable[str]], gts: Sequence[Iterable[str]], event_types: Sequence[str]
) -> dict[str, float]:
    """DISBench: per-query set P/R/F1/EM, macro-averaged (mean over queries) overall and per
    event type (``intra-event`` -> ``*_intra``, ``inter-event`` -> ``*_inter``), in percent."""
    _check_lengths(preds, gts, event_types, fn="disbench_metrics")
    per = [set_scores(p, g) for p, g in zip(preds, gts)]
    return _disbench_average(per, event_types)


def _disbench_average(per: Sequence[Mapping[str, float]], event_types: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    groups = {"": range(len(per))}
    for et, suffix in (("intra-event", "_intra"), ("inter-event", "_inter")):
        idx = [i for i, t in enumerate(event_types) if _event_kind(t) == et]
        if idx:
            groups[suffix] = idx
    for suffix, idx in groups.items():
        for m in ("EM", "F1", "P", "R"):
            vals = [per[i][m] for i in idx if m in per[i]]
            if vals:
                out[f"{m}{suffix}"] = 100.0 * float(np.mean(vals))
    return out


def _event_kind(t: str) -> str:
    t = str(t).strip().lower().replace("_", "-")
    if t in ("intra", "intra-event"):
        return "intra-event"
    if t in ("inter", "inter-event"):
        return "inter-event"
    raise InputError(f"unknown DISBench event_type '{t}' (expected 'intra-event' or 'inter-event')")


def best_at_k(
    runs: Sequence[Sequence[Iterable[str]]], gts: Sequence[Iterable[str]], event_types: Sequence[str]
) -> dict[str, float]:
    """DISBench ``Best@k``: for each query the best F1 over ``k = len(runs)`` independent runs
    (with that run's EM), macro-averaged like :func:`disbench_metrics`; keys end in ``@k``."""
    if not runs:
        raise InputError("best_at_k: no runs")
    gts = [list(g) for g in gts]
    per_run = []
    for r in runs:
        _check_lengths(r, gts, event_types, fn="best_at_k")
        per_run.append([set_scores(p, g) for p, g in zip(r, gts)])
    best = []
    for qi in range(len(gts)):
        cand = [pr[qi] for pr in per_run]
        best.append(max(cand, key=lambda s: (s["F1"], s["EM"])))
    k = len(runs)
    return {
        f"{m}@{k}": v for m, v in _disbench_average([{"F1": b["F1"], "EM": b["EM"]} for b in best], event_types).items()
    }


def ranked_set_recall(
    rankings: Sequence[Sequence[str]], gts: Sequence[Iterable[str]], ks: Sequence[int]
) -> dict[str, float]:
    """``Recall@k`` for set answers from a ranking: mean over queries of |top-k ∩ answer| / |answer|."""
    _check_lengths(rankings, gts, fn="ranked_set_recall")
    out = {}
    for k in ks:
        vals = [len(set(r[:k]) & set(g)) / len(set(g)) for r, g in zip(rankings, gts)]
        out[f"Recall@{k}"] = 100.0 * float(np.mean(vals))
    return out
