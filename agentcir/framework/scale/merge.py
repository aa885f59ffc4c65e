"""The exact merge of per-shard top-k lists (the coordinator's half of a sharded search)."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def merge_topk(scores: Sequence[np.ndarray], ids: Sequence[np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact merge of per-shard top-k lists: score descending, ties by the lower global id,
    ``(-inf, -1)`` padding last (the scoring core's ranking rule)."""
    I = np.concatenate(ids, axis=1).astype(np.int64)
    valid = I >= 0
    S = np.where(valid, np.concatenate(scores, axis=1).astype(np.float32), np.float32(-np.inf))
    # padding sorts after every real entry, those scored -inf included
    order = np.lexsort((np.where(valid, I, np.iinfo(np.int64).max), -S), axis=-1)[:, :k]
    m = order.shape[1]
    out_s = np.full((S.shape[0], k), -np.inf, np.float32)
    out_i = np.full((S.shape[0], k), -1, np.int32)
    out_s[:, :m] = np.take_along_axis(S, order, axis=1)
    out_i[:, :m] = np.where(np.take_along_axis(valid, order, axis=1), np.take_along_axis(I, order, axis=1), -1)
    return out_s, out_i
