"""Retrieval metrics on rankings of gallery item ids (lists, best first).

These follow the official evaluation code of each benchmark (DESIGN.md §7); each
function documents the protocol it reproduces.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import InputError


def recall_at_k(rankings: Sequence[Sequence[str]], targets: Sequence[Sequence[str] | str], ks: Sequence[int]) -> dict[str, float]:
    """Percentage of queries with at least one target in the top k (CIRR/FashionIQ style)."""
    out = {}
    n = len(rankings)
    if n == 0:
        raise InputError("recall_at_k: no rankings")
    tsets = [{t} if isinstance(t, str) else set(t) for t in targets]
    for k in ks:
        hits = sum(1 for r, t in zip(rankings, tsets) if t & set(r[:k]))
        out[f"R@{k}"] = 100.0 * hits / n
    return out


def average_precision_at_k(ranking: Sequence[str], gts: Sequence[str], k: int) -> float:
    """CIRCO AP@k = sum_{i<=k} P@i * rel_i / min(k, #gt). Duplicate predictions are an error."""
    top = list(ranking[:k])
    if len(set(top)) != len(top):
        dup = next(x for x in top if top.count(x) > 1)
        raise InputError(f"ranking has duplicate prediction '{dup}' in its top {k}")
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
    return {f"mAP@{k}": 100.0 * float(np.mean([average_precision_at_k(r, g, k) for r, g in zip(rankings, gts)])) for k in ks}
